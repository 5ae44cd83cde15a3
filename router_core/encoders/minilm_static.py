"""``minilm-static``: a static embedding distilled from MiniLM with model2vec.

Φ(x) is the mean of per-token vectors (a table lookup): microseconds a prompt, numpy and
``tokenizers`` only. Long texts keep their end, as MiniLM's window does: the last
``max_seq_length - 2`` word pieces (MiniLM's window less [CLS] and [SEP]).

Serving reads the export's files itself (the table from ``model.safetensors``, the tokenizer
from ``tokenizer.json``) as model2vec's ``StaticModel`` does (word pieces without special
tokens, [UNK] dropped, the mean of their rows): importing model2vec costs a serving worker
~16 MB (joblib and friends) for these few lines. model2vec is for distilling (build.py).
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
        self._tokenizer = None
        self._empty: np.ndarray | None = None

    @property
    def cache_name(self) -> str:
        return f"{super().cache_name}/{EXPORT_NAMES[self.kind]}"

    @property
    def dim(self) -> int:
        self._load()
        return int(self._table.shape[1])

    def _load(self):
        with self._lock:
            if self._tokenizer is None:
                from safetensors import safe_open
                from tokenizers import Tokenizer

                path = ensure_export(self.kind, self.cache_dir)
                with safe_open(str(path / "model.safetensors"), framework="numpy") as f:
                    names = set(f.keys())
                    # kept as stored (float16: 15 MB, not a 30 MB float32 copy per worker); a
                    # request's rows are widened when gathered, so Φ is the same to the bit
                    table = f.get_tensor("embeddings")
                    self._weights = f.get_tensor("weights") if "weights" in names else None
                    self._mapping = f.get_tensor("mapping") if "mapping" in names else None
                tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
                tokenizer.no_padding()
                tokenizer.enable_truncation(
                    max(1, self.max_seq_length - 2), direction=self.truncation_side
                )
                unk = getattr(tokenizer.model, "unk_token", None)
                self._unk = None if unk is None else tokenizer.token_to_id(unk)
                mean = table.mean(axis=0, dtype=np.float32)
                self._empty = mean / np.linalg.norm(mean)  # a text with no known token
                self._table = table
                self._tokenizer = tokenizer
        return self._tokenizer

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Word pieces without [CLS]/[SEP], [UNK] dropped (as model2vec tokenizes)."""
        encodings = self._load().encode_batch_fast(list(texts), add_special_tokens=False)
        if self._unk is None:
            return [e.ids for e in encodings]
        return [[i for i in e.ids if i != self._unk] for e in encodings]

    def _embed(self, texts: Sequence[str], batch_size: int, progress: bool) -> np.ndarray:
        ids_per_text = self._ids(texts)
        out = np.empty((len(texts), self._table.shape[1]), dtype=np.float32)
        mapping, weights = self._mapping, self._weights
        for i, ids in enumerate(ids_per_text):
            if not ids:
                out[i] = self._empty
                continue
            rows = self._table[ids if mapping is None else mapping[ids]].astype(np.float32)
            if weights is not None:
                rows = rows * weights[ids][:, None]
            v = rows.mean(axis=0)
            out[i] = v / max(float(np.linalg.norm(v)), 1e-12)
        return out
