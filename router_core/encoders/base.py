"""What every query encoder Φ shares: settings recorded in a router, and the disk cache.

Φ is never trained, so an embedding depends only on (encoder identity, text): the cache keys on
a hash of both, and reruns of training or evaluation do not re-embed. Each encoder kind
subclasses ``CachedEncoder`` and implements ``_embed`` (texts -> unit vectors) and ``dim``.
"""

from __future__ import annotations

import hashlib
import os
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from router_core.env.sqlite_cache import SQLiteCache

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


def default_cache_dir() -> Path:
    return Path(os.environ.get("TOLLGATE_CACHE_DIR", Path.home() / ".cache" / "tollgate"))


class EmbeddingCache(SQLiteCache):
    """Text-hash -> vector store in one SQLite file; safe across processes."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            path, "CREATE TABLE IF NOT EXISTS emb (key TEXT PRIMARY KEY, vec BLOB NOT NULL)"
        )

    def get_many(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        db = self._connect()
        for start in range(0, len(keys), 500):
            chunk = list(keys[start : start + 500])
            marks = ",".join("?" * len(chunk))
            for key, blob in db.execute(f"SELECT key, vec FROM emb WHERE key IN ({marks})", chunk):
                out[key] = np.frombuffer(blob, dtype=np.float32)
        return out

    def put_many(self, items: dict[str, np.ndarray]) -> None:
        db = self._connect()
        with db:
            db.executemany(
                "INSERT OR REPLACE INTO emb (key, vec) VALUES (?, ?)",
                [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in items.items()],
            )


class CachedEncoder(ABC):
    """Φ: texts -> (n, dim) float32 unit vectors, with an optional on-disk cache.

    Args:
        cache: keep embeddings on disk (``$TOLLGATE_CACHE_DIR``, default ~/.cache/tollgate).
        cache_dir: where the cache (and built model exports) live.
        max_seq_length: truncate inputs to this many word pieces (MiniLM's window: 256).
        truncation_side: which end of a long text to drop. ``"left"`` keeps the end: the
            question after a long few-shot prefix, the latest turn of a conversation (on
            RouterBench every arc-challenge and winogrande prompt shares a prefix longer
            than the window, so right truncation gives one embedding per task).
    """

    kind: ClassVar[str]

    def __init__(
        self,
        *,
        cache: bool = True,
        cache_dir: Path | None = None,
        max_seq_length: int = 256,
        truncation_side: str = "left",
    ) -> None:
        if truncation_side not in ("left", "right"):
            raise ValueError(f"truncation_side must be 'left' or 'right', not {truncation_side!r}")
        self.max_seq_length = int(max_seq_length)
        self.truncation_side = truncation_side
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._cache = EmbeddingCache(self.cache_dir / "embeddings.sqlite") if cache else None

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **kwargs: Any) -> CachedEncoder:
        """The encoder that recorded ``settings`` (see ``settings``); kwargs: cache options."""
        return cls(
            max_seq_length=int(settings.get("max_seq_length", 256)),
            truncation_side=str(settings.get("truncation_side", "left")),
            **kwargs,
        )

    @property
    def cache_name(self) -> str:
        """The identity of the vectors (beyond the text and truncation): the cache key's head."""
        return f"{HUB_ID}#{self.kind}"

    def settings(self) -> dict:
        """What a router trained on these embeddings records (``Router.config["encoder"]``)."""
        return {
            "kind": self.kind,
            "model": HUB_ID,
            "max_seq_length": self.max_seq_length,
            "truncation_side": self.truncation_side,
        }

    @property
    @abstractmethod
    def dim(self) -> int:
        """Length of one embedding."""

    @abstractmethod
    def _embed(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        """Unit vectors for ``texts`` (no cache)."""

    def _key(self, text: str) -> str:
        side = "" if self.truncation_side == "right" else "|left"
        raw = f"{self.cache_name}|{self.max_seq_length}{side}|{text}".encode(
            "utf-8", "surrogatepass"
        )
        return hashlib.sha256(raw).hexdigest()

    def encode(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        """Embed texts; cached vectors are read, the rest embedded and stored."""
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._cache is None:
            return self._embed(texts, batch_size, progress)
        keys = [self._key(t) for t in texts]
        found = self._cache.get_many(list(dict.fromkeys(keys)))
        missing = list(dict.fromkeys(k for k in keys if k not in found))
        if missing:
            first = {k: t for k, t in zip(keys, texts)}
            new = self._embed([first[k] for k in missing], batch_size, progress)
            fresh = dict(zip(missing, new))
            self._cache.put_many(fresh)
            found.update(fresh)
        return np.stack([found[k] for k in keys]).astype(np.float32)
