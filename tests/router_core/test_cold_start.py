"""Cold start: traits from names, a prior placed among size and family peers, refinement."""

from __future__ import annotations

import numpy as np

from router_core.cold_start.placement import (
    ModelTraits,
    identity_traits,
    neighbour_weights,
    place_prior,
    refine,
    traits_from_name,
)
from router_core.identity.table import identity_table
from router_core.runtime.router import Calibration, Expert, Head, Router


def _router(d: int = 6) -> Router:
    eye = np.eye(d, dtype=np.float32)
    experts = tuple(
        Expert(name, eye[i], cost) for i, (name, cost) in enumerate(
            [("small-7b", 0.1), ("mid-70b", 0.5), ("big", 1.0)]
        )
    )  # fmt: skip
    cal = Calibration(a={"small-7b": 4.0, "mid-70b": 5.0, "big": 6.0},
                      b={"small-7b": -1.0, "mid-70b": 0.0, "big": 1.0}, a0=5.0, b0=0.0)  # fmt: skip
    head = Head(layers=((eye, np.zeros(d, dtype=np.float32)),))
    return Router(version="t", head=head, experts=experts, calibration=cal, k=0, delta=0.0)


KNOWN = {
    "small-7b": ModelTraits(family="llama-3.1", active_b=7, tuned=True),
    "mid-70b": ModelTraits(family="llama-3.1", active_b=70, tuned=True),
    "big": ModelTraits(family="gpt-4", usd_per_mtok_out=30.0, tuned=True),
}


def test_traits_come_from_the_name_and_never_invent_a_size():
    t = traits_from_name("together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo")
    assert (t.family, t.active_b, t.tuned) == ("llama-3.1", 70.0, True)
    assert traits_from_name("groq/llama-3.1-8b-instant").active_b == 8.0
    assert traits_from_name("mistralai/Mixtral-8x22B-Instruct-v0.1").active_b == 44.0
    assert traits_from_name("gpt-4o-mini", usd_out=0.6).active_b is None
    assert abs(traits_from_name("gpt-4o-mini", usd_out=0.6).effective_size() - 48.0) < 1e-9


def test_the_prior_sits_with_its_size_and_family_peers():
    router = _router()
    w = neighbour_weights(ModelTraits("llama-3.1", 70, True), KNOWN, router.model_names)
    assert w.argmax() == 1 and abs(w.sum() - 1) < 1e-9
    prior = place_prior(router, ModelTraits("llama-3.1", 70, True), KNOWN, pessimism=0.0)
    assert int(np.argmax(prior.descriptor)) == 1
    assert abs(np.linalg.norm(prior.descriptor) - 1) < 1e-5
    cheap = place_prior(router, ModelTraits("llama-3.1", 7, True), KNOWN, pessimism=0.0)
    assert cheap.b < prior.b  # a small model's prior level is its small peers'
    shy = place_prior(router, ModelTraits("llama-3.1", 70, True), KNOWN, pessimism=0.5)
    assert abs((prior.b - shy.b) - 0.5) < 1e-9


def test_outcomes_refine_the_prior_towards_what_the_model_did():
    router = _router()
    prior = place_prior(router, ModelTraits("llama-3.1", 70, True), KNOWN)
    rng = np.random.default_rng(0)
    Q = rng.normal(size=(400, 6))
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    truth = np.array([0, 0, 0, 1.0, 0, 0])  # strong where no peer is
    u = (rng.random(400) < 1 / (1 + np.exp(-6 * Q @ truth))).astype(float)
    refined = refine(prior, Q, u)
    assert refined.n_outcomes == 400
    assert refined.descriptor @ truth > prior.descriptor @ truth + 0.3
    same = refine(prior, Q[:1], u[:1])  # one outcome carries no signal: the prior stays
    np.testing.assert_array_equal(same.descriptor, prior.descriptor)
    assert same.n_outcomes == 1


def test_every_expert_of_the_identity_table_has_a_size_for_its_prior():
    traits = identity_traits(identity_table())
    assert all(t.effective_size() for t in traits.values())
