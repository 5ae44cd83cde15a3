"""Each endpoint's story is one function that reads top to bottom (issue 38): authenticate →
admit and parse → plan → count routing → admissible → reserve → attempts → send (settled and
logged by gateway/serving/delivery.py), inside the frame's ``async with``, not a
callback."""

from __future__ import annotations

import ast
import inspect
from dataclasses import FrozenInstanceError

import pytest

from gateway.serving.chat import handler
from gateway.serving.completions import completions_handler
from gateway.serving.forwarding.attempts import Attempted
from gateway.serving.messages import messages_handler
from gateway.serving.responses import responses_handler

STORIES = [(handler, "chat_completions"), (responses_handler, "responses_endpoint"),
           (completions_handler, "completions"), (messages_handler, "messages_endpoint")]
STEPS = ["authenticate", "admit", "plan", "record_routing", "admissible", "reserve_tokens",
         "attempt", "send_"]


def _calls(fn: ast.AsyncFunctionDef) -> list[str]:
    """The names called in ``fn``, in source order."""
    calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    return [c.func.attr if isinstance(c.func, ast.Attribute) else getattr(c.func, "id", "")
            for c in calls]


@pytest.mark.parametrize(("module", "name"), STORIES)
def test_each_story_runs_its_steps_in_order_inside_the_frame(module, name):
    fn = ast.parse(inspect.getsource(getattr(module, name))).body[0]
    assert isinstance(fn, ast.AsyncFunctionDef)
    frame = fn.body[-2] if isinstance(fn.body[0], ast.Expr) else fn.body[0]
    assert isinstance(frame, ast.AsyncWith) and ast.unparse(frame.items[0].context_expr
                                                            ).startswith("Frame(")
    called = _calls(fn)
    found = [next(i for i, c in enumerate(called) if c.startswith(step)) for step in STEPS]
    assert found == sorted(found), list(zip(STEPS, found, strict=True))
    assert len(inspect.getsource(getattr(module, name)).splitlines()) <= 20


def test_what_the_attempts_did_is_frozen():
    tried = Attempted(tried=({"model": "a", "status": 200, "error": None},))
    with pytest.raises(FrozenInstanceError):
        tried.answered = None  # type: ignore[misc]
    assert isinstance(tried.tried, tuple) and tried.refusal is None and not tried.cacheable
