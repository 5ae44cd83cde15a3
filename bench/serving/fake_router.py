"""A small router artifact over the fake backends, built with router_core's own classes
(the reliability benches serve it; the gateway tests route with it).

Its calibration is flat (a_h = 0), so p̂_h = σ(b_h) whatever the prompt: the routing outcome
depends only on λ and the prices, which lets tests predict every decision exactly:
    p̂: fake-strong 0.90, fake-mid 0.75, fake-cheap 0.60
    prices (USD / 1M in, out): strong 10, 30; mid 1, 2; cheap 0.1, 0.2
λ = 0 → fake-strong; λ = 0.5 → fake-mid (a = 0.75 − 0.5·c̃_mid beats 0.9 − 0.5);
λ = 5 → fake-cheap. The head and descriptors are random but real (the candidate search runs).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from router_core.artifact import load_router, save_router
from router_core.runtime.router import Calibration, Expert, Head, Router

QUALITY = {"fake-strong": 0.90, "fake-mid": 0.75, "fake-cheap": 0.60}
PRICES = {"fake-strong": (10.0, 30.0), "fake-mid": (1.0, 2.0), "fake-cheap": (0.1, 0.2)}
REPLIES = {
    "fake-strong": "The strong model answers carefully and at length.",
    "fake-mid": "The mid model answers well.",
    "fake-cheap": "Cheap answer.",
}
VERSION = "test-router-1"


def _logit(p: float) -> float:
    return math.log(p / (1 - p))


def build_router(dim_in: int = 384, dim: int = 16, seed: int = 0) -> Router:
    rng = np.random.default_rng(seed)
    head = Head(
        layers=(
            (rng.normal(size=(32, dim_in)).astype(np.float32) / 20, np.zeros(32, np.float32)),
            (rng.normal(size=(dim, 32)).astype(np.float32) / 6, np.zeros(dim, np.float32)),
        )
    )
    experts = []
    for name in QUALITY:
        e = rng.normal(size=dim).astype(np.float32)
        pin, pout = PRICES[name]
        experts.append(Expert(name, e / np.linalg.norm(e), cost_usd=(pin + pout) * 1e-4))
    cal = Calibration(
        a={n: 0.0 for n in QUALITY}, b={n: _logit(p) for n, p in QUALITY.items()}, a0=0.0, b0=0.0
    )
    return Router(version=VERSION, head=head, experts=tuple(experts), calibration=cal, k=3,
                  delta=0.02)


def write_artifact(path: Path) -> Router:
    """Save the router as an artifact directory and load it back (the format round-trips)."""
    save_router(build_router(), path)
    return load_router(path)
