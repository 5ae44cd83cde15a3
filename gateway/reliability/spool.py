"""A bounded local spool for request-log rows the database could not take, replayed later.

The log writer keeps rows in memory and retries while the database is down; rows reach the
spool only when that is not enough: the in-memory queue is full, or the process stops
(SIGTERM) before the database is back. Each process appends to its own JSON-lines file
``spool-<pid>-<random>.jsonl`` in the spool directory and holds an exclusive ``flock`` on it
while it lives. Replay writes spooled rows with ``INSERT ... ON CONFLICT (id) DO NOTHING``
(a row written twice is stored once) and then empties the file; a replica also replays the
files of processes that died (their lock is free), so a spool left by a stopped replica is
written by whichever replica next finds the database up. The spool is bounded in bytes per
process; rows past the bound are dropped and counted (``dropped``), never blocking a request.
A row the database refuses (not an outage: the row itself) is isolated: its batch is retried
row by row and the refused row is moved to ``rejected-<name>.jsonl`` in the spool directory
and counted (``rejected``), so it never blocks the rows queued behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import anyio.to_thread
from sqlalchemy import Engine
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import SQLAlchemyError

from gateway.store.dberrors import is_unavailable
from gateway.store.models import request_logs

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
COLUMNS = tuple(c.name for c in request_logs.columns)


def _encode(row: dict[str, Any]) -> str:
    out = dict(row)
    if isinstance(out.get("created_at"), datetime):
        out["created_at"] = out["created_at"].isoformat()
    return json.dumps(out, default=str, ensure_ascii=True)


def _decode(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None  # a line cut short by a crash mid-write
    return row if isinstance(row, dict) and "id" in row else None


def _refused(exc: BaseException) -> bool:
    """The database answered and refused the statement (a bad value, a constraint)."""
    return isinstance(exc, SQLAlchemyError) and not is_unavailable(exc)


def log_rows_sink(engine: Engine) -> Callable[[list[dict[str, Any]]], None]:
    """Write request-log rows; an id already in the table is skipped (replay is idempotent)."""
    dialect = postgresql if engine.dialect.name == "postgresql" else sqlite

    def sink(rows: list[dict[str, Any]]) -> None:
        clean = []
        for row in rows:
            r = {k: row.get(k) for k in COLUMNS}
            if isinstance(r.get("created_at"), str):
                r["created_at"] = datetime.fromisoformat(r["created_at"])
            clean.append(r)
        stmt = dialect.insert(request_logs).on_conflict_do_nothing(index_elements=["id"])
        with engine.begin() as conn:
            conn.execute(stmt, clean)

    return sink


class Spool:
    """This process's spool file plus the replay of every ``<name>-*.jsonl`` in ``directory``.

    ``sink(rows)`` writes a batch of decoded rows to the database idempotently (a row seen
    twice has its effect once) and raises when the database is unavailable."""

    def __init__(self, directory: str | Path, sink: Callable[[list[dict[str, Any]]], None],
                 name: str = "spool", max_bytes: int = DEFAULT_MAX_BYTES,
                 batch_size: int = 500) -> None:
        self.directory = Path(directory)
        self.name = name
        self.max_bytes = max_bytes
        self._sink = sink
        self._batch_size = batch_size
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._bytes = 0
        self._held: list[tuple[Path, IO[str]]] = []  # rotated files awaiting replay
        self.spooled = 0
        self.dropped = 0
        self.rejected = 0

    # -- writing ---------------------------------------------------------------------------
    def _open(self) -> IO[str]:
        if self._file is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._path = self.directory / f"{self.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}.jsonl"
            self._file = open(self._path, "a+", encoding="utf-8")  # noqa: SIM115 - held open
            fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        return self._file

    def accept(self, rows: Iterable[dict[str, Any]]) -> int:
        """Append rows (never raises); returns how many were kept within the bound."""
        kept = 0
        with self._lock:
            for row in rows:
                line = _encode(row) + "\n"
                if self._bytes + len(line) > self.max_bytes:
                    self.dropped += 1
                    log.error("%s full (%d bytes): dropped row %s", self.name, self._bytes,
                              row.get("id"))
                    continue
                try:
                    f = self._open()
                    f.write(line)
                except OSError as exc:
                    self.dropped += 1
                    log.error("%s write failed for row %s: %s", self.name, row.get("id"), exc)
                    continue
                self._bytes += len(line)
                kept += 1
            if self._file is not None:
                with contextlib.suppress(OSError):
                    self._file.flush()
                    os.fsync(self._file.fileno())
        self.spooled += kept
        return kept

    @property
    def pending(self) -> int:
        """Rows this process spooled and has not replayed yet."""
        with self._lock:
            files = [f for _, f in self._held] + ([self._file] if self._file else [])
            n = 0
            for f in files:
                f.seek(0)
                n += sum(1 for line in f if line.strip())
                f.seek(0, os.SEEK_END)
            return n

    # -- replay ----------------------------------------------------------------------------
    def _write_lines(self, lines: list[str]) -> int:
        rows = [r for r in (_decode(line) for line in lines if line.strip()) if r is not None]
        for i in range(0, len(rows), self._batch_size):
            self._write_batch(rows[i:i + self._batch_size])
        return len(rows)

    def _write_batch(self, batch: list[dict[str, Any]]) -> None:
        """One sink call; if the database refuses the batch itself, row by row, isolating
        each refused row. Anything else (an outage) propagates: the file stays for the next
        replay, and rows written meanwhile are skipped then, the sink being idempotent."""
        try:
            self._sink(batch)
            return
        except Exception as exc:
            if not _refused(exc):
                raise
        for row in batch:
            try:
                self._sink([row])
            except Exception as exc:
                if not _refused(exc):
                    raise
                self._reject(row, exc)

    def _reject(self, row: dict[str, Any], exc: Exception) -> None:
        self.rejected += 1
        log.error("%s row %s refused by the database (%s): moved aside", self.name,
                  row.get("id"), type(exc).__name__)
        with contextlib.suppress(OSError), open(
                self.directory / f"rejected-{self.name}.jsonl", "a", encoding="utf-8") as f:
            f.write(_encode(row) + "\n")

    def _replay_own(self) -> int:
        """Rotate this process's file (new rows go to a fresh one), then write the old one.

        The old file stays open and locked until its rows are in the database, so a crash
        at any point leaves it for another replica to replay."""
        with self._lock:
            if self._file is not None and self._bytes > 0:
                assert self._path is not None
                self._held.append((self._path, self._file))
                self._file, self._path, self._bytes = None, None, 0
            held = list(self._held)
        n = 0
        for path, f in held:
            f.seek(0)
            n += self._write_lines(f.readlines())
            with self._lock:
                self._held.remove((path, f))
            f.close()
            path.unlink(missing_ok=True)
        return n

    def _replay_orphans(self) -> int:
        """Spool files of processes that are gone (their flock is free)."""
        n = 0
        if not self.directory.is_dir():
            return 0
        for path in sorted(self.directory.glob(f"{self.name}-*.jsonl")):
            if path == self._path or any(path == p for p, _ in self._held):
                continue
            try:
                f = open(path, "r+", encoding="utf-8")  # noqa: SIM115 - closed below
            except OSError:
                continue
            with f:
                try:
                    fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # a live process owns it
                n += self._write_lines(f.readlines())
                path.unlink(missing_ok=True)
        return n

    def replay_sync(self) -> int:
        """Write every spooled row this process can reach; raises if the database is down."""
        n = self._replay_own() + self._replay_orphans()
        if n:
            log.info("replayed %d spooled %s rows", n, self.name)
        return n

    async def replay(self) -> int:
        """`replay_sync` in a worker thread; 0 (and nothing lost) while the database is down."""
        try:
            return await anyio.to_thread.run_sync(self.replay_sync)
        except Exception as exc:
            if is_unavailable(exc):
                return 0
            raise

    async def run(self, interval_s: float = 2.0) -> None:
        """Background task: replay whenever there is something to replay."""
        while True:
            try:
                await self.replay()
            except Exception:  # the task must survive a bad file
                log.exception("%s replay failed", self.name)
            await asyncio.sleep(interval_s)

    def close(self) -> None:
        """Release the files (rows not replayed stay on disk for the next process)."""
        with self._lock:
            for _, f in self._held:
                f.close()
            self._held.clear()
            if self._file is not None:
                empty = self._bytes == 0
                self._file.close()
                self._file = None
                if empty and self._path is not None:
                    self._path.unlink(missing_ok=True)
