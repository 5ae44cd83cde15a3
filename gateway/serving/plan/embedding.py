"""Φ(x) for concurrent requests, micro-batched on one encoder thread.

Why: one encoder call per request costs a thread hand-off each and, for a transformer, runs
matrix products on one short sequence at a time; requests that arrive while the encoder is
busy are encoded together in its next call instead. The event loop never encodes.

The rule (bounded both ways):
- a request joins the queue; when no batch is running, the oldest queued request waits at
  most ``max_wait_s`` for others to join (0: a batch starts at once when the encoder is idle,
  and batches form only from requests that queued while it was busy);
- a batch holds at most ``max_batch`` texts; a full queue starts at once;
- every caller gets its own row back (results in queue order); when a batch fails, its texts
  are encoded one by one so that only the callers whose text fails get the exception.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

Encode = Callable[[Sequence[str]], np.ndarray]


class EmbeddingBatcher:
    """``await batcher.embed(text)`` -> Φ(text) as a (1, dim) array.

    ``encode`` maps a list of texts to an (n, dim) array; it runs on one dedicated thread,
    so an encoder is never called from two threads at once.
    """

    def __init__(self, encode: Encode, *, max_batch: int = 4, max_wait_s: float = 0.0) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be at least 1, not {max_batch}")
        if max_wait_s < 0:
            raise ValueError(f"max_wait_s must not be negative, not {max_wait_s}")
        self._encode = encode
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._queue: list[tuple[str, asyncio.Future]] = []
        self._full: asyncio.Event | None = None
        self._drainer: asyncio.Task | None = None
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tollgate-encoder")
        self.batch_sizes: list[int] = []  # the size of every batch run, for tests and metrics

    @property
    def queued(self) -> int:
        """Texts waiting for a batch (not yet handed to the encoder thread)."""
        return len(self._queue)

    async def embed(self, text: str) -> np.ndarray:
        loop = asyncio.get_running_loop()
        future: asyncio.Future = loop.create_future()
        self._queue.append((text, future))
        if len(self._queue) >= self.max_batch and self._full is not None:
            self._full.set()
        if self._drainer is None or self._drainer.done():
            self._drainer = loop.create_task(self._drain())
        return await future

    async def encode_now(self, texts: Sequence[str]) -> np.ndarray:
        """Encode ``texts`` on the encoder thread, outside the queue (warm-up, tools)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._encode, list(texts))

    def close(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    async def _drain(self) -> None:
        """Run batches until the queue is empty."""
        while self._queue:
            if self.max_wait_s > 0 and len(self._queue) < self.max_batch:
                self._full = asyncio.Event()
                try:
                    await asyncio.wait_for(self._full.wait(), self.max_wait_s)
                except TimeoutError:
                    pass
                finally:
                    self._full = None
            batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
            batch = [(t, f) for t, f in batch if not f.done()]  # callers gone: skip them
            if batch:
                self.batch_sizes.append(len(batch))
                await self._run(batch)

    async def _run(self, batch: list[tuple[str, asyncio.Future]]) -> None:
        texts = [t for t, _ in batch]
        try:
            vectors = await self.encode_now(texts)
        except Exception as e:  # noqa: BLE001 - find whose text fails: encode one by one
            if len(batch) == 1:
                _settle(batch[0][1], error=e)
            else:
                for item in batch:
                    await self._run([item])
            return
        for row, (_, future) in enumerate(batch):
            _settle(future, value=np.asarray(vectors[row : row + 1]))


def _settle(future: asyncio.Future, value: Any = None, error: BaseException | None = None) -> None:
    if future.done():  # the caller was cancelled meanwhile
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
