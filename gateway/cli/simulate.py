"""``tollgate simulate``: the learning loop closed on recorded benchmark outcomes (the run
itself is gateway/sandbox/simulate.py)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from gateway.sandbox.simulate import print_table, run_simulation


@click.command("simulate")
@click.option("--dataset", default="routerbench", show_default=True)
@click.option("--data-dir", default=None, help="Benchmark data folder (default: shared data).")
@click.option("--rounds", type=int, default=4, show_default=True)
@click.option(
    "--feedback", type=click.Choice(["recorded", "judge"]), default="recorded", show_default=True
)
@click.option("--json", "json_path", default=None, help="Write the result as JSON here.")
@click.option("--epsilon", type=float, default=1.0, show_default=True,
              help="Exploration probability per request.")
@click.option("--candidates", type=int, default=10, show_default=True,
              help="Other models asked per explored request.")
@click.option("--exploration-budget-usd", type=float, default=100.0, show_default=True)
@click.option("--max-prompts", type=int, default=None, help="Use only this many prompts.")
@click.option("--max-test-prompts", type=int, default=None,
              help="Score on a seeded subset of the test split of this size.")
@click.option("--workers", type=int, default=8, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
def simulate_command(dataset: str, data_dir: str | None, rounds: int, feedback: str,
                     json_path: str | None, epsilon: float, candidates: int,
                     exploration_budget_usd: float, max_prompts: int | None,
                     max_test_prompts: int | None, workers: int, seed: int) -> None:
    """Close the learning loop on recorded benchmark outcomes and print it round by round."""
    result = run_simulation(
        dataset, data_dir, rounds, feedback, epsilon=epsilon, candidates=candidates,
        budget_usd=exploration_budget_usd, workers=workers, max_prompts=max_prompts,
        max_test_prompts=max_test_prompts, seed=seed)
    print_table(result)
    if json_path:
        Path(json_path).write_text(json.dumps(result, indent=2))
