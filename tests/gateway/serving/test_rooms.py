"""gateway/serving/ stays split into rooms (issue 38): one subpackage per endpoint beside the
shared rooms they use, and only the frame every endpoint shares at the top level."""

from __future__ import annotations

import ast
from pathlib import Path

SERVING = Path(__file__).resolve().parents[3] / "gateway" / "serving"
MAX_TOP = 12  # modules directly in gateway/serving/, __init__.py counted


def test_serving_has_at_most_twelve_top_level_modules():
    top = sorted(p.name for p in SERVING.glob("*.py"))
    assert "__init__.py" in top
    assert len(top) <= MAX_TOP, f"{len(top)} modules at gateway/serving/'s top level: {top}"


def test_every_room_is_a_package_that_says_what_it_holds():
    rooms = sorted(p for p in SERVING.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert {"chat", "responses", "completions", "embeddings", "messages"} <= {p.name for p in rooms}
    for room in rooms:
        init = room / "__init__.py"
        assert init.is_file(), f"{room.name}/ has no __init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{room.name}/__init__.py"
        assert any(p.name != "__init__.py" for p in room.glob("*.py")), f"{room.name}/ is empty"


def test_no_room_shares_a_name_with_a_module():
    """``gateway.serving.<room>`` never means a module too: the codemod that made the rooms
    (and may run again after a merge) relies on it."""
    modules = {p.stem for p in SERVING.rglob("*.py")}
    rooms = {p.name for p in SERVING.iterdir() if p.is_dir()}
    assert modules & rooms == set()
