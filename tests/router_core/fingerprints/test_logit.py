"""Logit footprints (CSCR Eq. 2) on SmolLM2-135M, the open-weight model available offline."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from router_core.descriptors import get_kind
from router_core.fingerprints.logit import LogitFootprint, basis_ids, top_token_basis


@pytest.fixture(scope="module")
def kind_and_raw(smollm2, small_probes):
    kind = LogitFootprint(T=3)
    raw = kind.raw({"smollm2": smollm2}, small_probes, ["smollm2"])
    return kind, raw


def test_basis_is_the_most_frequent_probe_tokens(smollm2, small_probes):
    _, tok = smollm2
    basis = top_token_basis(tok, small_probes.prompts, 8)
    counts = {}
    for p in small_probes.prompts:
        for t in tok(p, add_special_tokens=False)["input_ids"]:
            counts[t] = counts.get(t, 0) + 1
    ids = basis_ids(tok, basis)
    assert len(set(ids.tolist())) == 8
    assert min(counts[i] for i in ids) >= sorted(counts.values())[-8]  # truly the top 8


def test_shape_and_values_are_mean_probabilities(kind_and_raw, small_probes):
    kind, raw = kind_and_raw
    assert get_kind("logit") is LogitFootprint
    assert raw.shape == (1, len(small_probes)) == (1, kind.dim(small_probes))  # K = N by default
    assert (raw > 0).all() and raw.sum() <= 1.0  # a mean of probabilities over K tokens
    assert kind.config()["basis"] == kind.basis and len(kind.basis) == len(small_probes)


def test_first_step_equals_a_direct_softmax(smollm2, small_probes):
    # With T = 1, Eq. 2 is the mean over small_probes of softmax(logits at the last prompt token)
    # restricted to the basis: compute that directly with one forward pass per probe.
    model, tok = smollm2
    kind = LogitFootprint(T=1, batch_size=3)  # batches of 3 exercise the left padding
    got = kind.raw({"m": (model, tok)}, small_probes, ["m"])[0]
    cols = basis_ids(tok, kind.basis)
    want = np.zeros(len(cols))
    for p in small_probes.prompts:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
        )
        ids = ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids
        with torch.no_grad():
            logits = model(torch.tensor([list(ids)])).logits[0, -1].double()
        want += torch.softmax(logits, -1)[cols].numpy()
    np.testing.assert_allclose(got, want / len(small_probes), rtol=1e-4, atol=1e-7)


def test_normalisation_and_determinism(kind_and_raw, smollm2, small_probes):
    kind, raw = kind_and_raw
    e = kind.normalise(raw)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)
    z = (raw - raw.mean()) / raw.std()
    np.testing.assert_allclose(e[0], z[0] / np.sqrt(raw.shape[1]), atol=1e-6)
    again = LogitFootprint.from_config(kind.config())  # the artifact's recorded basis
    np.testing.assert_array_equal(again.raw({"s": smollm2}, small_probes, ["s"]), raw)
    l2 = LogitFootprint(T=3, basis=kind.basis, normalisation="l2").normalise(raw)
    np.testing.assert_allclose(l2[0], raw[0] / np.linalg.norm(raw[0]), rtol=1e-6)
