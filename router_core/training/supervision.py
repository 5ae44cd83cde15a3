"""Distribution-aware supervision ([DARS]; docs/references.md) from observed outcomes.

An observation is one scored answer: (prompt key, model, quality ∈ [0, 1], cost in USD,
source, sample index). A single observation is one draw from the model's capability
distribution on that prompt, so labels are built from the per-(prompt, model) aggregates

    q̄(x, m) = mean quality,   σ(x, m) = std of quality (ddof=0),   c̄(x, m) = mean cost,

and the risk-aware utility (DARS §4.2, with costs normalised by the dearest model's mean cost)

    U(x, m) = q̄(x, m) − λ·c̃(x, m) − β·σ(x, m),   c̃ = c̄ / max_m' mean-cost(m'),  β = 0.2.

Positives, cost bands and CARO pairs (EquiRouter Eq. for P_δ) are derived from these, never
from single samples. ``to_table`` turns the aggregates into a ``RoutingTable`` whose quality
is the risk-adjusted q̄ − β·σ: a trainer that scores q − λ·c̃ then optimises exactly U.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

# Table mixing lives in router_core.data.mix; supervision callers reach it as sv.mix etc.
from router_core.data.mix import concat, mix, table_observations, union_models
from router_core.data.table import RoutingTable

if TYPE_CHECKING:  # pandas is imported where it is used: serving never needs it
    import pandas as pd

BETA = 0.2  # DARS default risk coefficient (paper §5.2, Fig. 4c)
OBS_COLUMNS = ("prompt_key", "model", "quality", "cost")


def observations_frame(rows: pd.DataFrame | Iterable[Mapping]) -> pd.DataFrame:
    """Validate observations into a frame with at least ``OBS_COLUMNS``.

    Quality must lie in [0, 1]; cost may be NaN (unknown) but not negative.
    """
    import pandas as pd
    df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    missing = [c for c in OBS_COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"observations lack columns {missing}")
    df["prompt_key"] = df["prompt_key"].astype(str)
    df["model"] = df["model"].astype(str)
    df["quality"] = pd.to_numeric(df["quality"], errors="raise").astype(float)
    df["cost"] = pd.to_numeric(df["cost"], errors="coerce").astype(float)
    q = df["quality"].to_numpy()
    if np.isnan(q).any() or (q < 0).any() or (q > 1).any():
        raise ValueError("observation quality must be a number in [0, 1]")
    if (df["cost"].dropna() < 0).any():
        raise ValueError("observation cost must be non-negative")
    return df


@dataclass(frozen=True)
class Aggregates:
    """Per-(prompt, model) statistics of repeated observations; NaN where unobserved.

    Attributes:
        prompt_keys: (n,) prompt keys, sorted.
        models: (m,) model names, the column order.
        mean_quality: (n, m) q̄.
        spread: (n, m) σ, population std of the quality samples (0 for one sample).
        mean_cost: (n, m) c̄ in USD (NaN if no observation carried a cost).
        count: (n, m) number of observations.
    """

    prompt_keys: np.ndarray
    models: tuple[str, ...]
    mean_quality: np.ndarray
    spread: np.ndarray
    mean_cost: np.ndarray
    count: np.ndarray

    def __len__(self) -> int:
        return len(self.prompt_keys)

    @property
    def observed(self) -> np.ndarray:
        """(n, m) bool: the pair has at least one observation."""
        return self.count > 0

    def model_mean_cost(self) -> np.ndarray:
        """(m,) mean USD per query of each model over the prompts it was observed on."""
        with np.errstate(invalid="ignore"):
            out = np.nanmean(np.where(self.observed, self.mean_cost, np.nan), axis=0)
        return out

    def normalised_cost(self) -> np.ndarray:
        """(n, m) c̃ = c̄ / max over the pool of the models' mean costs (the router's scale)."""
        top = np.nanmax(self.model_mean_cost()) if len(self.models) else np.nan
        if not np.isfinite(top) or top <= 0:
            return np.zeros_like(self.mean_cost)
        return self.mean_cost / top

    def risk_adjusted_quality(self, beta: float = BETA) -> np.ndarray:
        """(n, m) q̄ − β·σ, clipped to [0, 1]; NaN where unobserved."""
        return np.clip(self.mean_quality - beta * self.spread, 0.0, 1.0)

    def utility(self, lam: float, beta: float = BETA) -> np.ndarray:
        """(n, m) U = q̄ − λ·c̃ − β·σ (DARS risk-aware utility); NaN where unobserved."""
        c = np.nan_to_num(self.normalised_cost(), nan=0.0)
        return self.mean_quality - lam * c - beta * self.spread

    def rows(self, index: np.ndarray | Sequence[int] | Sequence[bool]) -> Aggregates:
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        return replace(
            self,
            prompt_keys=self.prompt_keys[idx],
            mean_quality=self.mean_quality[idx],
            spread=self.spread[idx],
            mean_cost=self.mean_cost[idx],
            count=self.count[idx],
        )


def aggregate(
    observations: pd.DataFrame | Iterable[Mapping], models: Sequence[str] | None = None
) -> Aggregates:
    """Group observations per (prompt, model) into q̄, σ, c̄ and counts.

    ``models`` fixes the column order (and keeps models never observed as all-NaN columns);
    observations of models outside it are dropped.
    """
    import pandas as pd

    df = observations_frame(observations)
    if models is None:
        models = sorted(df["model"].unique())
    models = tuple(models)
    df = df[df["model"].isin(models)]
    g = df.groupby(["prompt_key", "model"], sort=True)
    stats = pd.DataFrame(
        {
            "q": g["quality"].mean(),
            "s": g["quality"].std(ddof=0),
            "c": g["cost"].mean(),
            "n": g["quality"].size(),
        }
    )
    keys = np.array(sorted(df["prompt_key"].unique()), dtype=object)

    def grid(col: str, fill: float) -> np.ndarray:
        wide = stats[col].unstack("model").reindex(index=keys, columns=list(models))
        return wide.to_numpy(dtype=float, na_value=fill)

    count = grid("n", 0.0).astype(int)
    return Aggregates(
        prompt_keys=keys,
        models=models,
        mean_quality=grid("q", np.nan),
        spread=np.where(count > 0, np.nan_to_num(grid("s", 0.0)), np.nan),
        mean_cost=grid("c", np.nan),
        count=count,
    )


def positives(agg: Aggregates, beta: float = BETA, threshold: float = 0.5) -> np.ndarray:
    """(n, m) bool: models whose risk-adjusted quality q̄ − β·σ reaches ``threshold``.

    With 0/1 outcomes and β = 0.2, a model right 3 times out of 3 is a positive, one right
    2 times out of 3 (q̄ = 0.67, σ = 0.47, adjusted 0.57) is too, 1 out of 2 is not.
    """
    with np.errstate(invalid="ignore"):
        return agg.observed & (agg.risk_adjusted_quality(beta) >= threshold)


def cost_bands(model_cost: np.ndarray, n_bands: int = 5) -> np.ndarray:
    """(m,) band index of each model: the trainer's equal-count cost bands (Eq. 8, K_b = 5).

    Delegates to ``router_core.losses.cost_bands`` so supervision and the loss agree on
    which band a model is in; a model with an unknown cost goes to the cheapest band.
    """
    from router_core.losses.cost_spectrum_infonce import cost_bands as loss_bands

    c = np.asarray(model_cost, dtype=float)
    finite = c[np.isfinite(c)]
    if len(finite) == 0:
        return np.zeros(len(c), dtype=int)
    return loss_bands(np.nan_to_num(c, nan=finite.min() - 1.0), n_bands).astype(int)


def band_positives(
    agg: Aggregates, beta: float = BETA, n_bands: int = 5, threshold: float = 0.5
) -> list[list[np.ndarray]]:
    """For each prompt, the positive models of each cost band that holds one (P_ik, Eq. 8).

    Returns ``out[i]`` = list of arrays of model indices, one per non-empty band, cheapest
    band first: the InfoNCE terms of prompt i average over exactly these bands.
    """
    pos = positives(agg, beta, threshold)
    band = cost_bands(agg.model_mean_cost(), n_bands)
    out: list[list[np.ndarray]] = []
    for i in range(len(agg)):
        groups = [np.flatnonzero(pos[i] & (band == b)) for b in np.unique(band)]
        out.append([g for g in groups if len(g)])
    return out


@dataclass(frozen=True)
class Pairs:
    """CARO preference pairs: on prompt ``row``, model ``better`` should outrank ``worse``."""

    row: np.ndarray
    better: np.ndarray
    worse: np.ndarray
    weight: np.ndarray
    by_cost: np.ndarray  # True where the pair comes from the cost tie-break (|ΔU| ≤ δ)

    def __len__(self) -> int:
        return len(self.row)


def caro_pairs(
    agg: Aggregates,
    lam: float = 0.0,
    beta: float = BETA,
    delta: float = 0.02,
    rho: float = 1.0,
) -> Pairs:
    """Cost-aware ranking pairs from the aggregates (EquiRouter's P_δ over DARS utilities).

        P_δ(x) = {(a, b) : U_a − U_b > δ} ∪ {(a, b) : |U_a − U_b| ≤ δ, c̄_a < c̄_b}

    Utility-driven pairs weigh 1, cost-driven pairs weigh ``rho``; pairs need both models
    observed on the prompt.
    """
    u = agg.utility(lam, beta)
    c = agg.mean_cost
    rows, better, worse, weight, by_cost = [], [], [], [], []
    m = len(agg.models)
    a_idx, b_idx = np.meshgrid(np.arange(m), np.arange(m), indexing="ij")
    a_idx, b_idx = a_idx.ravel(), b_idx.ravel()
    keep = a_idx != b_idx
    a_idx, b_idx = a_idx[keep], b_idx[keep]
    for i in range(len(agg)):
        ua, ub = u[i, a_idx], u[i, b_idx]
        ok = np.isfinite(ua) & np.isfinite(ub)
        du = ua - ub
        util = ok & (du > delta)
        with np.errstate(invalid="ignore"):
            cheap = ok & (np.abs(du) <= delta) & (c[i, a_idx] < c[i, b_idx])
        sel = util | cheap
        n = int(sel.sum())
        if n:
            rows.append(np.full(n, i))
            better.append(a_idx[sel])
            worse.append(b_idx[sel])
            weight.append(np.where(cheap[sel], rho, 1.0))
            by_cost.append(cheap[sel])

    def cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
        return np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype=dtype)

    return Pairs(
        row=cat(rows, int),
        better=cat(better, int),
        worse=cat(worse, int),
        weight=cat(weight, float),
        by_cost=cat(by_cost, bool),
    )


def holdout_mask(prompt_keys: Sequence[str], fraction: float = 0.2, salt: str = "") -> np.ndarray:
    """(n,) bool, True for the held-out slice: a stable hash of each key, not a random draw.

    A prompt stays on the same side across retrainings, so the promotion guard never
    evaluates a candidate on prompts it was trained on.
    """

    def unit(key: str) -> float:
        h = hashlib.sha256(f"{salt}|{key}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2**64

    return np.array([unit(str(k)) < fraction for k in prompt_keys], dtype=bool)


def to_table(
    agg: Aggregates,
    prompts: Mapping[str, str] | Sequence[str] | None = None,
    *,
    beta: float = BETA,
    split: str | np.ndarray = "train",
    name: str = "observations",
    labels: str = "positives",
    threshold: float = 0.5,
) -> RoutingTable:
    """One row per prompt: cost = c̄ and a quality label from the aggregates (NaN = unobserved).

    ``labels="risk"``: quality = q̄ − β·σ, so a trainer scoring quality − λ·c̃ optimises U.
    ``labels="positives"`` (default): the same, except that every DARS positive (q̄ − β·σ ≥
    ``threshold``) is set to 1. The trainer takes the best-quality models of a row as its
    positives; with graded q̄ that would be only the single top model, while the aggregates
    say every positive is good enough, so all of them tie at 1 and the cost tie-break (CARO)
    prefers the cheaper. Non-positives keep their graded q̄ − β·σ for the ranking pairs.
    ``prompts`` maps keys to text (or lists it in key order); without it the keys are the text.
    """
    keys = agg.prompt_keys
    if prompts is None:
        text = np.array(keys, dtype=object)
    elif isinstance(prompts, Mapping):
        text = np.array([prompts[k] for k in keys], dtype=object)
    else:
        text = np.asarray(prompts, dtype=object)
    sp = np.full(len(keys), split, dtype=object) if isinstance(split, str) else np.asarray(split)
    return RoutingTable(
        name=name,
        prompt_ids=np.asarray(keys, dtype=object),
        prompts=text,
        models=agg.models,
        quality=_labels(agg, beta, labels, threshold),
        cost=np.where(agg.observed, agg.mean_cost, np.nan),
        split=sp,
        sample=np.zeros(len(keys), dtype=int),
    )


def _labels(agg: Aggregates, beta: float, labels: str, threshold: float) -> np.ndarray:
    risk = agg.risk_adjusted_quality(beta)
    if labels == "risk":
        return risk
    if labels == "positives":
        return np.where(positives(agg, beta, threshold), 1.0, risk)
    raise ValueError(f"labels must be 'risk' or 'positives', not {labels!r}")


def single_shot(observations: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One observation drawn at random per (prompt, model): the single-shot baseline."""
    df = observations_frame(observations)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(df))
    shuffled = df.iloc[order]
    return shuffled.drop_duplicates(["prompt_key", "model"], keep="first").sort_index()


__all__ = [
    "BETA",
    "OBS_COLUMNS",
    "Aggregates",
    "Pairs",
    "aggregate",
    "band_positives",
    "caro_pairs",
    "concat",
    "cost_bands",
    "holdout_mask",
    "mix",
    "observations_frame",
    "positives",
    "single_shot",
    "table_observations",
    "to_table",
    "union_models",
]
