"""kNN router: a query's predicted quality per model is the mean over its k nearest
training prompts (cosine on the frozen MiniLM embeddings), as in the RouterBench kNN
baseline. Missing outcomes are skipped; a model never observed among the neighbours
falls back to its mean over all training prompts.
"""

from __future__ import annotations

import faiss
import numpy as np

from router_core.baselines.threads import single_thread


class KNNRouter:
    def __init__(self, k: int = 50) -> None:
        self.k = k

    def fit(self, X: np.ndarray, quality: np.ndarray) -> KNNRouter:
        self._index = faiss.IndexFlatIP(X.shape[1])
        self._index.add(np.ascontiguousarray(X, dtype=np.float32))
        self._quality = np.asarray(quality, dtype=np.float64)
        self._prior = np.nan_to_num(np.nanmean(self._quality, axis=0), nan=0.0)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n, d) embeddings → (n, m) predicted quality."""
        k = min(self.k, self._index.ntotal)
        with single_thread():
            _, idx = self._index.search(np.ascontiguousarray(X, dtype=np.float32), k)
        neigh = self._quality[idx]  # (n, k, m)
        seen = np.isfinite(neigh)
        total = np.where(seen, neigh, 0.0).sum(axis=1)
        count = seen.sum(axis=1)
        return np.where(count > 0, total / np.maximum(count, 1), self._prior[None, :])
