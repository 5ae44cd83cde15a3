"""A cold-start prior whose level is wrong is corrected by judged verdicts, through the loop's
own path (gateway/learning/refine_priors.py ``promise_belief``, real SQLite observations).

Found by bench/routing/live_promise.py: a price prior at mean p̂ 0.67 over RouterBench's test
prompts, for a backend right 60% of the time there, was "not moved by 400 verdicts": the
validated refit of its whole readout never predicted held-out verdicts better, so its level
was never corrected either."""

from __future__ import annotations

import numpy as np
import pytest

from gateway.learning import tables as ldb
from gateway.learning.prior_level import level_corrected
from gateway.learning.refine_priors import promise_belief, worth
from gateway.store.engine import make_engine
from gateway.store.migrate import upgrade_engine
from router_core.promise import LogitBelief
from router_core.runtime.router import Calibration, Expert, Head, Router

D, N = 8, 400


def _router() -> Router:
    rng = np.random.default_rng(0)
    E = rng.normal(size=(3, D)).astype(np.float32)
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    names = ("a", "b", "c")
    head = Head(((rng.normal(size=(D, 384)).astype(np.float32) / 5, np.zeros(D, np.float32)),))
    return Router("v1", head, tuple(Expert(n, E[i], 0.001) for i, n in enumerate(names)),
                  Calibration(a={n: 2.0 for n in names}, b={n: 0.0 for n in names},
                              a0=2.0, b0=0.0), k=0)


def _prior(router: Router, Q: np.ndarray, level: float) -> LogitBelief:
    W = np.stack([2.0 * np.asarray(e.descriptor, float) for e in router.experts])
    from router_core.promise.priors import level_intercept

    kappa = np.full(3, 1 / 3)
    b = level_intercept(kappa @ W, Q, level)
    return LogitBelief.prior(kappa, b, level, 1.0, "prior:price", W, Q)


def _judged(tmp_path, router: Router, true_p: np.ndarray, phi: np.ndarray, seed: int):
    """SQLite with one 80%-right verdict per prompt of backend "new" (outcome ~ true_p)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'learn.db'}")
    upgrade_engine(engine)
    rng = np.random.default_rng(seed)
    for i in range(len(phi)):
        key = ldb.prompt_key(f"prompt {i}", b"test-prompt-secret")
        ldb.record_served(engine, request_id=f"r{i}", tenant_id=None, text=None, key=key,
                          embedding=phi[i], route="auto-cheap", model="new", backend="new",
                          cost_usd=0.001)  # fmt: skip
        good = rng.random() < true_p[i]
        verdict = good != (rng.random() < 0.2)
        ldb.add_observation(engine, key=key, model="new", quality=float(verdict),
                            cost_usd=0.001, source="shadow")
    return engine


def test_a_prior_set_too_high_is_brought_to_the_verdicts_level(tmp_path) -> None:
    router = _router()
    phi = np.random.default_rng(1).normal(size=(N, 384)).astype(np.float32)
    Q = router.project(phi)
    prior = _prior(router, Q, 0.72)
    z, _ = prior.logits(Q)
    true_p = 1 / (1 + np.exp(-(z - 0.45)))  # the prior's shape, its level 0.09 too high
    engine = _judged(tmp_path, router, true_p, phi, seed=2)
    before = float(prior.estimate(Q)[0].mean())
    refined = promise_belief(engine, router, "new", prior)
    after = float(refined.estimate(Q)[0].mean())
    assert before - true_p.mean() > 0.07
    assert abs(after - true_p.mean()) < 0.04, (before, after, true_p.mean(), refined.how)
    assert refined.n_outcomes == N


def test_level_correction_keeps_a_right_level_and_the_prior_s_uncertainty() -> None:
    router = _router()
    Q = router.project(np.random.default_rng(3).normal(size=(N, 384)).astype(np.float32))
    prior = _prior(router, Q, 0.6)
    p = prior.estimate(Q)[0]
    rng = np.random.default_rng(4)
    verdicts = np.array([float((rng.random() < x) != (rng.random() < 0.2)) for x in p])
    same = level_corrected(prior, Q, verdicts, np.ones(N), 0.8)
    assert abs(float(same.estimate(Q)[0].mean()) - p.mean()) < 0.03
    np.testing.assert_array_equal(same.chol, prior.chol)  # no confidence gained on the shape
    np.testing.assert_array_equal(same.coef, prior.coef)
    assert level_corrected(prior, Q[:0], np.zeros(0), np.zeros(0), 0.8) is prior


def test_a_level_moved_up_is_not_trusted_more_than_its_prior(tmp_path) -> None:
    """The verdicts pin a level, not a shape: where the corrected level puts p̂ near 1 the
    belief must not read as better known than the prior was (a pseudo-count read off a logit
    variance grows there; refine_priors.py ``worth``), or the promise rule would send it the
    prompts it only looks sure of. 30 verdicts: too few for the shape refit to be kept."""
    router = _router()
    phi = np.random.default_rng(5).normal(size=(30, 384)).astype(np.float32)
    Q = router.project(phi)
    prior = _prior(router, Q, 0.6)
    z, _ = prior.logits(Q)
    true_p = 1 / (1 + np.exp(-(z + 1.0)))  # the prior's shape, its level too low
    engine = _judged(tmp_path, router, true_p, phi, seed=6)
    refined = promise_belief(engine, router, "new", prior)
    assert "shape not moved" in refined.how
    p, n = refined.estimate(Q)
    assert float(p.mean()) > float(prior.estimate(Q)[0].mean()) + 0.1  # the level moved up
    assert worth(prior, Q) == pytest.approx(1.0, rel=0.05)  # the prior's n₀
    assert float(n.max()) <= worth(prior, Q)


def test_the_bench_refines_as_the_loop_does(tmp_path) -> None:
    """``belief_from_verdicts`` (no database; bench/routing/promise.py refines its priors with
    it) gives the loop's own belief for the same verdicts, and leaves a prior no verdict names
    as it is."""
    from gateway.learning.refine_priors import belief_from_verdicts

    router = _router()
    phi = np.random.default_rng(7).normal(size=(60, 384)).astype(np.float32)
    Q = router.project(phi)
    prior = _prior(router, Q, 0.7)
    z, _ = prior.logits(Q)
    engine = _judged(tmp_path, router, 1 / (1 + np.exp(-(z - 0.6))), phi, seed=8)
    loop = promise_belief(engine, router, "new", prior)
    obs = ldb.load_observations(engine)
    keys = list(dict.fromkeys(obs["prompt_key"]))
    _, stored = ldb.load_prompts(engine, keys)
    query_of = dict(zip(keys, router.project(stored)))
    rows = obs[["prompt_key", "model", "quality"]].to_dict("records")
    bench = belief_from_verdicts("new", prior, rows, query_of)
    np.testing.assert_allclose(bench.estimate(Q)[0], loop.estimate(Q)[0])
    assert bench.how == loop.how and bench.n_outcomes == loop.n_outcomes == 60
    assert belief_from_verdicts("other", prior, rows, query_of) is prior
