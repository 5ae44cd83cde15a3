"""Perplexity fingerprints (CSCR Eq. 3-5) on real SmolLM2 scores."""

from __future__ import annotations

import numpy as np
import pytest

from router_core.data.table import RoutingTable
from router_core.descriptors import get_kind
from router_core.fingerprints.perplexity import PerplexityFingerprint, recorded_answers

# Three "models" answering the 8 probes of conftest.PROMPTS in recognisably different styles.
ANSWERS = {
    "terse": [
        "4",
        "Red.",
        "def add(a, b): return a + b",
        "Shakespeare.",
        "Chat.",
        "Yes.",
        "Nails.",
        "Rome.",
    ],
    "verbose": [
        "The sum of two and two is four, a basic fact of arithmetic.",
        "Red is one of the three primary colours, along with blue and yellow.",
        "Here is a function:\n\ndef add(a, b):\n    return a + b\n\nIt returns the sum.",
        "Hamlet was written by William Shakespeare around the year 1600.",
        "The French word for cat is 'chat', a masculine noun.",
        "Yes, on a clear day the sky appears blue because of Rayleigh scattering.",
        "A hammer is used to drive nails into wood and other materials.",
        "The capital of Italy is Rome, which is also its largest city.",
    ],
    "odd": [
        "fish purple seven",
        "qz xv",
        "lambda: None",
        "??",
        "dog",
        "perhaps banana",
        "it sings",
        "Paris, probably",
    ],
}
MODELS = list(ANSWERS)


@pytest.fixture(scope="module")
def kind(scorer):
    return PerplexityFingerprint(scorer)


@pytest.fixture(scope="module")
def raw(kind, probes):
    return kind.raw(ANSWERS, probes, MODELS)


def test_shapes_and_raw_values_are_the_scorer_mean_nll(kind, raw, probes, scorer):
    assert get_kind("perplexity") is PerplexityFingerprint
    assert raw.shape == (3, len(probes)) and kind.dim(probes) == len(probes)
    np.testing.assert_allclose(raw[1], scorer.mean_nll(ANSWERS["verbose"]))  # Eq. 5
    assert np.isfinite(raw).all() and (raw > 0).all()


def test_normalisation_eq4(kind, raw, probes):
    e = kind.normalise(raw)
    assert e.shape == (3, len(probes)) and e.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)  # on the sphere
    # before ℓ2: centred, unit variance; ℓ2 then only rescales by √N
    z = (raw - raw.mean(1, keepdims=True)) / raw.std(1, keepdims=True)
    np.testing.assert_allclose(z.mean(1), 0.0, atol=1e-9)
    np.testing.assert_allclose(z.std(1), 1.0, atol=1e-9)
    np.testing.assert_allclose(e, z / np.sqrt(len(probes)), atol=1e-6)
    np.testing.assert_allclose(e.sum(1), 0.0, atol=1e-5)
    # the styles are told apart: no two models share a descriptor
    sims = e @ e.T
    assert (sims[np.triu_indices(3, 1)] < 0.99).all()


def test_deterministic_given_the_same_answers(kind, raw, probes, scorer, tmp_path):
    a = kind.normalise(raw)
    fresh = PerplexityFingerprint(scorer)  # a second instance, scoring from scratch
    np.testing.assert_array_equal(a, fresh.describe(ANSWERS, probes, MODELS))
    # and through the on-disk score cache: the second pass reads what the first stored
    from router_core.fingerprints.scorer import Scorer

    cached = Scorer(cache=tmp_path / "s.sqlite")
    cached._model, cached._tok = scorer.load()
    first = PerplexityFingerprint(cached).describe(ANSWERS, probes, MODELS)
    second = PerplexityFingerprint(cached).describe(ANSWERS, probes, MODELS)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, a, atol=1e-5)


def test_recorded_answers_from_a_routing_table_and_missing_ones(kind, probes, raw):
    # Rows: each probe twice (two samples) plus one non-probe prompt; the first row counts.
    ids = np.array([*probes.ids, *probes.ids, "other"], dtype=object)
    n = len(ids)
    responses = {
        m: np.array([*ANSWERS[m], *(["ignored"] * len(probes)), "x"], dtype=object) for m in MODELS
    }
    responses["odd"][2] = None  # a missing answer
    table = RoutingTable(
        name="t",
        prompt_ids=ids,
        prompts=np.array([*probes.prompts, *probes.prompts, "z"], dtype=object),
        models=tuple(MODELS),
        quality=np.ones((n, 3)),
        cost=np.ones((n, 3)),
        split=np.array(["train"] * n, dtype=object),
        responses=responses,
    )
    assert recorded_answers(table, probes, "terse") == ANSWERS["terse"]
    got = kind.raw(table, probes, MODELS)
    np.testing.assert_allclose(got[:2], raw[:2])
    assert np.isnan(got[2, 2]) and np.isfinite(np.delete(got[2], 2)).all()
    e = kind.describe(table, probes, MODELS)  # the gap takes the row mean: still a unit row
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)


def test_conditioning_on_the_probe_prompt_is_an_option(scorer, probes, raw):
    cond = PerplexityFingerprint(scorer, condition_on_prompt=True)
    got = cond.raw(ANSWERS, probes, ["terse"])[0]
    np.testing.assert_allclose(got, scorer.mean_nll(ANSWERS["terse"], list(probes.prompts)))
    # a short answer is much more predictable after its question than from nothing
    assert got.mean() < raw[0].mean()
    cfg = cond.config()
    assert cfg["condition_on_prompt"] is True and cfg["scorer"]["ident"] == scorer.ident
    again = PerplexityFingerprint.from_config(cfg)
    assert again.condition_on_prompt and again.scorer.ident == scorer.ident


def test_a_different_scorer_is_refused_when_an_artifact_names_one(scorer):
    cfg = PerplexityFingerprint(scorer).config()
    cfg["scorer"] = {**cfg["scorer"], "ident": "gpt2@other"}
    with pytest.raises(ValueError, match="not be comparable"):
        PerplexityFingerprint.from_config(cfg)
