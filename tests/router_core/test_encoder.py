"""The real MiniLM encoder: which end of a long text it keeps, and its cache key."""

from __future__ import annotations

import numpy as np
import pytest

from router_core.encoders.minilm import Encoder

# Longer than MiniLM's 256 word pieces, like RouterBench's shared few-shot prefixes.
PREFIX = " ".join(f"Example {i}: the answer to question {i} is B." for i in range(60))


def test_left_truncation_keeps_the_question_after_a_long_shared_prefix(tmp_path):
    texts = [PREFIX + "\nQ: What is the capital of France?", PREFIX + "\nQ: Sort a list in C."]
    left = Encoder(cache_dir=tmp_path).encode(texts)
    right = Encoder(cache_dir=tmp_path, truncation_side="right").encode(texts)
    assert float(right[0] @ right[1]) > 0.9999  # right truncation: the questions are cut off
    assert float(left[0] @ left[1]) < 0.95  # left truncation: they are what is embedded
    # short texts are embedded the same either way, and each side has its own cache entry
    short = ["What is the capital of France?"]
    np.testing.assert_allclose(
        Encoder(cache_dir=tmp_path).encode(short),
        Encoder(cache_dir=tmp_path, truncation_side="right").encode(short),
        atol=1e-6,
    )
    assert Encoder(cache_dir=tmp_path)._key("x") != Encoder(
        cache_dir=tmp_path, truncation_side="right"
    )._key("x")


def test_unknown_truncation_side_is_refused():
    with pytest.raises(ValueError, match="truncation_side"):
        Encoder(truncation_side="middle")
