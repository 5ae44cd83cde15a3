"""The dashboard's saving is never shown alone: per route, beside the quality change against
the same model (the route's reference where it has a promise, else the strongest), estimated
from the logged p̂ and measured where observations judged both on the same prompt."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from gateway.learning import tables as ldb
from gateway.pricing import Price
from gateway.review.dashboard.judged_outcomes import judged_outcomes
from gateway.review.dashboard.savings import UNKNOWN, promise_reference
from gateway.store import prompt_keys
from tests.gateway.review.log_db import summary_of

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
PRICES = {"cheap": Price(1e-6, 2e-6), "mid": Price(3e-6, 6e-6), "strong": Price(10e-6, 30e-6)}
SECRET = prompt_keys.derive(b"test server secret")  # as a store derives its own
RM = {"cheap": "m-cheap", "mid": "m-mid", "strong": "m-strong"}  # backend -> router model


def _cand(backend: str, p: float, cost: float, ref: bool, within: bool = True) -> dict:
    return {"model": RM[backend], "backend": backend, "similarity": 0.5, "quality": p,
            "cost": cost / 0.001, "cost_usd": cost, "score": 0.0,
            "promise": {"backend": backend, "known": "trained", "p": p, "n": 20.0,
                        "lower": p - 0.1, "drop_bound": 0.0 if ref else 0.008, "cost": cost,
                        "within": within}}


def promise_row(i: int, chosen: str, reference: str = "mid", stand_in: str | None = None,
                route: str = "auto") -> dict:
    """A routed row with records: cheap p̂ 0.70 at $0.0001, mid 0.74 at $0.0010."""
    cands = [_cand("cheap", 0.70, 0.0001, reference == "cheap"),
             _cand("mid", 0.74, 0.0010, reference == "mid")]
    reason = (f"promise: within 0.01 of {reference} (named in config); cheapest of 2 backends"
              + (f"; {stand_in} stood in for the reference, which this request may not use"
                 if stand_in else ""))
    cost = {"cheap": 0.0001, "mid": 0.0010}[chosen]
    return {"id": f"p{i}", "created_at": NOW - timedelta(minutes=30 - i), "tenant_id": "a",
            "route": route, "chosen_model": chosen, "status": 200, "cost_usd": cost,
            "prompt_tokens": 100, "completion_tokens": 50, "latency_ms": 10.0, "ttft_ms": None,
            "attempts": [{"model": chosen, "status": 200}], "feedback": [],
            "router_version": "v1", "candidates": cands, "reason": reason}


def plain_row(i: int, route: str | None, chosen: str, cands: dict[str, float] | None) -> dict:
    """A row without a promise: λ-routed (candidates with p̂) or passthrough (none)."""
    c = [{"model": RM[b], "backend": b, "quality": p, "cost_usd": 0.0} for b, p in
         (cands or {}).items()]
    return {"id": f"q{i}", "created_at": NOW - timedelta(minutes=20 - i), "tenant_id": "a",
            "route": route, "chosen_model": chosen, "status": 200, "cost_usd": 0.0002,
            "prompt_tokens": 100, "completion_tokens": 50, "latency_ms": 10.0, "ttft_ms": None,
            "attempts": [{"model": chosen, "status": 200}], "feedback": [],
            "router_version": "v1", "candidates": c, "reason": "a = p − λc" if c else None}


def _summary(engine: sa.Engine, rows: list[dict], outcomes: dict | None = None, **kw) -> dict:
    return summary_of(engine, rows, now=NOW, window_start=NOW - timedelta(hours=1),
                      tenants=[], prices=PRICES, names={}, outcomes=outcomes,
                      promises={"auto": {"reference": "mid", "max_drop": 0.01}},
                      routes=["auto", "auto-lam"], **kw)


ROWS = [promise_row(0, "cheap"), promise_row(1, "cheap"), promise_row(2, "mid"),
        plain_row(0, "auto-lam", "cheap", {"cheap": 0.6, "strong": 0.8}),
        plain_row(1, "auto-lam", "strong", {"cheap": 0.6, "strong": 0.8}),
        plain_row(2, None, "cheap", None)]


def _never_alone(s: dict) -> None:
    """Wherever a saving is given, the quality change against the same model is beside it."""
    for entry in [s["saving"], *s["route_savings"]]:
        if entry.get("saving_usd") is not None:
            assert entry["quality_change"], entry
            assert "estimated_quality_change" in entry and "measured_quality_change" in entry
            assert entry["quality_change_known"] or entry["quality_change"] == UNKNOWN, entry


def test_promise_route_saving_beside_its_estimated_quality_change(log_engine) -> None:
    s = _summary(log_engine, ROWS)
    _never_alone(s)
    by = {r["route"]: r for r in s["route_savings"]}
    assert list(by) == ["auto", "auto-lam", "passthrough"]
    auto = by["auto"]
    assert (auto["against"], auto["reference"], auto["promise"]) == ("reference", "mid", 0.01)
    # the reference's expected cost against the chosen one's, from the same records
    assert auto["comparator_usd"] == pytest.approx(3 * 0.0010)
    assert auto["actual_usd"] == pytest.approx(2 * 0.0001 + 0.0010)
    assert auto["saving_usd"] == pytest.approx(0.0018)
    assert auto["saving_share"] == pytest.approx(0.6)
    # mean of p̂_chosen − p̂_ref: −0.04 twice and 0 on the reference itself
    assert auto["estimated_quality_change"] == pytest.approx(-0.08 / 3)
    assert auto["estimated_n"] == 3
    # nothing judged: measured is unknown, and says so
    assert auto["measured_quality_change"] is None and auto["measured_n"] == 0
    assert auto["measured_note"] == "n/a"
    assert auto["quality_change"] == "estimated -0.027, measured n/a"
    lam = by["auto-lam"]  # no promise: against the strongest, p̂ from its candidates
    assert (lam["against"], lam["reference"], lam["promise"]) == ("strongest", "strong", None)
    assert lam["estimated_quality_change"] == pytest.approx((-0.2 + 0.0) / 2)
    strong_each = 100 * 10e-6 + 50 * 30e-6
    assert lam["saving_usd"] == pytest.approx(2 * strong_each - 2 * 0.0002)
    passthrough = by["passthrough"]  # the client chose the model: no saving is claimed
    assert passthrough["saving_usd"] is None and passthrough["against"] is None
    assert passthrough["quality_change"] == "not compared: the client chose the model"
    # the headline: routed traffic only, each route against its own comparator, with the
    # quality change over the same rows (issue 37: it counted passthrough against the
    # strongest)
    sv = s["saving"]
    assert (sv["against"], sv["routes"], sv["passthrough_requests"]) == (
        "reference", ["auto", "auto-lam"], 1)
    assert sv["comparator_usd"] == pytest.approx(auto["comparator_usd"] + lam["comparator_usd"])
    assert sv["actual_usd"] == pytest.approx(auto["actual_usd"] + lam["actual_usd"])
    assert sv["saving_usd"] == pytest.approx(auto["saving_usd"] + lam["saving_usd"])
    assert sv["cumulative_actual"][-1] == pytest.approx(sv["actual_usd"])
    assert sv["cumulative_comparator"][-1] == pytest.approx(sv["comparator_usd"])
    assert (sv["estimated_n"], sv["compared"]) == (5, 5)
    assert sv["estimated_quality_change"] == pytest.approx((-0.08 - 0.2) / 5)
    assert sv["quality_change"] == "estimated -0.056, measured n/a"


def test_measured_quality_change_where_observations_exist(log_engine) -> None:
    # p0 (cheap) judged 0.5 against the reference's 1.0 on the same prompt; p1 not judged
    outcomes = {"p0": {"m-cheap": 0.5, "m-mid": 1.0}, "p1": {"m-cheap": 0.9},
                "q0": {"m-cheap": 0.7, "m-strong": 0.9}}
    s = _summary(log_engine, ROWS, outcomes)
    _never_alone(s)
    by = {r["route"]: r for r in s["route_savings"]}
    auto = by["auto"]
    # 2 of 3 requests off the reference, each by the judged mean −0.5 on average
    assert auto["measured_n"] == 1
    assert auto["off_comparator_share"] == pytest.approx(2 / 3)
    assert auto["measured_quality_change"] == pytest.approx(2 / 3 * -0.5)
    assert auto["quality_change"] == "estimated -0.027, measured -0.333 (n=1)"
    lam = by["auto-lam"]
    assert lam["measured_n"] == 1
    assert lam["measured_quality_change"] == pytest.approx(0.5 * -0.2)


def test_every_request_on_the_reference_measures_no_change(log_engine) -> None:
    s = _summary(log_engine, [promise_row(0, "mid"), promise_row(1, "mid")])
    auto = {r["route"]: r for r in s["route_savings"]}["auto"]
    assert auto["saving_usd"] == pytest.approx(0.0)
    assert auto["estimated_quality_change"] == 0.0 and auto["measured_quality_change"] == 0.0
    assert auto["measured_n"] == 0
    # a configured route without requests in the window still has its row, with no claim
    lam = {r["route"]: r for r in s["route_savings"]}["auto-lam"]
    assert lam["saving_usd"] is None and lam["quality_change"] == "no requests compared"


def test_the_reference_is_read_from_the_reason_and_a_stand_in_is_named(log_engine) -> None:
    assert promise_reference(promise_row(0, "cheap")) == (0.01, "mid", False)
    # the configured reference was not allowed to this request: mid stood in for it
    stood = promise_row(0, "cheap", reference="strong", stand_in="mid")
    assert promise_reference(stood) == (0.01, "mid", True)
    assert promise_reference(plain_row(0, "x", "cheap", {"cheap": 0.5})) == (None, None, False)
    s = _summary(log_engine, [stood])
    assert {r["route"]: r for r in s["route_savings"]}["auto"]["stand_in"] == 1


def test_judged_outcomes_read_every_source_on_the_request_prompt() -> None:
    engine = sa.create_engine("sqlite://")
    ldb.requests_t.create(engine)
    ldb.observations_t.create(engine)
    with engine.begin() as conn:
        conn.execute(sa.insert(ldb.requests_t).values(
            request_id="r1", tenant_id="a", prompt_key="k1", route="auto", model="m-cheap",
            backend="cheap", cost_usd=0.0001, created_at=NOW))
    add = ldb.add_observation
    add(engine, key="k1", model="m-cheap", quality=0.4, cost_usd=None, source="judge",
        request_id="r1")
    add(engine, key="k1", model="m-cheap", quality=0.6, cost_usd=None, source="feedback",
        request_id="r1", tenant_id="a")
    add(engine, key="k1", model="m-mid", quality=1.0, cost_usd=None, source="shadow",
        request_id="r0")  # the reference judged on an earlier request of the same prompt
    add(engine, key="k2", model="m-mid", quality=0.0, cost_usd=None, source="shadow")
    add(engine, key="k1", model="m-mid", quality=0.0, cost_usd=None, source="import")
    got = judged_outcomes(engine, [{"id": "r1"}, {"id": "r2", "prompt_text": "hello"}],
                          SECRET)
    assert got == {"r1": {"m-cheap": pytest.approx(0.5), "m-mid": 1.0}}
    # the judge compared r3's answer beside the reference's: that comparison alone counts
    hello = ldb.prompt_key("hello", SECRET)  # no learning_requests row: the logged prompt's key
    add(engine, key=hello, model="m-cheap", quality=0.2, cost_usd=None, source="judge",
        request_id="r9")
    add(engine, key=hello, model="m-cheap", quality=0.6, cost_usd=None, source="paired",
        request_id="r3")
    add(engine, key=hello, model="m-mid", quality=0.7, cost_usd=None, source="paired",
        request_id="r3")
    got = judged_outcomes(engine, [{"id": "r3", "prompt_text": "hello"},
                                   {"id": "r4", "prompt_text": "hello"}], SECRET)
    assert got["r3"] == {"m-cheap": 0.6, "m-mid": 0.7}
    assert got["r4"] == {"m-cheap": pytest.approx(0.4), "m-mid": 0.7}  # all on the prompt


def test_actual_is_the_bill_not_the_records_estimate(log_engine) -> None:
    """Issue 47, item 8: the dashboard once showed the records' expected cost as "actual"
    ($0.2507 where /spend/logs had $0.0744 billed). Actual is the rows' settled cost; the
    reference's cost is the bill scaled by the records' c_ref / c_chosen, an estimate."""
    rows = [{**promise_row(0, "cheap"), "cost_usd": 0.00004},  # billed below the records'
            {**promise_row(1, "mid"), "cost_usd": 0.0003}]
    auto = {r["route"]: r for r in _summary(log_engine, rows)["route_savings"]}["auto"]
    assert auto["actual_usd"] == pytest.approx(0.00004 + 0.0003)  # the bill
    assert auto["comparator_usd"] == pytest.approx(0.00004 * 10 + 0.0003)
