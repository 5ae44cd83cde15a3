"""`tollgate demo` end to end on three RouterBench prompts (recorded answers, real prices,
the packaged router, the OpenAI SDK through a real gateway)."""

from __future__ import annotations

from gateway.sandbox.demo import run_demo
from router_core.data.routerbench import MODELS


def test_demo_routes_recorded_prompts_and_reports_spend_and_quality() -> None:
    lines: list[str] = []
    summary = run_demo(n_prompts=3, seed=1, echo=lines.append)
    assert summary["n"] == 3
    assert set(summary["mix"]) <= set(MODELS) and sum(summary["mix"].values()) == 3
    assert summary["strongest"] == "gpt-4-1106-preview"
    assert 0 < summary["spend"] and 0 < summary["spend_strongest"]
    assert 0 <= summary["quality"] <= 1 and 0 <= summary["quality_strongest"] <= 1
    text = "\n".join(lines)
    assert "auto (routed)" in text and "always gpt-4-1106-preview" in text
    assert "routed to:" in text
    # every route's saving and quality, beside the strongest model
    assert set(summary["routes"]) == {"auto", "auto-balanced", "auto-cheap"}
    for name, r in summary["routes"].items():
        assert r["saves"] <= 1 and 0 <= r["quality"] <= 1, name
        assert any(line.startswith(name + " ") for line in lines)
