"""The decision rule: calibrated quality minus λ·cost, δ-equivalence, cheapest wins.

Given the top-k candidates of one query (CSCR Eq. 9 with EquiRouter's tie-break):
    a_h = p̂_h − λ·c̃_h                     (score; p̂ is calibrated quality, c̃ ∈ [0, 1])
    E   = {h : a_h ≥ max_h a_h − δ}         (the equivalent set)
    h*  = argmin_{h ∈ E} c_h                (cost-aware tie-break; ties → higher a_h)
The rest of the candidates, by score, are the fallback order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class NoEligibleModel(LookupError):
    """Every model was filtered out (allowed list, maximum cost, or an empty pool)."""


@dataclass(frozen=True)
class Candidate:
    model: str
    similarity: float  # q · e_h
    quality: float  # p̂_h, calibrated estimate of quality in [0, 1]
    cost: float  # c̃_h, normalised cost in [0, 1]
    cost_usd: float | None  # predicted USD for this request, when the caller knows it
    score: float  # a_h = p̂_h − λ c̃_h


@dataclass(frozen=True)
class Decision:
    chosen: str
    ranked: tuple[str, ...]  # chosen first, then fallbacks by score
    candidates: tuple[Candidate, ...]  # in ranked order
    equivalent: tuple[str, ...]  # the δ-equivalent set E
    reason: str
    lam: float
    delta: float
    encoder: str | None = None  # the query encoder that decided, when a cascade chose one

    def to_dict(self) -> dict:
        """The decision as plain JSON types, for the log row; built field by field, since it
        runs on every routed request and ``dataclasses.asdict`` deep-copies recursively."""
        out = {
            "chosen": self.chosen,
            "ranked": list(self.ranked),
            "candidates": [dict(vars(c)) for c in self.candidates],
            "equivalent": list(self.equivalent),
            "reason": self.reason,
            "lam": self.lam,
            "delta": self.delta,
        }
        if self.encoder is not None:
            out["encoder"] = self.encoder
        return out


def decide(
    models: Sequence[str],
    similarity: np.ndarray,
    quality: np.ndarray,
    cost: np.ndarray,
    lam: float,
    delta: float,
    cost_usd: Sequence[float | None] | None = None,
) -> Decision:
    """Apply the rule to k candidates (arrays of shape (k,)).

    A candidate whose score is not finite (e.g. a model with a NaN descriptor or
    calibration) cannot be compared, so it is left out rather than allowed to win or crash.
    """
    score = np.asarray(quality, dtype=float) - lam * np.asarray(cost, dtype=float)
    keep = np.flatnonzero(np.isfinite(score))
    if len(keep) < len(models):
        models = [models[i] for i in keep]
        similarity, quality, cost, score = (
            np.asarray(a)[keep] for a in (similarity, quality, cost, score)
        )
        cost_usd = None if cost_usd is None else [cost_usd[i] for i in keep]
    if len(models) == 0:
        raise NoEligibleModel("no candidate model with a finite score")
    best = float(score.max())
    in_set = score >= best - delta
    eq_idx = np.flatnonzero(in_set)
    # cheapest in E; among equal cost the higher score
    winner = int(min(eq_idx, key=lambda i: (cost[i], -score[i])))
    rest = sorted((i for i in range(len(models)) if i != winner), key=lambda i: -score[i])
    order = [winner, *rest]
    usd = list(cost_usd) if cost_usd is not None else [None] * len(models)
    cands = tuple(
        Candidate(
            model=models[i],
            similarity=float(similarity[i]),
            quality=float(quality[i]),
            cost=float(cost[i]),
            cost_usd=None if usd[i] is None else float(usd[i]),
            score=float(score[i]),
        )
        for i in order
    )
    top = int(np.argmax(score))
    if len(eq_idx) == 1:
        reason = f"highest score ({best:.3f}) of {len(models)} candidates"
    elif winner == top:
        reason = f"best score and cheapest of {len(eq_idx)} equivalent (within δ={delta:g})"
    else:
        reason = (
            f"cheapest of {len(eq_idx)} equivalent (within δ={delta:g} of the best score "
            f"{best:.3f}, held by {models[top]})"
        )
    return Decision(
        chosen=models[winner],
        ranked=tuple(models[i] for i in order),
        candidates=cands,
        equivalent=tuple(models[i] for i in sorted(eq_idx, key=lambda i: cost[i])),
        reason=reason,
        lam=float(lam),
        delta=float(delta),
    )
