"""A two-encoder cascade: the static encoder decides when its decision is safe, MiniLM the rest.

Why: the static encoder (a token table, ~0.4 ms) routes most prompts as MiniLM (~4.7 ms)
does; MiniLM is worth its cost only where it would change the decision.

- One Φ space. The static encoder's vectors are mapped into MiniLM's by A (one hidden
  layer), fitted on the training prompts with the router frozen so that the experts'
  estimates match: min_A Σ_i (1 − Φ̂_i·Φ_i) + w·Σ_h (p̂_h(Φ̂_i) − p̂_h(Φ_i))²
  (router_core/losses/estimate_match.py, router_core/training/static_head.py). The router's
  own head, descriptors, calibration and every belief built on q then serve both encoders,
  and what is logged or learnt from (a request's Φ) always has MiniLM's width. (A ridge
  regression of Φ, the first map, left 6 more points of the decisions to MiniLM.)
- The rule. Decide on q_s; the decision stands when its margin (router_core.runtime.margin) is at
  least the threshold t, else Φ_MiniLM is computed and decides.
- Short prompts too. A benchmark's prompts are mostly long, a gateway's often short, and the
  static encoder agrees with MiniLM less on short ones (0.77 against 0.81 of decisions). So
  both fits also see one random window of 5-60 words of every prompt (``word_windows``):
  the map learns short inputs, and the threshold holds its agreement on them as well.
- The threshold is chosen on held-out training prompts (the validation rows, never test):
  the smallest t at which the cascade routes as MiniLM alone on at least ``agreement`` of
  the (prompt, λ) decisions over the evaluation λ grid (pooled, as AUDC integrates over it).
  Measured (bench/routing/cascade.py; LLMRouter, where the static encoder alone loses most):
  pooled 0.98 kept AUDC within 0.001 of MiniLM's, pooled 0.95 lost 0.013; requiring 0.98 at
  every λ instead sent 10-15 points more of the decisions to MiniLM for no AUDC. It reads no
  outcome, so it can be set on the prompts of any routing table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from router_core.runtime.decision import Decision
from router_core.runtime.margin import decision_margin
from router_core.runtime.router import Cascade, Router

STATIC_KIND = "minilm-static"
DEFAULT_AGREEMENT = 0.98  # share of (prompt, λ) decisions the cascade must share with MiniLM


def word_windows(prompts: list[str], seed: int = 0, shortest: int = 5, longest: int = 60
                 ) -> list[str]:
    """One window of ``shortest``-``longest`` consecutive words (uniform length and place) of
    each prompt, seeded: short prompts cut from the same distribution as the long ones."""
    rng = np.random.default_rng(seed)
    out = []
    for text in prompts:
        words = text.split()
        n = int(rng.integers(shortest, longest + 1))
        start = int(rng.integers(0, max(1, len(words) - n + 1)))
        out.append(" ".join(words[start:start + n]) or text)
    return out


def cascade_choices(router: Router, X_full: np.ndarray, X_static: np.ndarray,
                    lams: np.ndarray, threshold: float, **rule: Any
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(L, n) expert indexes the cascade chooses over the λ grid, and the (L, n) mask of the
    decisions MiniLM made (static margin below ``threshold``)."""
    static_q = router.project(router.cascade.estimate(X_static))
    static, margin = router.route_batch(static_q, lams, margins=True, **rule)
    full = router.route_batch(router.project(X_full), lams, **rule)
    ran_full = margin < threshold
    return np.where(ran_full, full, static), ran_full


def choose_threshold(margin: np.ndarray, same: np.ndarray,
                     agreement: float = DEFAULT_AGREEMENT) -> float:
    """The smallest t whose cascade matches MiniLM's decision on ≥ ``agreement`` of the
    pairs: static margins (any shape) and whether static's decision equals MiniLM's. A
    larger t sends more pairs to MiniLM, so agreement only grows with t."""
    m = np.asarray(margin, dtype=np.float64).ravel()
    wrong = ~np.asarray(same, dtype=bool).ravel()
    order = np.argsort(m, kind="stable")
    m, wrong = m[order], wrong[order]
    kept = np.concatenate([np.cumsum(wrong[::-1])[::-1], [0]])  # kept[i]: wrong in m[i:]
    values = np.unique(m[np.isfinite(m)])  # candidate thresholds, ascending
    if len(values) == 0 or kept[0] <= (1.0 - agreement) * len(m):
        return 0.0  # every decision may stand (a margin is ≥ 0)
    kept_at = kept[np.searchsorted(m, values, side="left")]  # non-increasing in t
    fits = np.flatnonzero(kept_at <= (1.0 - agreement) * len(m))
    return float(values[fits[0]]) if len(fits) else float(np.nextafter(values[-1], np.inf))


def fit_cascade(router: Router, X_full_train: np.ndarray, X_static_train: np.ndarray,
                X_full_val: np.ndarray, X_static_val: np.ndarray, lams: np.ndarray,
                static_settings: Mapping[str, Any], agreement: float = DEFAULT_AGREEMENT,
                check: Mapping[str, Any] | None = None) -> Router:
    """``router`` with a cascade: the map A fitted on the training prompts, the threshold on
    the validation prompts (see the module docstring). ``check``: {"text", "vector"}, the
    static encoder's vector of one text, which serving compares its own encoder's with.
    Needs torch (the map is trained through the frozen router)."""
    from router_core.training.static_head import train_static_head

    head = Cascade.stored(train_static_head(router, X_static_train, X_full_train))
    mapped = router.project(Cascade(head, 0.0, static_settings).estimate(X_static_val))
    static, margin = router.route_batch(mapped, lams, margins=True)
    full = router.route_batch(router.project(X_full_val), lams)
    same = static == full
    t = choose_threshold(margin, same, agreement)  # pooled over the λ grid, as AUDC is
    share = float(np.mean(margin < t))
    cascade = Cascade(head, t, dict(static_settings), fit={
        "agreement_target": agreement, "val_prompts": len(X_full_val),
        "val_static_agreement": float(np.mean(same)), "val_minilm_share": share,
        "n_lams": len(lams), **({"check": dict(check)} if check else {})})
    return replace(router, cascade=cascade)


def route_text(router: Router, text: str, static_encoder: Any, full_encoder: Any, lam: float,
               **rule: Any) -> Decision:
    """One λ-rule decision the cascade's way: on the static encoder's Φ first, on MiniLM's
    only when that decision's margin is below the threshold (``router.route``'s rule
    arguments pass through). ``decision.encoder`` names the encoder that decided."""
    cascade = router.cascade
    if cascade is not None:
        phi = cascade.estimate(static_encoder.encode([text]))
        decision = router.route(router.project(phi)[0], lam, **rule)
        if cascade.confident(decision_margin(decision)):
            return replace(decision, encoder=cascade.kind)
    decision = router.route(router.project(full_encoder.encode([text]))[0], lam, **rule)
    return replace(decision, encoder=full_encoder.kind)
