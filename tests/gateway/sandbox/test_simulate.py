"""A small closed-loop simulation: real gateway, replay upstream of RouterBench's recorded
answers, feedback and judge modes, retraining and hot swap per round; the JSON shape."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from gateway.cli import main
from gateway.sandbox.simulate import run_simulation


@pytest.mark.slow
@pytest.mark.parametrize("feedback", ["recorded", "judge"])
def test_small_simulation_learns_and_reports_every_round(feedback: str) -> None:
    out = run_simulation(
        rounds=2,
        feedback=feedback,
        max_prompts=120,
        max_test_prompts=120,
        candidates=10,
        workers=4,
        min_holdout=5,
        log=lambda _: None,
    )
    assert set(out) == {"rounds", "start_audc", "offline_audc", "baselines"}
    assert [r["round"] for r in out["rounds"]] == [1, 2]
    for r in out["rounds"]:
        assert set(r) == {"round", "audc", "qnc", "exploration_usd"}
        assert 0.0 < r["audc"] <= 1.0 and r["exploration_usd"] > 0
    assert set(out["baselines"]) == {"oracle", "random", "cheapest", "best_single"}
    assert out["baselines"]["oracle"] > out["offline_audc"]
    # after two rounds of fully explored traffic the live router beats the cold start
    assert out["rounds"][-1]["audc"] > out["start_audc"]


def test_simulate_cli_writes_the_json(tmp_path) -> None:
    path = tmp_path / "sim.json"
    res = CliRunner().invoke(
        main,
        [
            "simulate",
            "--rounds",
            "1",
            "--max-prompts",
            "40",
            "--max-test-prompts",
            "40",
            "--candidates",
            "2",
            "--workers",
            "2",
            "--json",
            str(path),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(path.read_text())
    assert len(doc["rounds"]) == 1 and "offline_audc" in doc
    assert "start (cold router)" in res.output
