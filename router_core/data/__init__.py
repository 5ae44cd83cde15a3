"""Routing benchmark data: one ``RoutingTable`` form, loaders, and the split recipes.

``load_dataset(name_or_path, split, data_dir, seed)`` is the one entry point: a dataset
name (``routerbench``, ``mmlu-pro``, ``llmrouter``) or a long-format CSV/JSONL/Parquet
path, and a split recipe (``standard``, ``ood``, ``unseen-models``). Every table it
returns has ``train``, ``val`` (a seeded 10% of the training prompts, for tuning) and
``test`` rows.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from router_core.data.longformat import is_long_format_path, load_long_format
from router_core.data.paths import shared_data_dir
from router_core.data.splits import (
    MMLU_PRO_STEM,
    SPLIT_NAMES,
    TEST_FRACTION,
    carve_val,
    ood_split,
    random_split,
    unseen_models_split,
)
from router_core.data.table import SPLITS, RoutingTable

DATASETS = ("routerbench", "mmlu-pro", "llmrouter")
ALL = "all"  # the three combined over canonical expert ids (router_core.data.combined)
_ALIASES = {"mmlu_pro": "mmlu-pro", "mmlupro": "mmlu-pro", "routerbench_subset": "routerbench"}


def _standard(name: str, data_dir: str | Path | None, seed: int) -> RoutingTable:
    if name == "routerbench":
        from router_core.data.routerbench import load_routerbench

        return load_routerbench(data_dir)
    if name == "llmrouter":
        from router_core.data.llmrouter import load_llmrouter

        return load_llmrouter(data_dir)
    if name == "mmlu-pro":
        from router_core.data.mmlu_pro import load_mmlu_pro

        table = load_mmlu_pro(data_dir)
        return table.with_split(random_split(table.prompt_ids, TEST_FRACTION, seed))
    path = Path(name)
    table, has_split = load_long_format(path)
    if not has_split:
        table = table.with_split(random_split(table.prompt_ids, TEST_FRACTION, seed))
    return table


def load_dataset(
    name_or_path: str | Path,
    split: str = "standard",
    data_dir: str | Path | None = None,
    seed: int = 0,
) -> RoutingTable:
    """Load a benchmark or a long-format file with the given split recipe.

    Args:
        name_or_path: ``routerbench``, ``mmlu-pro``, ``llmrouter``, ``all`` (the three
            combined, standard split only) or a file path.
        split: ``standard``; ``ood`` (MMLU-Pro: train on STEM categories, test on the
            others); ``unseen-models`` (standard rows, a third of the models held out as
            ``table.unseen_models``).
        data_dir: folder holding the benchmarks (default: ``shared_data_dir()``).
        seed: seeds every random draw (test share where there is no official split, val
            carving, held-out models).
    """
    if split not in SPLIT_NAMES:
        raise ValueError(f"unknown split {split!r}; use one of {SPLIT_NAMES}")
    raw = str(name_or_path)
    name = _ALIASES.get(raw.lower(), raw.lower())
    if name == ALL:
        if split != "standard":
            raise ValueError(f"dataset {ALL!r} has the standard split only")
        from router_core.data.combined import combine

        # the standard splits of the three benchmarks, combined
        return combine([load_dataset(d, "standard", data_dir=data_dir, seed=seed)
                        for d in DATASETS])
    if name not in DATASETS:
        if not is_long_format_path(raw):
            raise ValueError(
                f"unknown dataset {raw!r}: use one of {DATASETS} or a .csv/.jsonl/.parquet path"
            )
        name = raw
    table = _standard(name, data_dir, seed)
    if split == "ood":
        if table.name != "mmlu-pro":
            raise ValueError("the ood split is defined for mmlu-pro (STEM -> non-STEM)")
        table = ood_split(table, MMLU_PRO_STEM)
    elif split == "unseen-models":
        table = unseen_models_split(table, seed)
    table = carve_val(table, seed=seed)
    if not (np.asarray(table.split) == "test").any():
        n = len(np.unique(table.prompt_ids))
        raise ValueError(f"{table.name}: the {split} split has no test rows ({n} prompts; "
                         "a file without a split column needs at least 3, or give it a "
                         "split column: train, val, test)")
    return replace(table, split_name=split)


__all__ = [
    "ALL",
    "DATASETS",
    "SPLITS",
    "SPLIT_NAMES",
    "RoutingTable",
    "load_dataset",
    "shared_data_dir",
]
