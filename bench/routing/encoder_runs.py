"""The dataset runs the encoder comparison evaluates, with the prompt subsets they use.

A forward pass of SmolLM2-135M over 128 tokens took ~0.4 s per prompt on one idle CPU thread
and ~1 s with the dev box's two cores shared by seven processes, so the activation encoder
cannot embed all ~21k benchmark prompts here in an hour. Each run keeps every test prompt
where it can and a seeded subset of the rest: RouterBench 1500 of its 2205 train+val
prompts; MMLU-Pro one subset of 1200 prompts shared by its standard and ood splits (its ood
test alone has 5336); LLMRouter 1200 of its train+val prompts. Every encoder and router of a
run sees the same rows, so the comparison is paired; the absolute numbers are not those of
the full tables.
"""

from __future__ import annotations

from dataclasses import dataclass

from router_core.data import RoutingTable, load_dataset
from router_core.data.splits import subsample_prompts


@dataclass(frozen=True)
class Run:
    dataset: str
    split: str
    max_prompts: int | None = None  # seeded subset of all prompts (every split)
    max_fit_prompts: int | None = None  # seeded subset of the train and val prompts only


RUNS = (
    Run("routerbench", "standard", max_fit_prompts=1500),
    Run("mmlu-pro", "standard", max_prompts=1200),
    Run("mmlu-pro", "ood", max_prompts=1200),
    Run("llmrouter", "standard", max_fit_prompts=1200),
)


def run_table(run: Run, seed: int = 0) -> RoutingTable:
    """The run's table; the subsets use seed 0 whatever the eval seed (one shared cache)."""
    table = load_dataset(run.dataset, split=run.split, seed=seed)
    if run.max_prompts:
        table = subsample_prompts(table, run.max_prompts, seed=0)
    if run.max_fit_prompts:
        table = subsample_prompts(table, run.max_fit_prompts, seed=0, splits=("train", "val"))
    return table
