"""Routing-table mixing: widen, stack and weight-mix tables, and tables back to observations.

Split out of ``router_core.training.supervision`` (which re-exports these names): these helpers
combine observation-derived ``RoutingTable``s with base benchmark tables for training.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from router_core.data.table import RoutingTable

if TYPE_CHECKING:  # pandas is imported where it is used: serving never needs it
    import pandas as pd


def union_models(a: RoutingTable, b: RoutingTable) -> tuple[RoutingTable, RoutingTable]:
    """Both tables over the union of their models (a's order first), NaN where absent."""
    models = tuple(dict.fromkeys((*a.models, *b.models)))
    return _widen(a, models), _widen(b, models)


def _widen(t: RoutingTable, models: tuple[str, ...]) -> RoutingTable:
    if t.models == models:
        return t
    q = np.full((len(t), len(models)), np.nan)
    c = np.full((len(t), len(models)), np.nan)
    for j, m in enumerate(t.models):
        k = models.index(m)
        q[:, k], c[:, k] = t.quality[:, j], t.cost[:, j]
    return replace(t, models=models, quality=q, cost=c, responses={})


def mix(
    base: RoutingTable | None, observed: RoutingTable, weight: float, seed: int = 0
) -> RoutingTable:
    """Mix observation-derived rows with base benchmark rows; ``weight`` = observations' share.

    ``weight`` ∈ [0, 1] is the fraction of training rows that come from the observations
    (1 = observations only, 0 = base only). No row is dropped: the under-weighted side is
    replicated (whole copies plus a seeded random remainder) until the ratio holds. Only
    the ``train`` split of ``base`` takes part; ``observed`` keeps its own splits.
    """
    if not 0.0 <= weight <= 1.0:
        raise ValueError("weight must be in [0, 1]")
    if base is None or weight >= 1.0:
        return observed
    base = base.split_rows("train")
    if weight <= 0.0 or len(observed) == 0:
        return base
    base, observed = union_models(base, observed)
    rng = np.random.default_rng(seed)
    obs_train = np.flatnonzero(observed.split == "train")
    obs_other = np.flatnonzero(observed.split != "train")
    n_b, n_o = len(base), len(obs_train)
    target = weight / (1.0 - weight)  # wanted n_o' / n_b'
    if n_o == 0 or n_b == 0:
        return observed if n_b == 0 else base
    if n_o / n_b < target:
        obs_idx = _replicate(obs_train, target * n_b, rng)
        base_idx = np.arange(n_b)
    else:
        obs_idx = obs_train
        base_idx = _replicate(np.arange(n_b), n_o / target, rng)
    parts = [base.rows(base_idx), observed.rows(np.concatenate([obs_idx, obs_other]))]
    return concat(parts, name=observed.name)


def _replicate(idx: np.ndarray, n_target: float, rng: np.random.Generator) -> np.ndarray:
    n = round(n_target)
    whole, rest = divmod(n, len(idx))
    return np.concatenate([np.tile(idx, whole), rng.choice(idx, size=rest, replace=False)])


def concat(tables: Sequence[RoutingTable], name: str | None = None) -> RoutingTable:
    """Stack tables with identical model columns (sample and category kept when all have them)."""
    first = tables[0]
    if any(t.models != first.models for t in tables):
        raise ValueError("tables must share their model columns; use union_models first")

    def cat(get) -> np.ndarray | None:
        parts = [get(t) for t in tables]
        return None if any(p is None for p in parts) else np.concatenate(parts)

    return RoutingTable(
        name=name or first.name,
        prompt_ids=np.concatenate([np.asarray(t.prompt_ids, dtype=object) for t in tables]),
        prompts=np.concatenate([np.asarray(t.prompts, dtype=object) for t in tables]),
        models=first.models,
        quality=np.concatenate([t.quality for t in tables]),
        cost=np.concatenate([t.cost for t in tables]),
        split=np.concatenate([np.asarray(t.split, dtype=object) for t in tables]),
        category=cat(lambda t: t.category),
        sample=cat(lambda t: t.sample),
        cost_unit=first.cost_unit,
    )


def table_observations(table: RoutingTable, source: str = "benchmark") -> pd.DataFrame:
    """The observed cells of a routing table as long-format observations (one per cell)."""
    import pandas as pd

    n, _m = table.quality.shape
    rows, cols = np.nonzero(np.isfinite(table.quality))
    sample = table.sample if table.sample is not None else np.zeros(n, dtype=int)
    return pd.DataFrame(
        {
            "prompt_key": np.asarray(table.prompt_ids, dtype=object)[rows].astype(str),
            "model": np.asarray(table.models, dtype=object)[cols],
            "quality": table.quality[rows, cols],
            "cost": table.cost[rows, cols],
            "source": source,
            "sample": sample[rows],
        }
    )
