"""train_router on a real RouterBench slice: artifact round trip, determinism, flags."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from router_core.artifact import load_meta, load_probes, load_router
from router_core.descriptors import ProbeOutcome
from router_core.training import TrainConfig, train_router

FAST = TrainConfig(n_probes=48, epochs=15, batch_size=64, hidden=64, progress=False)
LAMS = np.array([0.0, 0.05, 0.2, 0.5, 1.0, 3.0])


@pytest.fixture(scope="module")
def trained(mbpp_table, mbpp_embeddings):
    return train_router(mbpp_table, FAST, embeddings=mbpp_embeddings)


def test_router_shape_metrics_and_probes(trained, mbpp_table):
    r = trained.router
    assert r.model_names == mbpp_table.models
    assert r.head.in_dim == 384 and r.head.out_dim == 48
    d = np.stack([e.descriptor for e in r.experts])
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-5)
    train_ids = set(mbpp_table.prompt_ids[np.asarray(mbpp_table.split) == "train"])
    assert set(trained.probes.ids) <= train_ids  # probes come from training rows only
    m = trained.metrics
    assert m["n_val"] > 0 and 1 <= m["best_epoch"] <= FAST.epochs
    assert 0.0 <= m["val_brier"] < 0.25  # better than a coin on 0/1 outcomes
    assert len(trained.data_hash) == 64


def test_save_load_route_gives_the_same_decisions(trained, mbpp_table, mbpp_embeddings, tmp_path):
    path = trained.save(tmp_path / "router")
    loaded = load_router(path)
    meta = load_meta(path)
    assert meta["data_hash"] == trained.data_hash
    assert meta["metrics"]["best_epoch"] == trained.metrics["best_epoch"]
    assert [p["id"] for p in load_probes(path)] == list(trained.probes.ids)
    test = np.asarray(mbpp_table.split) == "test"
    q_mem = trained.router.project(mbpp_embeddings[test])
    q_disk = loaded.project(mbpp_embeddings[test])
    np.testing.assert_array_equal(q_mem, q_disk)
    batch = loaded.route_batch(q_disk, LAMS)
    names = loaded.model_names
    for li, lam in enumerate(LAMS):
        for i, q in enumerate(q_disk):
            d_mem = trained.router.route(q_mem[i], lam)
            d_disk = loaded.route(q, lam)
            assert d_mem.chosen == d_disk.chosen == names[batch[li, i]]
            assert d_mem.ranked == d_disk.ranked


def test_route_batch_matches_route_with_all_candidates_and_filters(trained, mbpp_embeddings):
    r = trained.router
    q = r.project(mbpp_embeddings[:60])
    allowed = set(r.model_names[::2])
    for k in (2, len(r.experts)):
        batch = r.route_batch(q, LAMS, k=k, allowed=allowed, delta=0.05)
        for li, lam in enumerate(LAMS):
            chosen = [r.route(x, lam, k=k, allowed=allowed, delta=0.05).chosen for x in q]
            assert chosen == [r.model_names[j] for j in batch[li]]


def test_same_seed_same_router_other_seed_differs(trained, mbpp_table, mbpp_embeddings):
    again = train_router(mbpp_table, FAST, embeddings=mbpp_embeddings)
    for (w1, b1), (w2, b2) in zip(trained.router.head.layers, again.router.head.layers):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)
    assert trained.router.calibration == again.router.calibration
    other = train_router(mbpp_table, dataclasses.replace(FAST, seed=1), embeddings=mbpp_embeddings)
    assert not np.array_equal(other.router.head.layers[0][0], trained.router.head.layers[0][0])


def test_ablation_flags_and_warm_start(trained, mbpp_table, mbpp_embeddings):
    vanilla = train_router(
        mbpp_table,
        dataclasses.replace(FAST, loss="vanilla", use_caro=False),
        embeddings=mbpp_embeddings,
    )
    assert vanilla.router.config["train"]["loss"] == "vanilla"
    assert "val_caro" not in vanilla.history[0]
    assert "val_caro" in trained.history[0]
    warm = train_router(
        mbpp_table,
        dataclasses.replace(FAST, epochs=1),
        init=trained.router,
        embeddings=mbpp_embeddings,
    )
    assert warm.probes == trained.probes  # the warm start keeps the descriptor space
    moved = np.abs(warm.router.head.layers[0][0] - trained.router.head.layers[0][0]).max()
    assert moved < 0.05  # one epoch from the old weights, not a fresh init


def test_unseen_models_are_routed_by_descriptor(mbpp_table, mbpp_embeddings):
    import dataclasses as dc

    unseen = mbpp_table.models[-4:]
    table = dc.replace(mbpp_table, unseen_models=unseen)
    res = train_router(table, FAST, embeddings=mbpp_embeddings)
    assert res.router.model_names == unseen  # the pool is the held-out models
    assert res.router.config["train_models"] == list(mbpp_table.models[:-4])
    for m in unseen:  # placed by their probe record, not left to the pooled fallback
        assert m in res.router.calibration.a
    d = res.router.route(res.router.project(mbpp_embeddings[:1])[0], 0.0)
    assert d.chosen in unseen


def test_unseen_models_get_their_probe_readout(mbpp_table, mbpp_embeddings):
    """Readout (default): each unseen model's (e_h, a_h, b_h) is the logistic fit of its
    probe outcomes on the probes' q; "level" keeps the footprint as its descriptor."""
    import dataclasses as dc

    from router_core.cold_start.readout import fit_readout

    unseen = mbpp_table.models[-4:]
    table = dc.replace(mbpp_table, unseen_models=unseen)
    res = train_router(table, FAST, embeddings=mbpp_embeddings)
    level = train_router(
        table, dc.replace(FAST, calibrate_unseen="level"), embeddings=mbpp_embeddings
    )
    pos = {p: i for i, p in enumerate(map(str, table.prompt_ids))}
    rows = [pos[p] for p in res.probes.ids]
    Q = res.router.project(mbpp_embeddings[rows])
    for m in unseen:
        want = fit_readout(Q, table.quality[rows, table.models.index(m)])
        e = res.router.experts[res.router.model_names.index(m)]
        np.testing.assert_allclose(e.descriptor, want.descriptor, atol=1e-5)
        assert res.router.calibration.a[m] == pytest.approx(want.a, rel=1e-5)
        footprint = level.router.experts[level.router.model_names.index(m)].descriptor
        assert float(e.descriptor @ footprint) < 0.999  # its own direction


def _probe_outcomes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """n unit query vectors in 16 dimensions and 0/1 outcomes drawn from σ(8·q₃ − 0.5)."""
    rng = np.random.default_rng(seed)
    Q = rng.normal(size=(n, 16))
    Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    u = (rng.random(n) < 1 / (1 + np.exp(-(8.0 * Q[:, 3] - 0.5)))).astype(float)
    return Q, u


def test_fit_readout_recovers_a_direction_and_refuses_no_signal():
    from router_core.cold_start.readout import fit_readout

    Q, u = _probe_outcomes(400, seed=0)
    r = fit_readout(Q, u, c=10.0)
    assert r is not None and abs(float(np.linalg.norm(r.descriptor)) - 1) < 1e-5
    assert r.descriptor[3] > 0.9 and r.a > 2
    assert fit_readout(Q, np.ones(400)) is None  # every probe right: no direction to learn
    assert fit_readout(Q[:1], u[:1]) is None


def test_fit_readout_with_a_prior_refines_it():
    """A zero prior is sklearn's own fit; a strong prior (small C) keeps the prior's
    direction; a weak one moves it toward the outcomes' direction."""
    from router_core.cold_start.readout import fit_readout

    Q, u = _probe_outcomes(192, seed=1)
    plain = fit_readout(Q, u)
    zero = fit_readout(Q, u, prior=np.zeros(16))
    np.testing.assert_allclose(zero.descriptor, plain.descriptor, atol=1e-3)
    assert zero.a == pytest.approx(plain.a, rel=1e-3) and zero.b == pytest.approx(plain.b, abs=1e-3)
    prior = np.zeros(16)
    prior[5] = 3.0  # a fingerprint that points elsewhere
    strong = fit_readout(Q, u, c=1e-4, prior=prior)
    assert strong.descriptor[5] > 0.99 and strong.a == pytest.approx(3.0, rel=0.01)
    weak = fit_readout(Q, u, c=10.0, prior=prior)
    assert weak.descriptor[3] > weak.descriptor[5] > 0  # the outcomes win, the prior stays


def test_unseen_fingerprinted_models_refine_their_fingerprint(mbpp_table, mbpp_embeddings):
    """A model described by another kind (a stand-in fingerprint here) whose probe outcomes
    are in the table: its readout has a_h·e_h of the level rule as prior mean; with
    ``readout_fingerprints=False`` it keeps the fingerprint and the level rule."""
    from router_core.cold_start.readout import fit_readout

    class Fingerprint(ProbeOutcome):  # any non-probe-outcome kind; reversed probe order
        name = "test-fingerprint"

        def raw(self, source, probes, models):
            return super().raw(source, probes, models)[:, ::-1]

    unseen = mbpp_table.models[-3:]
    table = dataclasses.replace(mbpp_table, unseen_models=unseen)
    kw = {"descriptor": Fingerprint(), "embeddings": mbpp_embeddings}
    refined = train_router(table, FAST, **kw)
    kept = train_router(table, dataclasses.replace(FAST, readout_fingerprints=False), **kw)
    pos = {p: i for i, p in enumerate(map(str, table.prompt_ids))}
    rows = [pos[p] for p in refined.probes.ids]
    Q = refined.router.project(mbpp_embeddings[rows])
    for m in unseen:
        e = kept.router.experts[kept.router.model_names.index(m)].descriptor
        prior = kept.router.calibration.a[m] * e.astype(float)
        want = fit_readout(Q, table.quality[rows, table.models.index(m)], prior=prior)
        got = refined.router.experts[refined.router.model_names.index(m)]
        assert got.kind == "test-fingerprint"
        np.testing.assert_allclose(got.descriptor, want.descriptor, atol=1e-5)
        assert refined.router.calibration.a[m] == pytest.approx(want.a, rel=1e-5)
        assert float(got.descriptor @ e) < 0.999  # moved off the bare fingerprint


def test_descriptor_kind_is_pluggable(mbpp_table, mbpp_embeddings):
    class Negated(ProbeOutcome):
        name = "test-negated-outcome"

        def raw(self, source, probes, models):
            return 1.0 - super().raw(source, probes, models)

    res = train_router(
        mbpp_table,
        dataclasses.replace(FAST, epochs=2),
        descriptor=Negated(),
        embeddings=mbpp_embeddings,
    )
    assert {e.kind for e in res.router.experts} == {"test-negated-outcome"}
    assert res.router.config["descriptor"]["name"] == "test-negated-outcome"
