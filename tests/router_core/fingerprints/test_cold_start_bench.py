"""bench/routing/cold_start.py condition (d): a held-out model placed by its perplexity fingerprint.

A tiny routing table with recorded answers (three models, 48 prompts), the real static
MiniLM encoder and the real SmolLM2-135M scorer on four probes: the router trained without
the model gets it back as an expert described by its own answers, with no retraining.
"""

from __future__ import annotations

import numpy as np

from bench.routing.cold_start import Pool, fingerprinted, place_fingerprint
from router_core.data.table import RoutingTable
from router_core.encoders import make_encoder
from router_core.fingerprints.perplexity import PerplexityFingerprint

PROMPTS = (
    "What is 2 + 2?",
    "Who wrote Hamlet?",
    "Name a primary colour.",
    "What is the capital of Italy?",
)
MODELS = ("terse-7b", "chatty-70b", "held-out-13b")
STYLE = {
    "terse-7b": lambda p: "Yes.",
    "chatty-70b": lambda p: f"Good question! Here is a careful answer to: {p} It depends.",
    "held-out-13b": lambda p: f"The answer to '{p}' is short and plain.",
}


def _table(n: int = 48, responses: bool = True) -> RoutingTable:
    rng = np.random.default_rng(0)
    prompts = np.array([f"{PROMPTS[i % len(PROMPTS)]} (case {i})" for i in range(n)], dtype=object)
    quality = np.stack(
        [np.arange(n) % 2 == 0, np.arange(n) % 2 == 1, rng.random(n) < 0.6], axis=1
    ).astype(float)
    cost = np.tile(np.array([0.1, 1.0, 0.4]), (n, 1))
    split = np.array(["train"] * 32 + ["test"] * (n - 32), dtype=object)
    answers = (
        {m: np.array([STYLE[m](p) for p in prompts], dtype=object) for m in MODELS}
        if responses
        else {}
    )
    return RoutingTable(
        name="tiny",
        prompt_ids=np.array([f"p{i}" for i in range(n)]),
        prompts=prompts,
        models=MODELS,
        quality=quality,
        cost=cost,
        split=split,
        responses=answers,
    )


def test_a_held_out_model_is_placed_by_its_fingerprint(scorer):
    pool = Pool(_table(), 0, make_encoder("minilm-static"))
    kind = PerplexityFingerprint(scorer)
    without, added, probes, answers = place_fingerprint(pool, "held-out-13b", kind, 4)

    assert without.model_names == ("terse-7b", "chatty-70b")
    assert added.model_names == ("terse-7b", "chatty-70b", "held-out-13b")
    new = added.experts[-1]
    assert new.kind == "perplexity" and new.descriptor.shape == (4,) == (without.head.out_dim,)
    # the model's own recorded answers to the router's probes, fingerprinted (Eq. 4-5)
    assert answers == [STYLE["held-out-13b"](p) for p in probes.prompts]
    expect = kind.describe({"held-out-13b": answers}, probes, ["held-out-13b"])[0]
    assert np.allclose(new.descriptor, expect, atol=1e-6)
    assert np.isclose(np.linalg.norm(new.descriptor), 1.0, atol=1e-5)
    # the head and the other experts are untouched; the new one is on the pooled (a0, b0)
    assert all(
        np.array_equal(x.descriptor, y.descriptor) for x, y in zip(without.experts, added.experts)
    )
    assert added.head is without.head and "held-out-13b" not in added.calibration.a

    r = fingerprinted(pool, "held-out-13b", kind, n_probes=4)
    assert 0.0 <= r["fp_excl"] <= 1.0 and 0.0 <= r["fingerprint"] <= 1.0
    assert r["n_missing"] == 0


def test_only_tables_with_every_models_answers_are_fingerprinted():
    enc = make_encoder("minilm-static")
    assert Pool(_table(), 0, enc).answers_recorded()
    assert not Pool(_table(responses=False), 0, enc).answers_recorded()
