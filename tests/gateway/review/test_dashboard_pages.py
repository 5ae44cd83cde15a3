"""The dashboard's request table pages through the log, and its summary carries each
tenant's budget bar, the split of errors (client 4xx against upstream 5xx) and the saving
per route beside its quality change."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway


def _get(gw: Gateway, key: str, path: str) -> dict:
    r = httpx.get(gw.base_url + "/dashboard/api/" + path,
                  headers={"authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_requests_are_paged_and_budgets_are_bars(gateway: Gateway,
                                                 upstream: FakeUpstream) -> None:
    key, tid = gateway.tenant(budget_usd=1.0, period="monthly")
    client = gateway.client(key)
    ids = []
    for i in range(5):
        raw = client.chat.completions.with_raw_response.create(
            model="fake-cheap", messages=[{"role": "user", "content": f"question {i}"}])
        ids.append(raw.headers["x-tollgate-request-id"])
    upstream.set_mode("fake-strong", "error_500", times=1)
    with pytest.raises(openai.APIStatusError) as e:  # one upstream failure: 502
        client.chat.completions.create(model="fake-strong",
                                       messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 502
    gateway.log_row(e.value.response.headers["x-tollgate-request-id"])
    for rid in ids:
        gateway.log_row(rid)
    gateway.settled(tid)
    pages = [_get(gateway, key, f"requests?limit=2&offset={o}") for o in (0, 2, 4)]
    seen = [r["id"] for p in pages for r in p["data"]]
    assert len(seen) == len(set(seen)) == 6  # the five answers and the failure, once each
    assert [p["has_more"] for p in pages] == [True, True, False]
    assert seen[1:] == list(reversed(ids))  # newest first; the failure is the newest
    s = _get(gateway, key, "summary")
    (bar,) = s["budgets"]
    assert bar["tenant_id"] == tid and bar["period"] == "monthly"
    assert bar["percent_used"] == pytest.approx(bar["spent_usd"] * 100) and bar["period_end"]
    o = s["rates"]["overall"]
    assert (o["upstream_errors"], o["client_errors"]) == (1, 0)
    # passthrough is the client's choice of model: counted, never claimed as a saving, and
    # the headline (routed traffic only) has nothing to compare; every route has its row
    by = {r["route"]: r for r in s["route_savings"]}
    assert set(gateway.settings.routes) | {"passthrough"} == set(by)
    assert by["passthrough"]["requests"] == 5 and by["passthrough"]["saving_usd"] is None
    assert by["passthrough"]["quality_change"] == "not compared: the client chose the model"
    assert (s["saving"]["saving_usd"], s["saving"]["quality_change"]) == (
        None, "no requests compared")
    assert s["saving"]["passthrough_requests"] == 5


def test_the_operator_sees_the_exploration_spend_and_a_tenant_does_not(gateway: Gateway) -> None:
    from gateway.learning import exploration_ledger as xl
    from gateway.store.periods import period_start_s, utcnow
    from tests.gateway.conftest import ADMIN_KEY

    today = period_start_s(xl.REFERENCE_PERIOD, utcnow())
    scope = xl.reference_scope("auto")
    assert xl.reserve(gateway.engine, today, 0.5, 0.125, scope=scope)
    xl.settle(gateway.engine, today, 0.125, 0.1, scope=scope)
    key, _ = gateway.tenant()
    assert "exploration" not in _get(gateway, key, "summary")  # the operator's spend only
    spend = _get(gateway, ADMIN_KEY, "summary")["exploration"][scope]
    assert spend["spent_usd"] == pytest.approx(0.1) and spend["budget_usd"] == 0.5
