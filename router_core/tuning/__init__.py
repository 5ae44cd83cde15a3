"""What builds or tunes a router artifact after training, offline: the encoder cascade
(cascade_fit), a route's λ (lambda_choice), p̂'s calibration (calibration_fit), the
promise rule's parameters (promise_measure). A serving process imports none of it.
"""
