"""Split recipes over a ``RoutingTable``: standard, val carving, ood and unseen-models.

Every recipe is a pure function of the table and a seed, so every trainer and evaluator
that loads ``(dataset, split, seed)`` sees the same rows and the same model roles.
Repeated samples of one prompt always land in the same split (grouping by ``prompt_id``),
so no prompt leaks between train and test.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from router_core.data.table import RoutingTable

SPLIT_NAMES = ("standard", "ood", "unseen-models")
VAL_FRACTION = 0.1
TEST_FRACTION = 0.2
UNSEEN_SHARE = 1.0 / 3.0

# MMLU-Pro categories that are STEM, mirroring CSCR Table 6 (science, technology,
# engineering, mathematics, and the medical subjects it files under STEM).
MMLU_PRO_STEM = frozenset(
    {"math", "physics", "chemistry", "engineering", "biology", "computer science", "health"}
)


def _groups(prompt_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unique prompt ids (in first-seen order) and each row's group index."""
    uniq, first, inverse = np.unique(prompt_ids, return_index=True, return_inverse=True)
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inverse]


def random_split(prompt_ids: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """``train``/``test`` per row, a seeded share of prompts to test."""
    uniq, group = _groups(np.asarray(prompt_ids))
    rng = np.random.default_rng(seed)
    # at least one test prompt when there are a few: a small export (`tollgate logs
    # --format routing-table`) still has a test split
    n_test = round(test_fraction * len(uniq)) or (1 if len(uniq) >= 3 else 0)
    is_test = np.zeros(len(uniq), dtype=bool)
    is_test[rng.permutation(len(uniq))[:n_test]] = True
    return np.where(is_test[group], "test", "train").astype(object)


def carve_val(table: RoutingTable, fraction: float = VAL_FRACTION, seed: int = 0) -> RoutingTable:
    """Move a seeded ``fraction`` of the training prompts to ``val`` (for tuning only).

    Rows already marked ``val`` are kept; nothing is carved if some exist.
    """
    split = np.asarray(table.split, dtype=object).copy()
    if (split == "val").any():
        return table.with_split(split)
    train = np.flatnonzero(split == "train")
    uniq, group = _groups(table.prompt_ids[train])
    rng = np.random.default_rng(seed + 7919)  # independent of the test draw
    n_val = round(fraction * len(uniq)) or (1 if len(uniq) >= 2 else 0)  # tuning needs one
    pick = np.zeros(len(uniq), dtype=bool)
    pick[rng.permutation(len(uniq))[:n_val]] = True
    split[train[pick[group]]] = "val"
    return table.with_split(split)


def ood_split(table: RoutingTable, train_categories: frozenset[str]) -> RoutingTable:
    """Train on rows whose category is in ``train_categories``, test on all the others."""
    if table.category is None:
        raise ValueError(f"{table.name} has no categories: the ood split needs them")
    in_train = np.isin(table.category.astype(str), sorted(train_categories))
    split = np.where(in_train, "train", "test").astype(object)
    return replace(table.with_split(split), split_name="ood")


def unseen_models_split(table: RoutingTable, seed: int = 0) -> RoutingTable:
    """Hold out a seeded third of the models (rounded, at least 2): ``table.unseen_models``.

    The rows keep their standard split. A router is trained on the seen models only and
    routes the test rows among the unseen ones, knowing them only through descriptors built
    from their outcomes on probe prompts taken from the training rows.
    """
    m = table.n_models
    n_unseen = max(2, round(UNSEEN_SHARE * m))
    if n_unseen >= m:
        raise ValueError(f"{table.name} has {m} models: too few for an unseen-models split")
    rng = np.random.default_rng(seed + 104729)
    held = set(rng.permutation(m)[:n_unseen].tolist())
    unseen = tuple(name for i, name in enumerate(table.models) if i in held)
    return replace(table, unseen_models=unseen, split_name="unseen-models")


def subsample_prompts(
    table: RoutingTable, n: int, seed: int = 0, splits: tuple[str, ...] = ("train", "val", "test")
) -> RoutingTable:
    """Keep a seeded subset of ``n`` prompts among the rows of ``splits`` (others all kept).

    The subset depends on the prompt ids and the seed only, not on the split recipe, so the
    standard and ood splits of one dataset share their prompts (and their cached
    activations). For when a costly encoder cannot embed every prompt on the machine at hand.
    """
    split = np.asarray(table.split)
    among = np.isin(split, list(splits))
    uniq, group = _groups(table.prompt_ids)
    rng = np.random.default_rng(seed + 15485863)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[rng.permutation(len(uniq))] = np.arange(len(uniq))
    candidates = np.unique(group[among])
    if n >= len(candidates):
        return table
    keep_groups = candidates[np.argsort(rank[candidates], kind="stable")[:n]]
    keep = ~among | np.isin(group, keep_groups)
    return table.rows(keep)
