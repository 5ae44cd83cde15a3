"""The README's data commands run on a fresh clone: the sample in data/sample (derived from
RouterBench by scripts/make_sample.py, under 2 MB) loads as the full folder does and trains
a router, and `eval` runs on a small log export in the routing-table format."""

from __future__ import annotations

import csv
from pathlib import Path

from click.testing import CliRunner

from gateway.cli import main
from gateway.cli.logs import ROUTING_FIELDS
from router_core.data import load_dataset

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "data" / "sample"


def test_the_sample_is_small_and_loads_as_routerbench() -> None:
    size = sum(p.stat().st_size for p in SAMPLE.rglob("*") if p.is_file())
    assert size < 2_000_000
    table = load_dataset("routerbench", data_dir=SAMPLE)
    split = list(table.split)
    assert len(table.models) == 11
    assert {"train", "val", "test"} <= set(split) and split.count("test") >= 60


def test_train_runs_on_the_sample(tmp_path: Path) -> None:
    out = tmp_path / "router"
    result = CliRunner().invoke(main, ["train", "--dataset", "routerbench", "--data-dir",
                                       str(SAMPLE), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "manifest.json").exists() or any(out.iterdir())


def test_eval_runs_on_a_small_log_export(tmp_path: Path) -> None:
    """Four prompts, two backends each, as `tollgate logs --format routing-table` writes
    them (no split column): a seeded split still has test and val prompts."""
    path = tmp_path / "observed.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(ROUTING_FIELDS))
        w.writeheader()
        for i in range(4):
            for model, quality, cost in (("gpt-4o-mini", 1.0, 1e-4),
                                         ("llama-3.1-8b-instruct", float(i % 2 == 0), 1e-5)):
                w.writerow({"prompt_id": f"p{i}", "prompt": f"question {i} about toll roads",
                            "model": model, "quality": quality, "cost": cost,
                            "category": "chat"})
    result = CliRunner().invoke(main, ["eval", "--dataset", str(path)])
    assert result.exit_code == 0, result.output
    assert "tollgate " in result.output and "AUDC" in result.output
