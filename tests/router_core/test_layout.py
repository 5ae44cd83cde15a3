"""router_core/ grouped by when its code runs (docs/architecture.md, "The layers of
router_core/"): a short top level, each group holding its kind of code, no benchmark in the
package, and the packaged artifacts still found from the moved code."""

from __future__ import annotations

from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "router_core"
GROUPS = {
    "runtime": {"router.py", "decision.py", "margin.py"},
    "tuning": {"cascade_fit.py", "lambda_choice.py", "calibration_fit.py", "promise_measure.py"},
    "env": {"litellm_env.py", "hub_reach.py", "sqlite_cache.py"},
}


def test_the_top_level_holds_at_most_six_modules():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= 6, top


def test_each_group_holds_its_kind_of_code():
    for group, modules in GROUPS.items():
        assert modules <= {p.name for p in (PKG / group).glob("*.py")}, group


def test_no_benchmark_ships_inside_the_package():
    assert [p.relative_to(PKG).as_posix() for p in PKG.rglob("bench*.py")] == []


def test_the_packaged_artifacts_load_from_their_directories():
    from router_core.artifact import DEFAULT_ROUTER_DIR, ROUTERBENCH_ROUTER_DIR, load_router

    for path in (DEFAULT_ROUTER_DIR, ROUTERBENCH_ROUTER_DIR):
        assert path.parent == PKG
        assert load_router(path).experts
