"""``minilm-static``: a static embedding distilled from MiniLM with model2vec.

Φ(x) is the mean of per-token vectors (a table lookup): microseconds a prompt, numpy and
``tokenizers`` only. Long texts keep their end, as MiniLM's window does: the last
``max_seq_length - 2`` word pieces (MiniLM's window less [CLS] and [SEP]).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from router_core.encoders.base import CachedEncoder
from router_core.encoders.exports import EXPORT_NAMES, ensure_export


class MiniLMStaticEncoder(CachedEncoder):
    kind = "minilm-static"

    def __init__(self, *, threads: int = 1, **kwargs: Any) -> None:
        super().__init__(**kwargs)  # threads: nothing to parallelise in a table lookup
        self._lock = threading.Lock()
        self._model = None
        self._empty: np.ndarray | None = None

    @property
    def cache_name(self) -> str:
        return f"{super().cache_name}/{EXPORT_NAMES[self.kind]}"

    @property
    def dim(self) -> int:
        return int(self._load().dim)

    def _load(self):
        with self._lock:
            if self._model is None:
                from model2vec import StaticModel

                model = StaticModel.from_pretrained(str(ensure_export(self.kind, self.cache_dir)))
                model.tokenizer.enable_truncation(
                    max(1, self.max_seq_length - 2), direction=self.truncation_side
                )
                # kept as stored (float16: 15 MB, not a 30 MB float32 copy per worker); a
                # request's rows are widened when gathered, so Φ is the same to the bit
                table = np.asarray(model.embedding)
                mean = table.mean(axis=0, dtype=np.float32)
                self._empty = mean / np.linalg.norm(mean)  # a text with no known token
                self._table = table
                self._model = model
        return self._model

    def _embed(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        model = self._load()
        out = np.empty((len(texts), self._table.shape[1]), dtype=np.float32)
        mapping, weights = model.token_mapping, model.weights
        for i, ids in enumerate(model.tokenize(list(texts))):
            if not ids:
                out[i] = self._empty
                continue
            rows = self._table[ids if mapping is None else mapping[ids]].astype(np.float32)
            if weights is not None:
                rows = rows * weights[ids][:, None]
            v = rows.mean(axis=0)
            out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out
