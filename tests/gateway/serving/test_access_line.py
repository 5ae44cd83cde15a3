"""The access line of a request no model answered names what was asked for (issue 37:
refused requests showed `→ -`), from the request-log row the gateway writes for it."""

from __future__ import annotations

from gateway.serving.record.access_log import access_fields, format_access


def _line(**row: object) -> str:
    base = {"id": "tg-1", "tenant_id": "t1", "cost_usd": 0.0, "latency_ms": 3.0,
            "attempts": []}
    return format_access(access_fields({**base, **row}, "acme"))


def test_a_refused_passthrough_names_the_model_asked_for() -> None:
    line = _line(route=None, reason="passthrough", chosen_model="gpt-4o", status=429)
    assert "passthrough → gpt-4o (asked, not answered) 429" in line
    assert "→ -" not in line


def test_a_refused_route_says_it_was_not_answered() -> None:
    line = _line(route="auto", reason="budget", chosen_model="fake-mid", status=402)
    assert "auto → not answered 402" in line  # the route is what was asked


def test_a_request_refused_before_its_body_was_read_names_nothing_it_does_not_know() -> None:
    line = _line(route=None, reason=None, chosen_model=None, status=401)
    assert "passthrough → not answered 401" in line


def test_an_answered_request_names_the_model_that_answered() -> None:
    line = _line(route="auto", reason="promise", chosen_model="fake-mid", status=200)
    assert "auto → fake-mid 200" in line
