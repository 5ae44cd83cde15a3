"""Φ from two encoders at once: [Φ_a(x), Φ_b(x)] / √2, a unit vector again.

Each part is a unit vector, so each contributes half of every inner product: a cosine on the
concatenation is the mean of the two cosines, and no part dominates by its dimension. Kind
"both": by default the sentence encoder (MiniLM) beside the activation encoder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np


class ConcatEncoder:
    kind = "both"

    def __init__(self, parts: Sequence[Any]) -> None:
        if len(parts) < 2:
            raise ValueError("a concatenated encoder needs at least two parts")
        self.parts = list(parts)

    @property
    def needs_fit(self) -> bool:
        return any(getattr(p, "needs_fit", False) for p in self.parts)

    @property
    def fitted(self) -> bool:
        return all(getattr(p, "fitted", True) for p in self.parts)

    @property
    def dim(self) -> int:
        return sum(p.dim for p in self.parts)

    def fit(
        self, texts: Sequence[str], outcomes: np.ndarray, progress: bool = False
    ) -> ConcatEncoder:
        for p in self.parts:
            if getattr(p, "needs_fit", False):
                p.fit(texts, outcomes, progress)
        return self

    def encode(
        self, texts: Sequence[str], batch_size: int = 32, progress: bool = False
    ) -> np.ndarray:
        blocks = [np.asarray(p.encode(texts, progress=progress), np.float32) for p in self.parts]
        return (np.concatenate(blocks, axis=1) / np.sqrt(len(blocks))).astype(np.float32)

    def settings(self) -> dict:
        return {
            "kind": self.kind,
            "truncation_side": "left",  # every part keeps the prompt's end
            "parts": [p.settings() for p in self.parts],
        }

    @classmethod
    def from_settings(
        cls, cfg: Mapping[str, Any], cache: bool = False, cache_dir: Path | None = None, **kw: Any
    ) -> ConcatEncoder:
        """The recorded parts, or by default MiniLM beside the activation encoder."""
        from router_core.encoders import make_encoder

        parts = cfg.get("parts") or [{"kind": "minilm"}, {"kind": "activations"}]
        return cls([make_encoder(p, cache=cache, cache_dir=cache_dir, **kw) for p in parts])
