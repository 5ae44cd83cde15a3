"""A key-value cache in one SQLite file, shared by processes and threads.

The embedding cache and the scorer's NLL cache both key on a content hash and must be safe
when several training or evaluation processes fill them at once: SQLite in WAL mode with a
busy timeout, one connection per thread.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path


class SQLiteCache:
    """Base for content-hash caches; ``schema`` is the CREATE TABLE statement of the table."""

    def __init__(self, path: Path, schema: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._local = threading.local()
        with self._connect() as db:
            db.execute(schema)

    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self._path, timeout=60)
            conn.execute("PRAGMA journal_mode=WAL")
            self._local.conn = conn
        return conn
