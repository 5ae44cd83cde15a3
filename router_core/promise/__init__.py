"""A route's promise against its reference: estimates with uncertainty, the rule, learning.

One concept per module, read in this order:
- ``belief``: p̂ with a pseudo-count n (the Beta view) and its bounds;
- ``logit_belief``: a backend's readout with a Gaussian belief (priors, refined) or a trained
  expert's fixed pseudo-count; both give (p̂, n) per prompt;
- ``belief_stack``: a pool's beliefs stacked so serving gets every (p̂, n) in one pass;
- ``priors``: a prior from one aggregate figure (capability neighbours), or from price alone;
- ``trained``: the pseudo-counts of trained experts and of aggregate priors, measured;
- ``rule``: the cheapest backend confidently within the promise, and its explanation record;
- ``confidence``: the rule's tolerance (from the pool's own bounds) and confidence z
  (chosen one rung down, where outcomes are known);
- ``refine``: the Laplace refinement from noisy judged outcomes; ``judge``: shadow verdicts.
"""

from router_core.promise.belief import beta_sd, bounds
from router_core.promise.confidence import (
    Case,
    RuleParams,
    choose_confidence,
    choose_rule,
    realized,
    tolerance_for,
)
from router_core.promise.judge import JUDGE_ACCURACY, refine_from_verdicts, simulate_verdicts
from router_core.promise.logit_belief import (
    LogitBelief,
    TrainedBelief,
    router_weights,
    stack_estimates,
)
from router_core.promise.priors import prior_from_aggregate, prior_from_price
from router_core.promise.refine import judged_counts, refine, validated_refine
from router_core.promise.rule import PROMISES, drop_bounds, explain, promise_choice
from router_core.promise.trained import aggregate_prior_pseudo_count, trained_pseudo_count

__all__ = [
    "JUDGE_ACCURACY",
    "PROMISES",
    "Case",
    "LogitBelief",
    "RuleParams",
    "TrainedBelief",
    "aggregate_prior_pseudo_count",
    "beta_sd",
    "bounds",
    "choose_confidence",
    "choose_rule",
    "drop_bounds",
    "explain",
    "judged_counts",
    "prior_from_aggregate",
    "prior_from_price",
    "promise_choice",
    "realized",
    "refine",
    "refine_from_verdicts",
    "router_weights",
    "simulate_verdicts",
    "stack_estimates",
    "tolerance_for",
    "trained_pseudo_count",
    "validated_refine",
]
