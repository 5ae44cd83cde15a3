"""A provider's miscount never locks a tenant out (issue 35, finding 5;
gateway/serving/budget/bound_factors.py): real gateways on PostgreSQL, the OpenAI SDK, a fake
upstream over HTTP that reports more tokens than the reservation's bound, or no usage at all."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.reliability.conftest import MakeGateway
from tests.gateway.reliability.test_hostile import _metric, _scrape

TEXT = "Summarise the quarterly report for the board in plain words. " * 6  # 372 bytes


@pytest.fixture(scope="module")
def miscounting() -> Iterator[FakeUpstream]:
    """Bills 3 tokens per byte of text, past any byte bound (a provider's own framing,
    a tokenizer that counts differently); its ``count_tokens`` is changed per test."""
    b = FakeBackend("miscount", reply="one two three four five six seven eight nine ten",
                    input_per_m=10.0, output_per_m=10.0)
    with FakeUpstream([b], count_tokens=lambda t: 3 * len(t.encode())) as up:
        yield up


def _gateway(pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
             miscounting: FakeUpstream) -> Gateway:
    models = [upstream.model_entry("fake-cheap", timeout=10),
              miscounting.model_entry("miscount", timeout=10, max_output_tokens=64)]
    return make_gateway(db_url=pg_url, model_list=models)


def _overrun_rows(gw: Gateway, rid: str) -> list[float]:
    return [a.get("overrun_usd", 0.0) for a in gw.log_row(rid)["attempts"]]


def test_a_report_past_the_bound_is_charged_the_reservation_and_widens_the_next(
        pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
        miscounting: FakeUpstream) -> None:
    """Before: "overran its reservation", the overrun booked on the tenant and every later
    request refused until an operator acted. Now the tenant is charged its reservation, the
    excess is counted for the operator (metric, log row), the tenant is served, and the
    backend's next reservation is widened so that the same report fits it."""
    gw = _gateway(pg_url, make_gateway, upstream, miscounting)
    key, tid = gw.tenant(budget_usd=5.0)
    client = gw.client(key)
    first = client.chat.completions.with_raw_response.create(
        model="miscount", messages=[{"role": "user", "content": TEXT}], max_tokens=16)
    row = gw.log_row(first.headers["x-tollgate-request-id"])
    assert row["cost_usd"] <= row["reserved_usd"] + 1e-12  # never charged past the hold
    assert _overrun_rows(gw, row["id"])[-1] > 0  # the operator's excess, in the log row
    assert _metric(_scrape(gw), 'tollgate_overrun_usd_total{backend="miscount"}') > 0
    listed = gw.admin("GET", "/dashboard/api/requests", params={"tenant": tid}).json()["data"]
    assert next(r["overrun_usd"] for r in listed if r["id"] == row["id"]) > 0  # the dashboard
    info = gw.settled(tid)
    assert info["overrun_usd"] == 0 and info["spent_usd"] <= 5.0
    second = client.chat.completions.with_raw_response.create(
        model="miscount", messages=[{"role": "user", "content": TEXT}], max_tokens=16)
    assert second.http_response.status_code == 200  # not locked out
    widened = gw.log_row(second.headers["x-tollgate-request-id"])
    assert widened["reserved_usd"] > 1.5 * row["reserved_usd"]  # the learned factor
    assert _overrun_rows(gw, widened["id"])[-1] == 0  # the same report now fits
    assert widened["cost_usd"] > row["cost_usd"]  # the tenant pays what is billed within it


def test_an_absurd_report_holds_the_backend_out_not_the_tenant(
        pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
        miscounting: FakeUpstream) -> None:
    """A report past 10× the bound is a broken upstream: the backend is held out (503) for the
    tenant that met it, and for everyone once two tenants did; each tenant is charged at most
    its reservation and served by the others. One tenant alone never holds it out for
    everyone (a request's own shape could cause such reports)."""
    saved, miscounting.count_tokens = miscounting.count_tokens, (lambda t: 10**12)
    gw = _gateway(pg_url, make_gateway, upstream, miscounting)
    msg = [{"role": "user", "content": TEXT}]
    try:
        (key, tid), (other, oid) = gw.tenant(budget_usd=5.0), gw.tenant(budget_usd=5.0)
        client, second = gw.client(key), gw.client(other)
        client.chat.completions.create(model="miscount", messages=msg)
        with pytest.raises(openai.InternalServerError) as exc:  # held out for this tenant
            client.chat.completions.create(model="miscount", messages=msg)
        assert "held out" in str(exc.value)
        second.chat.completions.create(model="miscount", messages=msg)  # not for the other
        for c in (client, second):
            with pytest.raises(openai.InternalServerError) as exc:
                c.chat.completions.create(model="miscount", messages=msg)
            assert exc.value.status_code == 503 and "held out" in str(exc.value)
        assert client.chat.completions.create(
            model="fake-cheap", messages=[{"role": "user", "content": "hi"}]).choices
        for t in (tid, oid):
            info = gw.settled(t)
            assert info["overrun_usd"] == 0 and 0 < info["spent_usd"] <= 5.0
    finally:
        miscounting.count_tokens = saved


def test_an_answer_without_usage_never_locks_the_tenant_out(
        pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
        miscounting: FakeUpstream) -> None:
    """Before: a stream without usage was counted from its text past max_tokens (litellm
    stands in a count of what was streamed), an overrun of $0.000005 refused a $5 tenant and
    marked the backend untrusted for the process. Now the tenant is charged within what it
    reserved, served after it, and the backend keeps its trust."""
    gw = _gateway(pg_url, make_gateway, upstream, miscounting)
    key, tid = gw.tenant(budget_usd=5.0)
    client = gw.client(key)
    miscounting.set_mode("miscount", "no_usage", times=1)
    stream = client.chat.completions.with_raw_response.create(
        model="miscount", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
        stream=True, stream_options={"include_usage": True})
    assert "".join(c.choices[0].delta.content or "" for c in stream.parse() if c.choices)
    row = gw.log_row(stream.headers["x-tollgate-request-id"])
    assert 0 < row["cost_usd"] <= row["reserved_usd"] + 1e-12
    info = gw.settled(tid)
    assert info["overrun_usd"] == 0
    assert gw.app.state.ctx.budget_gate.trusted("miscount")
    assert client.chat.completions.create(model="miscount", messages=[
        {"role": "user", "content": "hi"}], max_tokens=2).choices


def test_one_users_absurd_reports_hold_the_backend_out_for_that_user_only() -> None:
    """Issues 47.7 and 48.11: absurd usage reports met by one user's keys in two teams hold
    the backend out for that user (under either key), not for everyone; a second client's
    absurd report makes it a backend fault, held out for all."""
    from gateway.serving.budget.bound_factors import BoundFactors

    now = [0.0]
    f = BoundFactors(clock=lambda: now[0])
    assert f.reported("b", 50.0, "team-a|user:u") == "absurd"
    assert f.reported("b", 50.0, "team-b|user:u") == "absurd"  # the same user: one client
    assert f.held_out("b", "team-b|user:u") and f.held_out("b", "team-a")
    assert not f.held_out("b", "team-c") and not f.held_out("b")
    assert f.reported("b", 50.0, "team-c") == "held out"
    assert f.held_out("b", "team-d") and f.held_out("b")
