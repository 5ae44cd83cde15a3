"""Priors from an aggregate figure, from price, and refinement from judged outcomes."""

import numpy as np

from router_core.promise import (
    LogitBelief,
    aggregate_prior_pseudo_count,
    prior_from_aggregate,
    prior_from_price,
    refine,
    trained_pseudo_count,
)
from router_core.promise.priors import closeness_weights

D = 8


def _queries(n, seed=0):
    q = np.random.default_rng(seed).normal(size=(n, D))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _known(seed=1):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(5, D)) * 2
    b = np.linspace(-1.0, 1.5, 5)
    Q = _queries(400)
    agg = (1 / (1 + np.exp(-(Q @ W.T + b)))).mean(axis=0)
    return W, b, agg, Q


def test_aggregate_prior_matches_the_aggregate_on_average():
    W, b, agg, Q = _known()
    for target in (0.35, 0.6, 0.9):
        prior = prior_from_aggregate(target, W, b, agg, Q, n0=5)
        p, n = prior.estimate(Q)
        assert abs(p.mean() - target) < 1e-4
        assert prior.how == "prior:aggregate" and np.median(n) < 20


def test_neighbours_weigh_by_closeness_of_their_figures():
    agg = np.array([0.30, 0.50, 0.62, 0.70, 0.71])
    w = closeness_weights(0.70, agg)
    assert abs(w.sum() - 1) < 1e-12
    assert np.all(np.diff(w[np.argsort(np.abs(agg - 0.70))]) <= 1e-12)  # closer, heavier
    assert w[0] < 1e-3  # a far figure barely counts


def test_price_prior_is_barely_known():
    W, b, agg, Q = _known()
    prior = prior_from_price(0.5, W, b, agg, np.array([0.1, 0.3, 1, 3, 10]), Q)
    _, n = prior.estimate(Q)
    assert prior.how == "prior:price" and np.median(n) < 5


def test_refinement_tightens_bounds_and_moves_towards_the_truth():
    rng = np.random.default_rng(2)
    w_true = rng.normal(size=D) * 3
    Q = _queries(3000, seed=3)
    p_true = 1 / (1 + np.exp(-(Q @ w_true + 0.5)))
    prior = LogitBelief.prior(np.zeros(D), 0.0, 0.5, n0=3, how="prior:aggregate")
    y = (rng.random(len(Q)) < p_true).astype(float)
    judged = np.where(rng.random(len(Q)) < 0.8, y, 1 - y)  # an 80% judge
    Qt = _queries(200, seed=4)
    pt = 1 / (1 + np.exp(-(Qt @ w_true + 0.5)))
    last_n, last_err = 0.0, np.inf
    first = np.mean((prior.estimate(Qt)[0] - pt) ** 2)
    for n_obs in (50, 500, 3000):
        post = refine(prior, Q[:n_obs], judged[:n_obs], np.ones(n_obs), accuracy=0.8)
        p, n = post.estimate(Qt)
        err = np.mean((p - pt) ** 2)
        assert n.mean() > last_n and err < last_err + 1e-3
        last_n, last_err = n.mean(), err
        assert post.how == f"refined:{n_obs}"
    assert last_err < 0.5 * first


def test_trained_pseudo_count_rewards_calibration():
    rng = np.random.default_rng(5)
    p = rng.uniform(0.05, 0.95, 4000)
    y = (rng.random(4000) < p).astype(float)
    good = trained_pseudo_count(p, y)
    bad = trained_pseudo_count(np.clip(p + 0.2, 0, 1), y)
    assert good > 10 * bad and bad >= 1


def test_aggregate_prior_pseudo_count_is_small_and_finite():
    W, b, agg, Q = _known()
    n0 = aggregate_prior_pseudo_count(W, b, agg, Q, _queries(300, seed=9))
    assert 1 <= n0 <= 100


def test_refined_pseudo_count_never_exceeds_the_cap():
    from dataclasses import replace

    rng = np.random.default_rng(6)
    Q = _queries(2000, seed=7)
    prior = replace(LogitBelief.prior(np.zeros(D), 0.0, 0.5, n0=3, how="prior:aggregate"),
                    n_cap=40.0)
    post = refine(prior, Q, (rng.random(2000) < 0.5).astype(float), np.ones(2000))
    _, n = post.estimate(Q)
    assert np.all(n <= 40.0 + 1e-9) and n.mean() > 20


def test_a_pinned_level_is_hardly_moved_by_noisy_verdicts():
    W, b, agg, Q = _known()
    free = prior_from_aggregate(0.6, W, b, agg, Q, n0=5)
    pinned = prior_from_aggregate(0.6, W, b, agg, Q, n0=5, n_aggregate=5000)
    assert np.median(pinned.estimate(Q)[1]) < 3 * np.median(free.estimate(Q)[1])
    rng = np.random.default_rng(8)
    judged = (rng.random(300) < 0.45).astype(float)  # verdicts that say the level is lower
    moved = [abs(refine(p, Q[:300], judged, np.ones(300), 0.8).estimate(Q)[0].mean() - 0.6)
             for p in (free, pinned)]
    assert moved[1] < 0.5 * moved[0]


def test_refinement_is_kept_only_where_held_out_verdicts_confirm_it():
    from router_core.promise import validated_refine

    rng = np.random.default_rng(9)
    Q = _queries(600, seed=10)
    prior = LogitBelief.prior(np.zeros(D), 0.0, 0.5, n0=3, how="prior:aggregate")
    noise = (rng.random(600) < 0.5).astype(float)  # verdicts unrelated to the prompt
    kept = validated_refine(prior, Q, noise, np.ones(600), accuracy=0.8)
    assert np.allclose(kept.theta, prior.theta) and kept.n_outcomes == 600
    w_true = rng.normal(size=D) * 4
    y = (rng.random(600) < 1 / (1 + np.exp(-(Q @ w_true)))).astype(float)
    moved = validated_refine(prior, Q, y, np.ones(600), accuracy=1.0)
    assert moved.how == "refined:600"


def test_the_stacked_beliefs_give_each_beliefs_own_estimate():
    """BeliefStack (serving's one-pass form) against each belief's own ``estimate``: priors on
    the known experts' basis and in the head's coordinates, a refined one with a cap, and
    trained experts, mixed in one pool."""
    from dataclasses import replace

    from router_core.promise import TrainedBelief, stack_estimates
    from router_core.promise.belief_stack import BeliefStack

    W, b, agg, Q = _known()
    rng = np.random.default_rng(8)
    Qo = _queries(300, seed=9)
    refined = refine(replace(LogitBelief.prior(np.zeros(D), 0.0, 0.5, n0=3, how="prior:aggregate"),
                             n_cap=40.0), Qo, (rng.random(300) < 0.6).astype(float), np.ones(300))
    beliefs = [TrainedBelief(w=W[0], b=float(b[0]), n=120.0),
               prior_from_aggregate(0.7, W, b, agg, Q, n0=5),
               prior_from_price(0.5, W, b, agg, np.array([0.1, 0.3, 1, 3, 10]), Q),
               refined,
               TrainedBelief(w=W[3].astype(np.float32), b=float(b[3]), n=80.0)]
    Qt = _queries(50, seed=10)
    want_p, want_n = stack_estimates(beliefs, Qt)
    got_p, got_n = BeliefStack(beliefs).estimate(Qt)
    np.testing.assert_allclose(got_p, want_p, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(got_n, want_n, rtol=1e-7, atol=1e-9)
    one_p, one_n = BeliefStack(beliefs).estimate(Qt[0])  # one prompt, as served
    np.testing.assert_allclose(one_p, want_p[:1], rtol=1e-9)
    np.testing.assert_allclose(one_n, want_n[:1], rtol=1e-7)
    assert BeliefStack([]).estimate(Qt)[0].shape == (50, 0)


def test_a_refit_must_clear_the_noise_to_be_kept():
    """At any held-out gain, verdicts unrelated to the prompt kept a reshaped readout about a
    third of the time (14 of 40 draws of 80); ``min_z`` asks the gain to be clear of its own
    standard error (the gateway's CONFIRM_Z, 1.64: ≈5% of such draws), and a real signal is
    kept still."""
    from router_core.promise import validated_refine

    prior = LogitBelief.prior(np.zeros(D), 0.0, 0.5, n0=3, how="prior:aggregate")
    kept = {0.0: 0, 1.64: 0}
    for seed in range(40):
        rng = np.random.default_rng(seed)
        Q = _queries(80, seed=100 + seed)
        noise = (rng.random(80) < 0.5).astype(float)
        for z in kept:
            b = validated_refine(prior, Q, noise, np.ones(80), accuracy=0.8, min_z=z)
            kept[z] += b.how.startswith("refined")
    assert kept[0.0] >= 10
    assert kept[1.64] <= 4
    rng = np.random.default_rng(9)
    Q = _queries(600, seed=10)
    w_true = rng.normal(size=D) * 4
    y = (rng.random(600) < 1 / (1 + np.exp(-(Q @ w_true)))).astype(float)
    assert validated_refine(prior, Q, y, np.ones(600), accuracy=1.0, min_z=1.64).how == \
        "refined:600"
