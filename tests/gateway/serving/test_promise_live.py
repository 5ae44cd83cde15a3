"""A route with a promise keeps it in the running gateway, request after request (issue 34).

The reference here is ``fake-frontier``, a backend the test router never saw: it is known by
a prior from its price alone (one pseudo-outcome), so no cheaper backend is ever confidently
within 0.01 of it and the rule sends every request to it. Before issue 34 the route's
``explore_share`` (0.05) capped every prior backend, the reference included: from the second
request on the reference was left out and ``fake-strong`` stood in for it. Exploration
shares never remove the reference; only the tenant's own policy can, and then the stand-in is
named and the explanation still gives the reference's p̂ on the prompt.

Real parts: uvicorn, the OpenAI SDK, SQLite with the gateway's migrations, the fake upstream.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, TIMEOUTS, Gateway, run_gateway
from tests.gateway.router_fixture import PRICES, REPLIES

FRONTIER = "fake-frontier"
REQUESTS = 40  # far beyond explore_share's 5% (two requests)


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends.append(FakeBackend(FRONTIER, reply="The frontier answers.", input_per_m=30.0,
                                output_per_m=60.0))
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("promise_live")
    cfg = {
        "model_list": [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
        + [up.model_entry(FRONTIER)],
        "routes": {
            "promised": {"max_drop": 0.01, "reference": FRONTIER, "explore_share": 0.05},
            "auto": {},  # neither max_drop nor cost_weight: a promise by default
        },
        "database_url": f"sqlite:///{tmp / 'tollgate.db'}",
        "admin_key": ADMIN_KEY,
        "reliability": {"spool_dir": str(tmp / "spool")},
    }
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _explain(gw: Gateway, key: str, rid: str) -> dict:
    r = httpx.get(f"{gw.base_url}/v1/routing/{rid}", headers={"authorization": f"Bearer {key}"},
                  timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def _send(gw: Gateway, key: str, route: str, n: int) -> tuple[Counter, list[str]]:
    client = gw.client(key)
    served, rids = Counter(), []
    for i in range(n):
        raw = client.chat.completions.with_raw_response.create(
            model=route, messages=[{"role": "user", "content": f"Explain topic {i} in depth."}])
        served[raw.parse().model] += 1
        rids.append(raw.headers["x-tollgate-request-id"])
    return served, rids


def test_a_prior_reference_is_reached_on_every_request_beyond_the_explore_share(
        gw: Gateway) -> None:
    key, _ = gw.tenant()
    served, rids = _send(gw, key, "promised", REQUESTS)
    assert served == {FRONTIER: REQUESTS}, served  # never a stand-in
    for rid in (rids[1], rids[-1]):  # the second request was the first a cap would take
        e = _explain(gw, key, rid)
        assert "stood in" not in e["summary"]
        ref = e["decision"]["reference"]
        assert ref["backend"] == FRONTIER and ref["allowed"] is True and ref["why_not"] is None
        assert 0.0 < ref["p"] < 1.0 and ref["estimated_drop"] == 0.0


def test_a_route_without_drop_or_cost_weight_promises_by_default(gw: Gateway) -> None:
    key, _ = gw.tenant()
    entry = gw.client(key).models.retrieve("auto").model_extra["tollgate"]
    assert entry["rule"] == "promise" and entry["promise_by_default"] is True
    assert entry["cost_weight"] is None and entry["explore_share"] is None
    # the reference: the dearest backend, its quality known by price alone (never assumed weak)
    assert entry["promise"]["max_drop"] == 0.01 and entry["promise"]["reference"] == FRONTIER
    served, _ = _send(gw, key, "auto", 8)
    assert served == {FRONTIER: 8}, served


def test_only_the_tenants_policy_removes_the_reference_and_the_explanation_still_reads_it(
        gw: Gateway) -> None:
    key, _ = gw.tenant(policy={"allowed_models": list(PRICES)})
    served, rids = _send(gw, key, "promised", 3)
    assert FRONTIER not in served
    e = _explain(gw, key, rids[-1])
    assert "stood in for the reference" in e["summary"]
    ref = e["decision"]["reference"]
    assert ref["backend"] == FRONTIER and ref["allowed"] is False
    assert "not allowed" in ref["why_not"]
    winner = e["decision"]["candidates"][0]
    # the drop of this request, by the router's own estimates, can be read from it
    assert ref["estimated_drop"] == pytest.approx(ref["p"] - winner["quality"], abs=2e-4)


def test_a_cost_cap_of_the_request_is_the_tenants_own_and_may_leave_the_reference_out(
        gw: Gateway) -> None:
    key, _ = gw.tenant()
    raw = gw.client(key).chat.completions.with_raw_response.create(
        model="promised", messages=[{"role": "user", "content": "Explain caching."}],
        extra_body={"tollgate": {"max_cost_usd": 0.001}})
    assert raw.parse().model != FRONTIER
    ref = _explain(gw, key, raw.headers["x-tollgate-request-id"])["decision"]["reference"]
    assert ref["allowed"] is False and ref["why_not"].startswith("over max_cost_usd")
    assert ref["p"] is not None
