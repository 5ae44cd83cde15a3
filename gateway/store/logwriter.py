"""The request log writer: `submit` never blocks; a background task writes batches.

Rows go into a bounded asyncio queue; one task drains it in batches (one executemany per
batch, in a worker thread), so the request path pays for a `put_nowait` and nothing else.
When the database is down, the batch in hand is retried with backoff while new rows queue up
to the bound; only rows arriving at a full queue are dropped, and counted. A row the database
rejects (duplicate id, bad value) is isolated by retrying its batch row by row, so one bad row
never costs its neighbours. `close()` flushes what is queued.

Every row is made storable in `submit`, the one place all rows pass: PostgreSQL refuses a
NUL character in text and JSONB, and no database takes a lone surrogate (a model name or a
prompt may carry either, straight from a client's JSON); `storable` writes them as the
visible escapes ``\\u0000`` and ``\\ud800``, so the row is kept and says what was sent.

`overflow` (optional, e.g. `gateway.reliability.spool.Spool.accept`) receives the rows that would
otherwise be lost: rows arriving at a full queue, and at `close()` the rows still unwritten
when the flush times out (the database is down at shutdown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import anyio
from sqlalchemy import Engine, insert

from gateway.store.dberrors import is_unavailable
from gateway.store.models import request_logs
from gateway.store.periods import utcnow

log = logging.getLogger(__name__)

LOG_COLUMNS = frozenset(c.name for c in request_logs.columns)


@dataclass
class LogStats:
    """Counters for health checks and metrics."""

    submitted: int = 0
    written: int = 0
    batches: int = 0
    dropped: int = 0  # queue full
    rejected: int = 0  # the database refused the row itself
    retries: int = 0  # batch writes that failed for an unavailable database


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates written as backslash escapes (else unchanged)."""
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def storable(value: Any) -> Any:
    """A row value with every string in it (dict keys, nested lists) made storable."""
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [storable(v) for v in value]
    return value


def _to_datetime(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime.fromtimestamp(float(value), tz=UTC)


class LogWriter:
    """Batched, bounded, non-blocking writer of `request_logs` rows."""

    def __init__(self, engine: Engine, *, log_prompts: bool = False, max_queue: int = 100_000,
                 batch_size: int = 500, linger_s: float = 0.05, max_backoff_s: float = 5.0,
                 limiter: anyio.CapacityLimiter | None = None,
                 clock: Callable[[], datetime] | None = None) -> None:
        self._engine = engine
        self.log_prompts = log_prompts
        self._batch_size = batch_size
        self._linger_s = linger_s
        self._max_backoff_s = max_backoff_s
        self._limiter = limiter
        self._clock = clock or utcnow
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=max_queue)
        self._task: asyncio.Task[None] | None = None
        self._in_hand = 0
        self._batch: list[dict[str, Any]] = []  # the batch being written (for overflow)
        self._closed = False
        self.stats = LogStats()
        self.overflow: Callable[[list[dict[str, Any]]], Any] | None = None

    # -- request path -------------------------------------------------------------------
    def submit(self, row: dict[str, Any]) -> bool:
        """Queue one row; False (and counted) if the queue is full. Never blocks.

        Raises ValueError for keys that are not columns: a programming error, caught in tests.
        `prompt_text` is dropped unless the writer was built with `log_prompts=True`.
        """
        unknown = row.keys() - LOG_COLUMNS
        if unknown:
            raise ValueError(f"unknown request log fields: {sorted(unknown)}")
        if "id" not in row:
            raise ValueError("a request log row needs an id")
        clean = {k: storable(v) for k, v in row.items()}
        clean["created_at"] = _to_datetime(clean.get("created_at") or self._clock())
        if not self.log_prompts:
            clean.pop("prompt_text", None)
        if clean.get("status") is not None:
            clean["status"] = int(clean["status"])
        try:
            self._queue.put_nowait(clean)
        except asyncio.QueueFull:
            if self.overflow is not None:
                self.overflow([clean])
                return True
            self.stats.dropped += 1
            log.error("request log queue full: dropped row %s", clean["id"])
            return False
        self.stats.submitted += 1
        return True

    @property
    def pending(self) -> int:
        """Rows accepted but not yet written."""
        return self._queue.qsize() + self._in_hand

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self, limiter: anyio.CapacityLimiter | None = None) -> None:
        """Start the background task (idempotent); `limiter` bounds its worker threads."""
        if limiter is not None:
            self._limiter = limiter
        if self._task is None and not self._closed:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="log-writer")

    async def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every queued row is written; False if `timeout_s` passed first."""
        if self._task is None and not self._closed:
            await self.start()
        if self._task is None:
            return self.pending == 0
        try:
            async with asyncio.timeout(timeout_s):
                await self._queue.join()
            return True
        except TimeoutError:
            return False

    async def close(self, timeout_s: float | None = 30.0) -> bool:
        """Flush (bounded by `timeout_s`), then stop. True if nothing was left unwritten."""
        flushed = await self.flush(timeout_s)
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if not flushed and self.overflow is not None:
            rows = list(self._batch)
            while not self._queue.empty():
                rows.append(self._queue.get_nowait())
            self.overflow(rows)
            self._batch, self._in_hand = [], 0
            log.warning("request log writer closed: %d unwritten rows handed to overflow",
                        len(rows))
        elif not flushed:
            log.error("request log writer closed with %d rows unwritten", self.pending)
        return flushed

    # -- background ------------------------------------------------------------------------
    async def _run(self) -> None:
        while True:
            batch = [await self._queue.get()]
            self._in_hand = 1
            if self._queue.qsize() < self._batch_size and self._linger_s > 0:
                await asyncio.sleep(self._linger_s)  # let a batch form under light load
            while len(batch) < self._batch_size:
                try:
                    batch.append(self._queue.get_nowait())
                except asyncio.QueueEmpty:
                    break
            self._in_hand = len(batch)
            await self._write_until_done(batch)
            self._in_hand = 0
            self._batch = []
            for _ in batch:
                self._queue.task_done()

    async def _write_until_done(self, batch: list[dict[str, Any]]) -> None:
        backoff = 0.05
        remaining = list(batch)
        self._batch = remaining  # what close() hands to `overflow`: only unwritten rows
        row_by_row = False
        while remaining:
            try:
                if row_by_row:
                    await anyio.to_thread.run_sync(self._write_rows, remaining,
                                                   limiter=self._limiter)
                else:
                    await anyio.to_thread.run_sync(self._write_batch, remaining,
                                                   limiter=self._limiter)
                return
            except Exception as exc:  # noqa: BLE001 - the writer task must never die
                if not is_unavailable(exc):
                    row_by_row = True
                    continue
                self.stats.retries += 1
                log.warning("request log write failed (database unavailable), retrying in "
                            "%.2fs: %s", backoff, exc.__class__.__name__)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, self._max_backoff_s)

    def _write_batch(self, remaining: list[dict[str, Any]]) -> None:
        """One executemany in one transaction; empties `remaining` once committed."""
        with self._engine.begin() as conn:
            conn.execute(insert(request_logs), _uniform(remaining))
        self.stats.written += len(remaining)
        self.stats.batches += 1
        remaining.clear()

    def _write_rows(self, remaining: list[dict[str, Any]]) -> None:
        """Fallback after a batch was refused: write one by one, drop only the bad rows.

        Rows leave `remaining` as they are written or rejected, so a retry after an outage
        in the middle resumes where it stopped.
        """
        while remaining:
            row = remaining[0]
            try:
                with self._engine.begin() as conn:
                    conn.execute(insert(request_logs), [row])
                self.stats.written += 1
            except Exception as exc:
                if is_unavailable(exc):
                    raise
                self.stats.rejected += 1
                log.error("request log row %s rejected by the database: %s", row.get("id"),
                          exc.__class__.__name__)
            remaining.pop(0)
        self.stats.batches += 1


def _uniform(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """executemany needs every row to have the same keys: fill the missing ones with None."""
    keys = set().union(*batch)
    return [{k: r.get(k) for k in keys} for r in batch]
