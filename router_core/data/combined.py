"""All three benchmarks as one table over canonical expert ids (``load_dataset("all")``).

Each dataset keeps its own standard split (train, val and test rows are exactly those of
``load_dataset(name)``), its columns are renamed to the identity table's expert ids
(router_core/identity/model_identity.yaml), so a model several datasets hold (Mixtral-8x7B-Instruct)
is one column, and a row has outcomes only for the models its dataset has (NaN elsewhere:
not observed, never wrong).

Costs are on one scale per dataset, not in USD: the datasets price differently (RouterBench
recorded USD, MMLU-Pro's is a proxy, LLMRouter's uses token counts), so each dataset's cost
is divided by the mean training cost of its priciest model,

    c'_{i,m} = c_{i,m} / max_{m' ∈ D(i)} mean_{j ∈ train(D)} c_{j,m'},

which is the c̃ a single-dataset router trains with. Prompt ids are prefixed with the
dataset (``mmlu-pro:70``) and so are categories, so ``row_datasets`` recovers each row's
source.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from router_core.data.table import RoutingTable
from router_core.identity.table import IdentityTable, identity_table

NAME = "all"
SEP = ":"


def canonical_table(table: RoutingTable, ids: IdentityTable | None = None) -> RoutingTable:
    """``table`` with its model columns renamed to expert ids (same order)."""
    names = (ids or identity_table()).columns_of(table.name)
    unknown = [m for m in table.models if m not in names]
    if unknown:
        raise ValueError(f"{table.name}: models {unknown} are not in the identity table")
    return replace(
        table,
        models=tuple(names[m] for m in table.models),
        responses={names[m]: v for m, v in table.responses.items()},
        unseen_models=tuple(names[m] for m in table.unseen_models),
    )


def train_cost_scale(table: RoutingTable) -> float:
    """The mean training cost of the table's priciest model (what c̃ divides by)."""
    train = np.asarray(table.split) == "train"
    return float(np.nanmax(np.nanmean(table.cost[train], axis=0)))


def combine(tables: list[RoutingTable], ids: IdentityTable | None = None) -> RoutingTable:
    """One table over the union of the tables' expert ids (see the module docstring)."""
    parts = [canonical_table(t, ids) for t in tables]
    models = tuple(dict.fromkeys(m for t in parts for m in t.models))
    n = sum(len(t) for t in parts)
    quality = np.full((n, len(models)), np.nan)
    cost = np.full((n, len(models)), np.nan)
    responses: dict[str, np.ndarray] = {}
    row = 0
    for t in parts:
        cols = [models.index(m) for m in t.models]
        quality[row : row + len(t), cols] = t.quality
        cost[row : row + len(t), cols] = t.cost / train_cost_scale(t)
        for m, v in t.responses.items():
            responses.setdefault(m, np.full(n, None, dtype=object))[row : row + len(t)] = v
        row += len(t)

    def cat(t: RoutingTable) -> np.ndarray:
        base = t.category if t.category is not None else np.full(len(t), "", dtype=object)
        return np.array([f"{t.name}/{c}" for c in base], dtype=object)

    return RoutingTable(
        name=NAME,
        prompt_ids=np.concatenate(
            [np.array([f"{t.name}{SEP}{p}" for p in t.prompt_ids], dtype=object) for t in parts]
        ),
        prompts=np.concatenate([np.asarray(t.prompts, dtype=object) for t in parts]),
        models=models,
        quality=quality,
        cost=cost,
        split=np.concatenate([np.asarray(t.split, dtype=object) for t in parts]),
        category=np.concatenate([cat(t) for t in parts]),
        responses=responses,
        cost_unit=(
            "per-dataset scale: each dataset's cost / its priciest model's mean training cost "
            "(router_core.data.combined)"
        ),
    )


def row_datasets(table: RoutingTable) -> np.ndarray:
    """(n,) the dataset each row of a combined table came from."""
    return np.array([str(p).split(SEP, 1)[0] for p in table.prompt_ids], dtype=object)

