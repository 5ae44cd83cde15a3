"""UMR-style cluster router ([UniRoute], Jitkrittum et al.; docs/references.md): K-means clusters
of the training prompts' embeddings; each model is represented by its per-cluster error
rate; a query goes to its nearest cluster and each model's predicted quality is
1 − error in that cluster.

Per-cluster rates are shrunk towards the model's overall rate with a pseudo-count ``a``
(Beta-prior mean): with few labelled prompts per cluster (a new model known only from probe
prompts) this keeps the estimate finite and sensible. Clustering needs no labels, so it can
use every training prompt even when a model's outcomes are known only on the probes.
"""

from __future__ import annotations

import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.exceptions import ConvergenceWarning

from router_core.baselines.threads import single_thread


class UMRRouter:
    def __init__(self, n_clusters: int = 32, prior: float = 1.0, seed: int = 0) -> None:
        self.n_clusters = n_clusters
        self.prior = prior
        self.seed = seed

    def fit(
        self,
        X: np.ndarray,
        quality: np.ndarray,
        X_cluster: np.ndarray | None = None,
    ) -> UMRRouter:
        """Cluster ``X_cluster`` (default ``X``); estimate per-cluster quality from (X, quality)."""
        base = np.asarray(X if X_cluster is None else X_cluster, dtype=np.float32)
        k = min(self.n_clusters, len(base))
        with warnings.catch_warnings(), single_thread():  # duplicates: fewer distinct clusters
            warnings.simplefilter("ignore", ConvergenceWarning)
            self._km = KMeans(n_clusters=k, n_init=3, random_state=self.seed).fit(base)
        with single_thread():
            cl = self._km.predict(np.asarray(X, dtype=np.float32))
        q = np.asarray(quality, dtype=np.float64)
        seen = np.isfinite(q)
        overall = np.nan_to_num(np.nanmean(q, axis=0), nan=0.0)  # (m,)
        total = np.zeros((k, q.shape[1]))
        count = np.zeros((k, q.shape[1]))
        np.add.at(total, cl, np.where(seen, q, 0.0))
        np.add.at(count, cl, seen.astype(np.float64))
        self.cluster_quality = (total + self.prior * overall) / (count + self.prior)
        self.cluster_error = 1.0 - self.cluster_quality
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n, d) embeddings → (n, m) predicted quality 1 − err[cluster]."""
        with single_thread():
            return self.cluster_quality[self._km.predict(np.asarray(X, dtype=np.float32))]
