"""One space (CSCR §3.1.2, Table 4): descriptors of different kinds in one index."""

from __future__ import annotations

import numpy as np
import pytest

from router_core.data import load_dataset
from router_core.descriptors import ProbeOutcome
from router_core.fingerprints.logit import LogitFootprint
from router_core.fingerprints.perplexity import PerplexityFingerprint
from router_core.fingerprints.scorer import Scorer
from router_core.fingerprints.space import MixedDescriptor, kind_for_artifact, kind_from_config
from router_core.runtime.router import Calibration, Expert, Head, Router

from .test_perplexity import ANSWERS


def test_logit_and_perplexity_experts_share_one_candidate_search(scorer, smollm2, small_probes):
    # K = N: SmolLM2's logit footprint and three perplexity fingerprints, one sphere.
    probes = small_probes
    answers = {m: a[: len(probes)] for m, a in ANSWERS.items()}
    mixed = MixedDescriptor(
        {"logit": LogitFootprint(T=2), "perplexity": PerplexityFingerprint(scorer)},
        assign={"smollm2": "logit", **{m: "perplexity" for m in ANSWERS}},
        sources={"logit": {"smollm2": smollm2}, "perplexity": answers},
    )
    names = ["smollm2", *ANSWERS]
    E = mixed.describe(None, probes, names)
    assert E.shape == (4, len(probes))
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(
        E[1:], PerplexityFingerprint(scorer).describe(answers, probes, list(ANSWERS))
    )
    rng = np.random.default_rng(0)
    w1, w2 = rng.normal(size=(16, 384)), rng.normal(size=(len(probes), 16))
    head = Head(
        layers=(
            (w1.astype(np.float32), np.zeros(16, np.float32)),
            (w2.astype(np.float32), np.zeros(len(probes), np.float32)),
        )
    )
    kinds = {"smollm2": "logit", **{m: "perplexity" for m in ANSWERS}}
    router = Router(
        version="mixed-0",
        head=head,
        experts=tuple(Expert(n, E[i], 0.001 * (i + 1), kinds[n]) for i, n in enumerate(names)),
        calibration=Calibration(a={}, b={}, a0=5.0, b0=0.0),
        k=4,
        delta=0.0,  # no cost tie-break among near-equals: λ = 0 is pure similarity
    )
    Q = router.project(rng.normal(size=(200, 384)).astype(np.float32))
    sims = Q @ E.T
    # λ = 0 with a monotone shared calibration picks the most similar expert of either kind
    got = router.route_batch(Q, [0.0])[0]
    np.testing.assert_array_equal(got, sims.argmax(1))
    assert {kinds[names[i]] for i in got} == {"logit", "perplexity"}
    # and a model of either kind joins later without retraining
    more = router.with_expert(Expert("verbose-2", E[2], 0.002, "perplexity"), version="mixed-1")
    assert more.model_names[-1] == "verbose-2" and more.version == "mixed-1"


@pytest.fixture(scope="module")
def mbpp():
    table = load_dataset("routerbench")
    mbpp = table.rows(np.asarray(table.category, dtype=str) == "mbpp")
    train = np.flatnonzero(mbpp.split == "train")[:160]
    test = np.flatnonzero(mbpp.split == "test")[:40]
    models = [
        "gpt-4-1106-preview",
        "gpt-3.5-turbo-1106",
        "claude-instant-v1",
        "mistralai/mistral-7b-chat",
        "meta/llama-2-70b-chat",
    ]
    return mbpp.rows(np.concatenate([train, test])).with_models(models)


def test_a_mixed_pool_trains_and_its_kinds_are_recorded(scorer, mbpp):
    # Real RouterBench outcomes: three models by perplexity of their recorded answers, two
    # by probe outcomes, trained together (Table 4's "mixed" row, with the kinds we have).
    from router_core.encoders.minilm import Encoder
    from router_core.training import TrainConfig, train_router

    models = list(mbpp.models)
    short = Scorer(cache=False, max_tokens=32)  # the first 32 tokens of each (code) answer
    short._model, short._tok = scorer.load()
    mixed = MixedDescriptor(
        {"perplexity": PerplexityFingerprint(short), "probe-outcome": ProbeOutcome()},
        assign={
            **{m: "perplexity" for m in models[:3]},
            **{m: "probe-outcome" for m in models[3:]},
        },
    )
    phi = Encoder().encode(list(map(str, mbpp.prompts)))
    cfg = TrainConfig(n_probes=8, epochs=3, hidden=32, progress=False)
    res = train_router(mbpp, cfg, descriptor=mixed, embeddings=phi)
    router = res.router
    assert [e.kind for e in router.experts] == ["perplexity"] * 3 + ["probe-outcome"] * 2
    E = np.stack([e.descriptor for e in router.experts])
    assert E.shape == (5, 8)
    np.testing.assert_allclose(np.linalg.norm(E, axis=1), 1.0, atol=1e-5)
    train = mbpp.split_rows("train")
    want = PerplexityFingerprint(short).describe(train, res.probes, models[:1])[0]
    np.testing.assert_allclose(E[0], want, atol=1e-5)
    # the artifact records each kind's settings, so a later model is described the same way
    recorded = router.config["descriptor"]
    assert recorded["assign"][models[0]] == "perplexity"
    assert recorded["kinds"]["perplexity"]["scorer"]["ident"] == scorer.ident
    again = kind_for_artifact(router.config, "perplexity")
    assert isinstance(again, PerplexityFingerprint)
    assert again.scorer.ident == scorer.ident
    with pytest.raises(ValueError, match="not be comparable"):
        kind_for_artifact(router.config, "logit")
    assert isinstance(kind_from_config(recorded), MixedDescriptor)
    # routing among all five works from one index
    choice = router.route_batch(router.project(phi[-40:]), [0.0, 0.5])
    assert choice.shape == (2, 40) and choice.max() < 5
