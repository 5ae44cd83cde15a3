"""The README's data commands: the sample scripts/make_sample.py makes from the benchmark data
(RouterBench, under 2 MB; made here into a temporary folder, as the repository keeps no data)
loads as the full folder does and trains a router, and `eval` runs on a small log export in
the routing-table format."""

from __future__ import annotations

import csv
import importlib.util
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from gateway.cli import main
from gateway.cli.logs import ROUTING_FIELDS
from router_core.data import load_dataset

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(os.environ.get("TOLLGATE_DATA_DIR") or ROOT.parent / "shared" / "data")


@pytest.fixture(scope="module")
def sample(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's first command: scripts/make_sample.py on the benchmark data."""
    spec = importlib.util.spec_from_file_location("make_sample", ROOT / "scripts" / "make_sample.py")
    assert spec is not None and spec.loader is not None
    make_sample = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_sample)
    out = tmp_path_factory.mktemp("sample")
    make_sample.write_sample(DATA, out)
    return out


def test_the_sample_is_small_and_loads_as_routerbench(sample: Path) -> None:
    size = sum(p.stat().st_size for p in sample.rglob("*") if p.is_file())
    assert size < 2_000_000
    table = load_dataset("routerbench", data_dir=sample)
    split = list(table.split)
    assert len(table.models) == 11
    assert {"train", "val", "test"} <= set(split) and split.count("test") >= 60


def test_train_runs_on_the_sample(sample: Path, tmp_path: Path) -> None:
    out = tmp_path / "router"
    result = CliRunner().invoke(main, ["train", "--dataset", "routerbench", "--data-dir",
                                       str(sample), "--out", str(out)])
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
