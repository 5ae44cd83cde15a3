"""Calibration: similarity s = q·e_h → p̂_h = σ(a_h·s + b_h), an estimate of quality.

Raw similarities are not on the scale of quality, so λ would trade them against cost badly
(docs/evaluation.md, "Why calibration"). We fit, on held-out rows, one logistic per model
plus a pooled (a0, b0) for models added later without data. Quality may be fractional
(scores in [0, 1]): each cell enters as a positive with weight u and a negative with
weight 1 − u, which is the Bernoulli log-likelihood of a soft label.

Models with no rows of their own (unseen models, described only by their descriptor) are
placed with their level ℓ_h (e.g. probe accuracy): a pooled fit p = σ(a·s + c·logit ℓ + b)
gives them a_h = a, b_h = b + c·logit ℓ_h.

Example::

    cal = fit_calibration(S_val, Q_val, models)    # S, Q: (n, m)
    p = cal("gpt-4-1106-preview", 0.31)
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from router_core.runtime.router import Calibration


def _logit(p: np.ndarray, eps: float = 1e-3) -> np.ndarray:
    p = np.clip(np.asarray(p, dtype=float), eps, 1 - eps)
    return np.log(p / (1 - p))


def fit_soft_logistic(x: np.ndarray, u: np.ndarray, c: float) -> tuple[np.ndarray, float]:
    """Weighted logistic regression on soft labels u ∈ [0, 1]; returns (coef, intercept)."""
    x = x.reshape(len(u), -1)
    xs = np.concatenate([x, x])
    ys = np.concatenate([np.ones(len(u)), np.zeros(len(u))])
    ws = np.concatenate([u, 1 - u])
    if ws[ys == 1].sum() <= 0 or ws[ys == 0].sum() <= 0:  # never right / never wrong
        mean = float(np.clip(u.mean(), 1e-3, 1 - 1e-3))
        return np.zeros(x.shape[1]), float(np.log(mean / (1 - mean)))
    from sklearn.linear_model import LogisticRegression  # lazily: a serving process never fits

    model = LogisticRegression(C=c, max_iter=1000)
    model.fit(xs, ys, sample_weight=ws)
    return model.coef_[0], float(model.intercept_[0])


def fit_calibration(
    sim: np.ndarray,
    quality: np.ndarray,
    models: Sequence[str],
    *,
    fit_models: Sequence[str] | None = None,
    level: np.ndarray | None = None,
    c: float = 1.0,
) -> Calibration:
    """Fit p̂_h = σ(a_h s + b_h).

    Args:
        sim: (n, m) similarities q·e_h of n held-out queries to the m models.
        quality: (n, m) observed quality in [0, 1] (NaN = not observed).
        models: the m model names (columns).
        fit_models: models whose own columns may be used (default: all); the others get the
            level rule when ``level`` is given, else the pooled (a0, b0).
        level: (m,) each model's quality level from its descriptor (e.g. probe accuracy).
        c: inverse L2 strength of sklearn's LogisticRegression.
    """
    sim = np.asarray(sim, dtype=float)
    quality = np.asarray(quality, dtype=float)
    own = [i for i, m in enumerate(models) if fit_models is None or m in set(fit_models)]
    a: dict[str, float] = {}
    b: dict[str, float] = {}
    xs, us, ls = [], [], []
    for i in own:
        ok = np.isfinite(quality[:, i]) & np.isfinite(sim[:, i])
        if ok.sum() < 2:
            continue
        coef, icpt = fit_soft_logistic(sim[ok, i], quality[ok, i], c)
        a[models[i]], b[models[i]] = float(coef[0]), icpt
        xs.append(sim[ok, i])
        us.append(quality[ok, i])
        if level is not None:
            ls.append(np.full(ok.sum(), _logit(level[i])))
    if not xs:
        return Calibration(a={}, b={}, a0=1.0, b0=0.0)
    x, u = np.concatenate(xs), np.concatenate(us)
    coef0, b0 = fit_soft_logistic(x, u, c)
    a0 = float(coef0[0])
    if level is not None:
        coef, icpt = fit_soft_logistic(np.stack([x, np.concatenate(ls)], axis=1), u, c)
        for i, m in enumerate(models):
            if m not in a:
                a[m] = float(coef[0])
                b[m] = float(icpt + coef[1] * _logit(level[i]))
    return Calibration(a=a, b=b, a0=a0, b0=b0)


def calibration_from_params(
    a: np.ndarray,
    b: np.ndarray,
    fitted: Sequence[str],
    models: Sequence[str],
    level: np.ndarray | None = None,
) -> Calibration:
    """A Calibration from jointly learned (a_h, b_h) of the ``fitted`` models.

    Models of ``models`` without their own parameters get the median slope and, when
    ``level`` (aligned with ``models``) is given, b = β0 + β1·logit ℓ_h, a least-squares
    line through the fitted models' (logit ℓ_h, b_h); the pooled (a0, b0) are the medians.
    """
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    out_a = {m: float(x) for m, x in zip(fitted, a)}
    out_b = {m: float(x) for m, x in zip(fitted, b)}
    a0, b0 = float(np.median(a)), float(np.median(b))
    if level is not None:
        idx = [list(models).index(m) for m in fitted]
        x = _logit(np.asarray(level)[idx])
        slope, icpt = np.polyfit(x, b, 1) if len(set(x.round(6))) > 1 else (0.0, b0)
        for i, m in enumerate(models):
            if m not in out_a:
                out_a[m] = a0
                out_b[m] = float(icpt + slope * _logit(level[i]))
    return Calibration(a=out_a, b=out_b, a0=a0, b0=b0)
