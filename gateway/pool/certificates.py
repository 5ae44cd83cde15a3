"""A route's certificate as the pool serves it: per prompt region, the mix of backends that
judged pairs certified within the promise (router_core/promise/certify.py).

The learning loop builds it from the route's judged pairs and publishes it inside the router
version (``router.config[CERTIFICATES_KEY][route]``, gateway/learning/certify_routes.py), so
every replica serves it after the hot swap that brings that version. Serving reads it here:
the request's region is its nearest centroid in Φ(x) (the regions were k-means clusters of
the judged prompts' stored Φ(x)), and where that region has a certified mix, the prompt
takes one of its policies by its place in [0, 1): a hash of its prompt-key text (uniform over
prompts, blind to what the prompt says, eq. (4) of certify.py); elsewhere the prior-based
rule decides. The place is the text's, not Φ(x)'s: a request is ranked twice when the static
encoder's Φ̂ is not confident (gateway/serving/plan/routing.py ``cascaded``), and a pick
re-drawn on the second Φ kept a candidate's draw only when both draws took it, so a region
certified for 7% of its prompts served it 2 of 423 times (bench/routing/learning_loop.py).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from router_core.promise.certify import assign_regions, prompt_share

CERTIFICATES_KEY = "promise_certificates"  # router.config[...]: route -> its record


@dataclass(frozen=True)
class Certified:
    """What a certificate decided for one prompt: the backend and the evidence behind it."""

    backend: str
    region: int
    mix: Mapping[str, float]  # the region's certified shares (the reference takes the rest)
    n_prompts: int  # distinct judged prompts of the chosen candidate in the region
    upper_drop: float | None  # its bound U (eq. (2)); None when the reference was drawn

    def explain(self) -> dict[str, Any]:
        return {"region": self.region, "backend": self.backend, "mix": dict(self.mix),
                "n_prompts": self.n_prompts, "upper_drop": self.upper_drop}

    def reason(self, alpha: float) -> str:
        shares = ", ".join(f"{b} {s:.0%}" for b, s in self.mix.items())
        return (f"certificate: region {self.region} certified {shares} of its prompts "
                f"(judged pairs; the rest to the reference; family-wise error {alpha:g}); "
                f"this prompt drew {self.backend}"
                + ("" if self.upper_drop is None else
                   f" (drop bound {self.upper_drop:.4f} on {self.n_prompts} judged prompts)"))


@dataclass(frozen=True)
class RouteCertificate:
    """One route's certificate (``record`` is its published JSON form)."""

    reference: str
    promise: float
    backends: tuple[str, ...]
    centroids: np.ndarray  # (G, d) regions in Φ(x)
    mixes: tuple[Mapping[str, float], ...]  # per region: backend -> share
    n_prompts: np.ndarray  # (G, m) distinct judged prompts per region and backend
    upper: np.ndarray  # (G, m) U per region and backend (inf: no evidence)
    alpha: float
    pairs: int  # judged pairs read

    @property
    def certified_regions(self) -> int:
        return sum(1 for m in self.mixes if m)

    def record(self) -> dict[str, Any]:
        return {"reference": self.reference, "promise": self.promise,
                "backends": list(self.backends), "centroids": self.centroids.tolist(),
                "mixes": [dict(m) for m in self.mixes], "n_prompts": self.n_prompts.tolist(),
                "upper": [[None if not np.isfinite(u) else float(u) for u in row]
                          for row in self.upper],
                "alpha": self.alpha, "pairs": self.pairs}

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> RouteCertificate:
        upper = np.array([[np.inf if u is None else float(u) for u in row]
                          for row in r["upper"]], float)
        return cls(reference=str(r["reference"]), promise=float(r["promise"]),
                   backends=tuple(r["backends"]),
                   centroids=np.asarray(r["centroids"], np.float32),
                   mixes=tuple({str(b): float(s) for b, s in m.items()} for m in r["mixes"]),
                   n_prompts=np.asarray(r["n_prompts"], float), upper=upper,
                   alpha=float(r["alpha"]), pairs=int(r["pairs"]))

    def choose(self, phi: Any, share: float | None = None) -> Certified | None:
        """The certificate's pick for a prompt with Φ(x) = ``phi`` at its place ``share`` in
        [0, 1) (``text_share`` of its prompt-key text; default a hash of Φ(x)), or None
        where its region has no certified mix (the prior-based rule decides there)."""
        x = np.asarray(phi, np.float32).reshape(1, -1)
        if x.shape[1] != self.centroids.shape[1]:
            return None  # embedded otherwise than the regions were fitted: not this certificate's
        g = int(assign_regions(x, self.centroids)[0])
        mix = self.mixes[g]
        if not mix:
            return None
        u = phi_share(x) if share is None else float(share)
        acc, pick = 0.0, self.reference
        for backend, weight in mix.items():
            acc += weight
            if u < acc:
                pick = backend
                break
        if pick == self.reference:
            return Certified(pick, g, mix, 0, None)
        h = self.backends.index(pick)
        return Certified(pick, g, mix, int(self.n_prompts[g, h]), float(self.upper[g, h]))


def text_share(text: str) -> float:
    """A prompt's place in [0, 1) from its prompt-key text (``embed_text``): one prompt
    always draws the same policy, whichever encoder's Φ placed it in its region."""
    return prompt_share(text)


def phi_share(x: np.ndarray) -> float:
    """A prompt's place in [0, 1) from its Φ(x): one prompt always draws the same policy."""
    h = hashlib.blake2b(np.ascontiguousarray(x, np.float32).tobytes(), digest_size=8).digest()
    return int.from_bytes(h, "big") / 2.0**64


def route_certificates(config: Mapping[str, Any]) -> dict[str, RouteCertificate]:
    """The certificates a router version carries, per route."""
    return {route: RouteCertificate.from_record(r)
            for route, r in dict(config.get(CERTIFICATES_KEY) or {}).items()}
