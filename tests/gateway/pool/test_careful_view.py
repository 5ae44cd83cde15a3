"""The promise rule's careful view in the gateway (router_core.promise.rule, "careful"):
evidence narrows the rule, never widens it, so a backend refined by outcomes is routed only
where its belief before any outcome also allowed it; a claim or prior no outcome has checked
is that belief itself."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from gateway.pool.promise import Quality, belief_before_outcomes
from router_core.promise import LogitBelief, TrainedBelief, drop_bounds


def _belief(level: float, n_outcomes: int = 0) -> LogitBelief:
    coef = np.array([0.5, -0.5])
    W = np.eye(2)
    Q = np.random.default_rng(0).normal(size=(50, 2))
    b = float(np.log(level / (1 - level)))
    return replace(LogitBelief.prior(coef, b, level, 20.0, "prior:price", W, Q),
                   n_outcomes=n_outcomes)


def test_a_belief_refined_by_outcomes_is_seen_as_its_prior_in_the_careful_view() -> None:
    prior = _belief(0.6)
    refined = _belief(0.9, n_outcomes=300)
    claim = _belief(0.95)  # published, no outcome has checked it
    trained = TrainedBelief(np.array([0.1, 0.2]), 0.5, 50.0)
    assert belief_before_outcomes(Quality(refined, "refined", 0.9, prior)) is prior
    assert belief_before_outcomes(Quality(claim, "claim", 0.95, prior)) is claim
    assert belief_before_outcomes(Quality(prior, "prior", 0.6, prior)) is prior
    assert belief_before_outcomes(Quality(trained, "trained", 0.6)) is trained


def test_the_careful_bound_of_a_backend_refined_up_is_its_prior_s() -> None:
    Q = np.random.default_rng(1).normal(size=(20, 2))
    ref, prior, refined = _belief(0.9), _belief(0.6), _belief(0.9, n_outcomes=300)
    P, N = (np.stack(a, axis=1) for a in zip(ref.estimate(Q), refined.estimate(Q)))
    P0, N0 = (np.stack(a, axis=1) for a in zip(ref.estimate(Q), prior.estimate(Q)))
    careful = drop_bounds(P, N, 0, 1.0, before=(P0, N0))
    np.testing.assert_allclose(careful, drop_bounds(P0, N0, 0, 1.0))
    assert (careful[:, 1] > drop_bounds(P, N, 0, 1.0)[:, 1]).all()
