"""The committed default artifact: loads without data, routes, and records its provenance."""

from __future__ import annotations

import numpy as np

from router_core.artifact import DEFAULT_ROUTER_DIR, load_meta, load_probes, load_router
from router_core.data.routerbench import MODELS
from router_core.identity.table import identity_table


def test_default_router_loads_and_routes_a_real_prompt():
    from router_core.encoders.minilm import Encoder

    router = load_router()
    ids = identity_table()  # trained on every dataset: experts by canonical id
    assert all(ids.resolve(n).id == n for n in router.model_names)
    assert {ids.canonical("routerbench", m) for m in MODELS} <= set(router.model_names)
    names = set(router.model_names)
    d = np.stack([e.descriptor for e in router.experts])
    np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-5)
    encoder = Encoder.for_router(router.config)  # the kind it was trained on
    q = router.project(encoder.encode(["Write a Python function to reverse a list."]))
    free = router.route(q[0], lam=0.0)
    thrifty = router.route(q[0], lam=50.0)
    assert free.chosen in names and len(free.ranked) == (router.k or len(names))
    cost = {e.name: e.cost_usd for e in router.experts}
    assert cost[thrifty.chosen] <= cost[free.chosen]  # a large λ never buys a pricier model


def test_default_router_records_training_data_probes_and_config():
    meta = load_meta(DEFAULT_ROUTER_DIR)
    probes = load_probes(DEFAULT_ROUTER_DIR)
    assert meta["config"]["dataset"] == "all"  # scripts/build_default_router.sh
    assert len(meta["data_hash"]) == 64
    assert meta["metrics"]["n_train"] > 1000
    assert len(probes) == meta["probe_set"]["n"] == load_router().head.out_dim
    assert [p["id"] for p in probes] == meta["config"]["probe_ids"]
    size = sum(f.stat().st_size for f in DEFAULT_ROUTER_DIR.iterdir())
    assert size < 5_000_000


def test_default_router_records_the_encoder_the_gateway_must_use():
    from router_core.encoders.minilm import Encoder

    meta = load_meta(DEFAULT_ROUTER_DIR)
    assert meta["config"]["encoder"]["truncation_side"] == "left"
    recorded = {"kind": "minilm", **meta["config"]["encoder"]}  # older artifacts: no kind
    assert Encoder.for_router(meta["config"]).settings() == recorded
    # an artifact from before the setting was recorded was trained on right-truncated text
    assert Encoder.for_router({}).truncation_side == "right"


def test_the_packaged_routers_carry_their_encoder_cascade():
    """scripts/build_default_router.sh's last step: the static encoder's map and threshold,
    fitted on each artifact's own train/val carve, and a check this install's static
    encoder passes (else serving would fall back to MiniLM for every request)."""
    from router_core.artifact import ROUTERBENCH_ROUTER_DIR
    from router_core.encoders import make_encoder

    for path in (DEFAULT_ROUTER_DIR, ROUTERBENCH_ROUTER_DIR):
        router = load_router(path)
        cascade = router.cascade
        assert cascade is not None and "@cascade-" in router.version
        assert 0.0 < cascade.threshold < 0.2  # in calibrated-quality units
        assert cascade.head.in_dim == make_encoder(dict(cascade.encoder)).dim
        assert cascade.head.out_dim == router.head.in_dim  # into MiniLM's Φ space
        assert cascade.fit["val_prompts"] >= 100 and 0 < cascade.fit["val_minilm_share"] < 0.8
        assert cascade.static_encoder(make_encoder) is not None
        # the artifact is checked in: the float16 head keeps it small (was 3.7 MB in float32)
        assert (path / "arrays.npz").stat().st_size < 2_000_000
