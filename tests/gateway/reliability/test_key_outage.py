"""A key's max_budget during a database outage (issue 35 finding 2): with the outage policy
``allow``, the outage allowance applies per key too (capped at the key's budget), and the
journal's replay adds what the key spent to the key's own spend, so /key/info shows it and the
key's budget refuses it afterwards. Real PostgreSQL behind a TCP proxy the test cuts, Redis,
the fake upstream over HTTP."""

from __future__ import annotations

import math
import time

import httpx
import pytest

from tests.gateway.conftest import ADMIN_KEY, Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway
from tests.gateway.reliability.harness import REDIS_URL, TcpProxy, via_proxy
from tests.gateway.reliability.test_db_faults import proxy  # noqa: F401 - fixture

pytestmark = pytest.mark.postgres


def _chat(gw: Gateway, key: str) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/chat/completions", timeout=60,
                      headers={"authorization": f"Bearer {key}"},
                      json={"model": "fake-cheap", "messages": MSG, "max_tokens": 16})


def _key_spend(gw: Gateway, key: str) -> float:
    """The key's spend once nothing of it is reserved (settling follows the response)."""
    deadline = time.monotonic() + 30
    while True:
        r = httpx.get(gw.base_url + "/key/info", params={"key": key}, timeout=30,
                      headers={"authorization": f"Bearer {ADMIN_KEY}"})
        assert r.status_code == 200, r.text
        info = r.json()["info"]
        if info["tollgate"]["reserved_usd"] == 0 or time.monotonic() > deadline:
            return float(info["spend"])
        time.sleep(0.05)


@pytest.mark.parametrize("team", [False, True])
def test_a_keys_budget_holds_through_an_outage_and_its_spend_is_reconciled(
        pg_url: str, proxy: TcpProxy, make_gateway: MakeGateway,  # noqa: F811 - fixture
        redis_prefix: str, team: bool) -> None:
    proxy.start()
    gw = make_gateway(db_url=via_proxy(pg_url, proxy),
                      reliability={"outage": {"budget": "allow", "allowance_usd": 1.0},
                                   "redis_url": REDIS_URL, "redis_prefix": redis_prefix})
    probe_key, tid = gw.tenant(budget_usd=10.0)
    first = _chat(gw, probe_key)  # what one request holds and costs here
    reserve = gw.log_row(first.headers["x-tollgate-request-id"])["reserved_usd"]
    cost = float(first.headers["x-tollgate-cost-usd"])
    budget = 2 * reserve
    body: dict = {"max_budget": budget, **({"team_id": tid} if team else {})}
    key = gw.admin("POST", "/key/generate", json=body).json()["key"]
    assert _chat(gw, key).status_code == 200  # the key is known (cached) before the outage
    before = _key_spend(gw, key)
    proxy.stop()
    n = min(40, math.ceil(budget / cost) + 3)  # more than the budget pays for
    during = [_chat(gw, key) for _ in range(n)]
    served = [r for r in during if r.status_code == 200]
    assert {r.status_code for r in during} <= {200, 503}
    spent_during = sum(float(r.headers["x-tollgate-cost-usd"]) for r in served)
    # the key's allowance: min(1.0, its max_budget)
    assert spent_during <= budget + len(served) * 1e-9
    assert len(served) < n
    proxy.start()
    deadline = time.monotonic() + 60
    slack = (len(served) + 1) * 1e-9  # x-tollgate-cost-usd is rounded to nano-dollars
    while abs(_key_spend(gw, key) - (before + spent_during)) > slack:
        assert time.monotonic() < deadline, (_key_spend(gw, key), before, spent_during)
        time.sleep(0.2)
