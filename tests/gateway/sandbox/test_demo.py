"""`tollgate demo` end to end on three RouterBench prompts (recorded answers, real prices,
the packaged router, the OpenAI SDK through a real gateway)."""

from __future__ import annotations

import pytest

from gateway.sandbox.demo import run_demo
from router_core.data.routerbench import MODELS


def test_demo_routes_recorded_prompts_and_reports_spend_and_quality() -> None:
    from router_core.data.paths import shared_data_dir

    if not (shared_data_dir() / "routerbench_subset").is_dir():
        pytest.skip("RouterBench data absent (../shared/data or $TOLLGATE_DATA_DIR)")
    lines: list[str] = []
    summary = run_demo(n_prompts=3, seed=1, echo=lines.append)
    assert summary["n"] == 3
    assert set(summary["mix"]) <= set(MODELS) and sum(summary["mix"].values()) == 3
    assert summary["strongest"] == "gpt-4-1106-preview"
    assert 0 < summary["spend"] and 0 < summary["spend_strongest"]
    assert summary["graded"] and summary["source"] == "routerbench"
    assert 0 <= summary["quality"] <= 1 and 0 <= summary["quality_strongest"] <= 1
    text = "\n".join(lines)
    assert "auto (routed)" in text and "always gpt-4-1106-preview" in text
    assert "routed to:" in text
    # every route's saving and quality, beside the strongest model
    assert set(summary["routes"]) == {"auto", "auto-balanced", "auto-cheap"}
    for name, r in summary["routes"].items():
        assert r["saves"] <= 1 and 0 <= r["quality"] <= 1, name
        assert any(line.startswith(name + " ") for line in lines)


def test_demo_without_benchmark_data_routes_built_in_prompts(tmp_path, monkeypatch) -> None:
    """A fresh clone has no ../shared/data: the demo still runs end to end (its own prompts,
    decisions and spend), says quality needs the data and how to give it, no traceback."""
    monkeypatch.setenv("TOLLGATE_DATA_DIR", str(tmp_path / "absent"))
    lines: list[str] = []
    summary = run_demo(n_prompts=4, seed=2, echo=lines.append)
    assert summary["source"] == "built-in" and not summary["graded"]
    assert summary["n"] == 4 and sum(summary["mix"].values()) == 4
    assert set(summary["mix"]) <= set(MODELS)
    assert summary["strongest"] == "gpt-4-1106-preview"  # the `auto` route's reference
    assert 0 < summary["spend"] <= summary["spend_strongest"] + 1e-12
    assert summary["quality"] is None
    assert set(summary["routes"]) == {"auto", "auto-balanced", "auto-cheap"}
    assert lines[0].startswith("tollgate demo: 4 built-in prompts")
    assert lines[-1].startswith("quality needs RouterBench's recorded grades: pass --data-dir")


def test_demo_with_an_absent_data_dir_is_one_line(tmp_path) -> None:
    from click.testing import CliRunner

    from gateway.cli import main

    res = CliRunner().invoke(main, ["demo", "--data-dir", str(tmp_path / "absent")])
    assert res.exit_code != 0
    assert res.output.startswith(f"Error: no RouterBench data in {tmp_path / 'absent'}: ")
    assert len(res.output.strip().splitlines()) == 1


def test_the_built_in_prompts_are_small_and_answered() -> None:
    import yaml

    from gateway.sandbox.demo import DEMO_PROMPTS_PATH

    assert DEMO_PROMPTS_PATH.stat().st_size < 20_000
    items = yaml.safe_load(DEMO_PROMPTS_PATH.read_text())["prompts"]
    assert len(items) >= 20 and all(i["prompt"] and i["answer"] and i["task"] for i in items)
