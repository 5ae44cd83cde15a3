"""The micro-batcher of Φ(x): order, bounded waits, errors to the right callers, and the same
vectors as the encoder called directly (the real ONNX MiniLM export).

The ordering and error tests give the batcher a small deterministic encode function (the
batcher's contract is over any ``texts -> (n, dim)`` function; a function whose output is
a known function of its input is what lets a test see a misrouted row). No test bounds a
wall-clock time; a generous ``wait_for`` only turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from gateway.serving.plan.embedding import EmbeddingBatcher

HANG = 30.0  # seconds: only a hang reaches this


def vector_of(text: str) -> np.ndarray:
    return np.array([len(text), sum(map(ord, text)) % 997, 1.0], dtype=np.float32)


class Recorder:
    """texts -> one known row per text; records each call's texts and thread; optionally
    slow (so that requests queue behind a running batch) or failing on a marker."""

    def __init__(self, delay_s: float = 0.0, fail_on: str | None = None) -> None:
        self.delay_s, self.fail_on = delay_s, fail_on
        self.calls: list[list[str]] = []
        self.threads: set[int] = set()

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        self.threads.add(threading.get_ident())
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.fail_on is not None and any(self.fail_on in t for t in texts):
            raise ValueError(f"cannot encode a text with {self.fail_on!r}")
        return np.stack([vector_of(t) for t in texts])


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, HANG))


def test_results_return_in_order_to_each_caller_across_batches() -> None:
    enc = Recorder(delay_s=0.02)
    batcher = EmbeddingBatcher(enc, max_batch=8)
    texts = [f"prompt number {i} " + "x" * i for i in range(40)]

    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(batcher.embed(t) for t in texts))

    out = run(main())
    batcher.close()
    for text, row in zip(texts, out):
        assert row.shape == (1, 3)
        np.testing.assert_array_equal(row[0], vector_of(text))
    # requests queued while a batch ran were encoded together, never more than max_batch
    assert sum(batcher.batch_sizes) == len(texts)
    assert max(batcher.batch_sizes) == 8
    assert len(batcher.batch_sizes) < len(texts)
    assert [t for call in enc.calls for t in call] == texts  # queue order kept
    assert len(enc.threads) == 1 and threading.get_ident() not in enc.threads  # off the loop


def test_an_idle_encoder_starts_at_once_without_a_wait() -> None:
    enc = Recorder()
    batcher = EmbeddingBatcher(enc, max_batch=8, max_wait_s=0.0)

    async def main() -> None:
        for i in range(5):  # one at a time: each is its own batch, nothing waits for company
            await batcher.embed(f"alone {i}")

    run(main())
    batcher.close()
    assert batcher.batch_sizes == [1, 1, 1, 1, 1]


def test_the_wait_gathers_late_arrivals_and_is_bounded() -> None:
    """With a wait, requests that arrive during it join the first batch; a lone request is
    still answered (the wait ends), and a full queue does not wait at all."""
    enc = Recorder()
    batcher = EmbeddingBatcher(enc, max_batch=4, max_wait_s=0.5)

    async def staggered() -> None:
        async def later(i: int) -> np.ndarray:
            await asyncio.sleep(0.01 * i)
            return await batcher.embed(f"staggered {i}")

        await asyncio.gather(*(later(i) for i in range(3)))

    run(staggered())
    assert batcher.batch_sizes == [3]

    run(batcher.embed("lonely"))  # answered once the bounded wait is over
    assert batcher.batch_sizes == [3, 1]

    patient = EmbeddingBatcher(Recorder(), max_batch=4, max_wait_s=3600.0)

    async def full() -> None:  # a full batch starts at once: this would otherwise hang
        await asyncio.gather(*(patient.embed(f"full {i}") for i in range(4)))

    run(full())
    assert patient.batch_sizes == [4]
    batcher.close()
    patient.close()


def test_a_failing_text_fails_only_its_own_caller() -> None:
    enc = Recorder(delay_s=0.01, fail_on="BAD")
    batcher = EmbeddingBatcher(enc, max_batch=16)
    texts = ["fine one", "fine two", "this is BAD", "fine three", "fine four"]

    async def main() -> list:
        return await asyncio.gather(*(batcher.embed(t) for t in texts), return_exceptions=True)

    out = run(main())
    batcher.close()
    for text, result in zip(texts, out):
        if "BAD" in text:
            assert isinstance(result, ValueError) and "BAD" in str(result)
        else:
            np.testing.assert_array_equal(result[0], vector_of(text))


def test_a_cancelled_caller_does_not_disturb_the_others() -> None:
    enc = Recorder(delay_s=0.05)
    batcher = EmbeddingBatcher(enc, max_batch=8)

    async def main() -> list[np.ndarray]:
        first = asyncio.ensure_future(batcher.embed("keeps the encoder busy"))
        await asyncio.sleep(0.01)
        gone = asyncio.ensure_future(batcher.embed("the client went away"))
        stay = [asyncio.ensure_future(batcher.embed(f"stays {i}")) for i in range(3)]
        await asyncio.sleep(0)
        gone.cancel()
        return await asyncio.gather(first, *stay)

    out = run(main())
    batcher.close()
    assert len(out) == 4
    assert "the client went away" not in [t for call in enc.calls for t in call]


def test_invalid_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="max_batch"):
        EmbeddingBatcher(Recorder(), max_batch=0)
    with pytest.raises(ValueError, match="max_wait_s"):
        EmbeddingBatcher(Recorder(), max_wait_s=-1)


def test_batched_vectors_match_the_encoder_called_alone() -> None:
    """The real ONNX MiniLM: a request's vector does not depend on its batch companions
    (padding to the longest text in a batch must not change a shorter text's vector)."""
    from router_core.encoders import make_encoder

    enc = make_encoder("minilm-onnx", threads=1)
    batcher = EmbeddingBatcher(enc.encode, max_batch=8)
    texts = ["What is 2 + 2?", "Write a haiku about the sea in late autumn, please.",
             "Prove that there are infinitely many primes. " * 5, "hi"]

    async def main() -> list[np.ndarray]:
        return await asyncio.gather(*(batcher.embed(t) for t in texts))

    out = run(main())
    batcher.close()
    assert max(batcher.batch_sizes) > 1
    for text, row in zip(texts, out):
        np.testing.assert_allclose(row, enc.encode([text]), atol=1e-5)
