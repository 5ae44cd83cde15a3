"""The runtime router: head g_θ, expert descriptors, calibration, the rule.

A ``Router`` is immutable: adding or removing a model returns a new one, so a gateway can
swap routers atomically between requests (requests in flight keep the old object).
It needs numpy only; torch is for training, not for routing. The candidate search is an
exact inner product over a few dozen descriptors, one small matrix product: an index
library (FAISS, ~25 MB of every serving worker) buys nothing at this size.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from router_core.runtime.decision import Decision, NoEligibleModel, decide
from router_core.runtime.margin import rule_margins


def _activation(name: str, x: np.ndarray) -> np.ndarray:
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "gelu":  # tanh approximation is not used in training: exact erf form
        from scipy.special import erf

        return 0.5 * x * (1.0 + erf(x / np.sqrt(2.0)))
    if name == "tanh":
        return np.tanh(x)
    raise ValueError(f"unknown activation {name!r}")


@dataclass(frozen=True)
class Head:
    """g_θ as numpy: Linear → act → … → Linear; q = g(x)/‖g(x)‖.

    ``layers`` is [(W, b), ...] with W of shape (out, in), as torch's ``nn.Linear`` stores it.
    """

    layers: tuple[tuple[np.ndarray, np.ndarray], ...]
    activation: str = "relu"

    @property
    def in_dim(self) -> int:
        return int(self.layers[0][0].shape[1])

    @property
    def out_dim(self) -> int:
        return int(self.layers[-1][0].shape[0])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = np.asarray(x, dtype=np.float32)
        for i, (w, b) in enumerate(self.layers):
            h = h @ w.T + b
            if i < len(self.layers) - 1:
                h = _activation(self.activation, h)
        norm = np.linalg.norm(h, axis=-1, keepdims=True)
        return (h / np.maximum(norm, 1e-12)).astype(np.float32)


@dataclass(frozen=True)
class Calibration:
    """p̂_h = σ(a_h · s + b_h): similarity s → P(good answer), fitted per model on train.

    A model without its own fit (added later, no training data) uses the pooled (a0, b0).
    """

    a: Mapping[str, float]
    b: Mapping[str, float]
    a0: float
    b0: float

    def __call__(self, model: str, s: np.ndarray | float) -> np.ndarray:
        a = self.a.get(model, self.a0)
        b = self.b.get(model, self.b0)
        return 1.0 / (1.0 + np.exp(-(a * np.asarray(s) + b)))


@dataclass(frozen=True)
class Expert:
    name: str
    descriptor: np.ndarray  # e_h, unit vector of the head's output dimension
    cost_usd: float  # mean USD per query observed in training (or from prices)
    kind: str = "probe-outcome"  # descriptor kind: probe-outcome | perplexity | logit


CHECK_COSINE = 0.999  # the static encoder's vector of the check text, against the recorded one


# the cascade's static head is stored in half precision: float32 doubled the artifact (~1.3 MB
# more at 512 hidden units) for no change in decisions once the threshold is chosen on it
CASCADE_DTYPE = np.float16


@dataclass(frozen=True)
class Cascade:
    """The static encoder's map into MiniLM's Φ space and the threshold its decision stands
    at (router_core/tuning/cascade_fit.py fits both).

    Deciding writes nothing here: a decision names the encoder that made it
    (``Decision.encoder``), and whoever reports the share that ran MiniLM counts those
    (the gateway's ``tollgate_routing_decisions`` metric)."""

    head: Head
    threshold: float
    encoder: Mapping[str, Any]  # the static encoder's settings (router_core.encoders)
    fit: Mapping[str, Any] = field(default_factory=dict)  # how the threshold was chosen
    _built: list = field(default_factory=list, compare=False, repr=False)
    _lock: Any = field(default_factory=threading.Lock, compare=False, repr=False)

    def static_encoder(self, make: Callable[[Mapping[str, Any]], Any]) -> Any:
        """The static encoder, built by ``make`` (``router_core.encoders.make_encoder``) on
        first use and kept with the cascade (a router swapped in keeps its own); None when
        it does not give the vectors the map was fitted on (``fit["check"]``: an export
        distilled elsewhere differs), so that MiniLM decides everything."""
        with self._lock:
            if not self._built:
                encoder = make(dict(self.encoder))
                check = self.fit.get("check")
                if check:
                    got = np.asarray(encoder.encode([check["text"]]), dtype=np.float64)[0]
                    want = np.asarray(check["vector"], dtype=np.float64)
                    if got.shape != want.shape or float(got @ want) < CHECK_COSINE:
                        encoder = None
                self._built.append(encoder)
            return self._built[0]

    @property
    def static_built(self) -> bool:
        """Has ``static_encoder`` been built (so that a call no longer loads anything)?"""
        return bool(self._built)

    @property
    def kind(self) -> str:
        return str(self.encoder.get("kind", "minilm-static"))

    def estimate(self, static_phi: np.ndarray) -> np.ndarray:
        """Φ̂(x): the static encoder's vectors (n, 256) mapped into MiniLM's Φ space (n, 384),
        unit length, for the router's own head (router_core/tuning/cascade_fit.py)."""
        return self.head(np.atleast_2d(static_phi))

    @staticmethod
    def stored(head: Head) -> Head:
        """``head`` at the precision arrays.npz keeps it in (``CASCADE_DTYPE``), widened back
        to float32: what serving computes with, so the threshold is chosen on it."""
        return Head(layers=tuple(
            tuple(np.asarray(a, dtype=CASCADE_DTYPE).astype(np.float32) for a in layer)
            for layer in head.layers), activation=head.activation)

    def confident(self, margin: float) -> bool:
        """Does the static decision stand? (margin ≥ t; a single candidate always does)."""
        return bool(margin >= self.threshold)

    def settings(self) -> dict:
        """What router.json records (the head's arrays go to arrays.npz)."""
        return {"threshold": float(self.threshold), "encoder": dict(self.encoder),
                "head": {"activation": self.head.activation, "n_layers": len(self.head.layers)},
                "fit": dict(self.fit)}


@dataclass(frozen=True)
class Router:
    """Routes a query embedding Φ(x) to an expert.

    Example::

        router = load_router("router_core/default_router")
        q = router.project(encoder.encode(["Write a haiku"]))[0]
        d = router.route(q, lam=0.5)
        d.chosen, d.ranked, d.reason
    """

    version: str
    head: Head
    experts: tuple[Expert, ...]
    calibration: Calibration
    k: int = 4
    delta: float = 0.02
    config: Mapping = field(default_factory=dict)
    # the static encoder's map into the Φ space g_θ reads, and when its decision stands
    cascade: Cascade | None = field(default=None, compare=False)
    _index: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self._index is None:  # the descriptors as one (n_experts, d) float32 matrix
            index = (
                np.stack([e.descriptor for e in self.experts]).astype(np.float32)
                if self.experts
                else np.zeros((0, self.head.out_dim), dtype=np.float32)
            )
            object.__setattr__(self, "_index", index)

    def _top(self, q32: np.ndarray, eligible: Sequence[int], kk: int) -> np.ndarray:
        """The ``kk`` eligible experts most similar to each query of ``q32`` (n, d), most
        similar first: (n, kk) indexes into ``experts`` (float32 products, stable order)."""
        cand = np.asarray(eligible, dtype=np.int64)
        sims = q32 @ self._index[cand].T
        order = np.argsort(-sims, axis=1, kind="stable")[:, :kk]
        return cand[order]

    @property
    def model_names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.experts)

    def project(self, phi: np.ndarray) -> np.ndarray:
        """Φ(x) (n, 384) → q (n, d) unit vectors."""
        return self.head(np.atleast_2d(phi))

    def normalised_costs(self, costs_usd: Mapping[str, float] | None = None) -> np.ndarray:
        """c̃ = c / max(c). With ``costs_usd`` the maximum is over the experts it prices (the
        caller's pool: a gateway route divides by its own dearest backend, whatever else the
        artifact holds, so λ means the same in any pool); without it over every expert at its
        trained mean cost (the same normalisation as training)."""
        c = np.array(
            [(costs_usd or {}).get(e.name, e.cost_usd) for e in self.experts], dtype=np.float64
        )
        priced = [i for i, e in enumerate(self.experts) if e.name in (costs_usd or {})]
        pool = c[priced] if priced else c
        top = pool.max() if len(pool) else 1.0
        return c / top if top > 0 else np.zeros_like(c)

    def route(
        self,
        q: np.ndarray,
        lam: float,
        *,
        delta: float | None = None,
        k: int | None = None,
        allowed: Collection[str] | None = None,
        costs_usd: Mapping[str, float] | None = None,
        max_cost_usd: float | None = None,
    ) -> Decision:
        """Choose an expert for one query vector q (d,).

        Args:
            lam: cost weight λ (0 = quality only).
            allowed: restrict to these model names.
            costs_usd: per-request predicted USD per model; also overrides the cost scale.
            max_cost_usd: drop models whose predicted cost exceeds this (needs costs_usd or
                the trained mean costs).
        """
        names = self.model_names
        cost_norm = self.normalised_costs(costs_usd)
        usd = {e.name: (costs_usd or {}).get(e.name, e.cost_usd) for e in self.experts}
        eligible = [
            i
            for i, n in enumerate(names)
            if (allowed is None or n in allowed)
            and (max_cost_usd is None or usd[n] <= max_cost_usd)
        ]
        if not eligible:
            raise NoEligibleModel("no model satisfies the allowed list and maximum cost")
        kk = min(k or self.k, len(eligible)) if (k or self.k) else len(eligible)
        q32 = np.asarray(q, dtype=np.float32).reshape(1, -1)
        idx = self._top(q32, eligible, kk)[0]
        # the similarities are recomputed in float64 so that single and batched routing
        # (route_batch) see bit-identical numbers
        sims = self._descriptors64()[idx] @ np.asarray(q, dtype=np.float32).astype(np.float64)
        models = [names[i] for i in idx]
        quality = np.array([self.calibration(m, s) for m, s in zip(models, sims)], dtype=float)
        return decide(
            models,
            similarity=sims.astype(float),
            quality=quality,
            cost=cost_norm[idx],
            lam=lam,
            delta=self.delta if delta is None else delta,
            cost_usd=[usd[m] for m in models],
        )

    def _descriptors64(self) -> np.ndarray:
        return (
            np.stack([e.descriptor for e in self.experts]).astype(np.float32).astype(np.float64)
            if self.experts
            else np.zeros((0, self.head.out_dim))
        )

    def quality_estimates(self, Q: np.ndarray) -> np.ndarray:
        """(n, experts) p̂_ih = σ(a_h·q_i·e_h + b_h) for query vectors Q (``project``'s
        output), every expert, in expert order: what evaluation and λ choice read."""
        S = np.atleast_2d(np.asarray(Q, dtype=np.float64)) @ self._descriptors64().T
        return np.stack(
            [self.calibration(n, S[:, i]) for i, n in enumerate(self.model_names)], axis=1
        )

    def route_batch(
        self,
        Q: np.ndarray,
        lams: Sequence[float] | np.ndarray,
        *,
        delta: float | None = None,
        k: int | None = None,
        allowed: Collection[str] | None = None,
        costs_usd: Mapping[str, float] | None = None,
        margins: bool = False,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Vectorised ``route``: the chosen expert index for every (λ, query).

        Same candidates, similarities, calibration and rule as ``route`` (tested to give
        identical decisions), for evaluation sweeps. Q is (n, d) query vectors (``project``
        output); returns an int array (len(lams), n) indexing ``self.experts``, and with
        ``margins`` also each decision's margin (router_core.runtime.margin), float (len(lams), n).
        """
        names = self.model_names
        cost_norm = self.normalised_costs(costs_usd)
        eligible = [i for i, n in enumerate(names) if allowed is None or n in allowed]
        if not eligible:
            raise NoEligibleModel("no model satisfies the allowed list")
        kk = min(k or self.k, len(eligible)) if (k or self.k) else len(eligible)
        q32 = np.ascontiguousarray(np.atleast_2d(Q), dtype=np.float32)
        idx = self._top(q32, eligible, kk)
        E = self._descriptors64()
        q64 = q32.astype(np.float64)
        sims = np.empty(idx.shape, dtype=np.float64)
        for r in range(len(idx)):  # same float64 products as route(): one query at a time
            sims[r] = E[idx[r]] @ q64[r]
        a = np.array([self.calibration.a.get(n, self.calibration.a0) for n in names])
        b = np.array([self.calibration.b.get(n, self.calibration.b0) for n in names])
        quality = 1.0 / (1.0 + np.exp(-(a[idx] * sims + b[idx])))  # (n, k)
        cost = cost_norm[idx]  # (n, k)
        dl = self.delta if delta is None else delta
        out = np.empty((len(lams), len(idx)), dtype=np.int64)
        gap = np.empty((len(lams), len(idx)), dtype=np.float64)
        for li, lam in enumerate(lams):
            score = quality - lam * cost
            best = score.max(axis=1, keepdims=True)
            in_set = score >= best - dl
            c_in = np.where(in_set, cost, np.inf)
            cheapest = in_set & (c_in == c_in.min(axis=1, keepdims=True))
            pick = np.argmax(np.where(cheapest, score, -np.inf), axis=1)
            out[li] = idx[np.arange(len(idx)), pick]
            if margins:
                gap[li] = rule_margins(score, cost, pick, dl)
        return (out, gap) if margins else out

    def with_expert(
        self,
        expert: Expert,
        version: str | None = None,
        *,
        a: float | None = None,
        b: float | None = None,
    ) -> Router:
        """A new router with ``expert`` added (or replaced): no retraining.

        ``a``, ``b``: the expert's own calibration (e.g. a probe readout); without them it
        uses the pooled (a0, b0).
        """
        if expert.descriptor.shape != (self.head.out_dim,):
            raise ValueError(
                f"descriptor has shape {expert.descriptor.shape}, the router's space is "
                f"({self.head.out_dim},)"
            )
        experts = tuple(e for e in self.experts if e.name != expert.name) + (expert,)
        cal_a = {k: v for k, v in self.calibration.a.items() if k != expert.name}
        cal_b = {k: v for k, v in self.calibration.b.items() if k != expert.name}
        if a is not None and b is not None:
            cal_a[expert.name], cal_b[expert.name] = float(a), float(b)
        calibration = replace(self.calibration, a=cal_a, b=cal_b)
        return replace(
            self,
            experts=experts,
            calibration=calibration,
            version=version or self.version,
            _index=None,
        )

    def without_expert(self, name: str, version: str | None = None) -> Router:
        experts = tuple(e for e in self.experts if e.name != name)
        return replace(self, experts=experts, version=version or self.version, _index=None)
