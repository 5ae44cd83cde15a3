"""Database faults on real PostgreSQL, simulated by a TCP proxy the test stops and starts (the
server itself keeps running): the gateway starts without the database, never answers 401 for
a database fault, recovers by itself, keeps every log row (retry, then the local spool), and
applies the configured outage budget policy, reconciled when the database is back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from gateway.store import Store
from gateway.store.models import request_logs
from tests.gateway.conftest import Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway
from tests.gateway.reliability.harness import REDIS_URL, TcpProxy, via_proxy

pytestmark = pytest.mark.postgres


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    """A TCP proxy to PostgreSQL the test can cut; ask for it before ``make_gateway`` (as
    for ``pg_url``): the gateways stop while it still forwards."""
    p = TcpProxy(("127.0.0.1", 5432))
    yield p
    p.stop()


def make_tenant(url: str, budget_usd: float | None = None, policy: dict | None = None
                ) -> tuple[str, str]:
    """Create the schema and a tenant directly (no gateway): (api_key, tenant_id)."""

    async def go() -> tuple[str, str]:
        store = Store.from_url(url)
        await store.start()
        try:
            info, key = await store.create_tenant("t-db-faults", budget_usd=budget_usd,
                                                  policy=policy)
            return key.api_key, info.id
        finally:
            await store.close()

    return asyncio.run(go())


def _chat(gw: Gateway, key: str) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/chat/completions", timeout=60,
                      headers={"authorization": f"Bearer {key}"},
                      json={"model": "cheap", "messages": MSG})


def _wait(pred, timeout_s: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def _rows(url: str, ids: list[str]) -> int:
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        n = conn.execute(sa.select(sa.func.count()).select_from(request_logs)
                         .where(request_logs.c.id.in_(ids))).scalar_one()
    engine.dispose()
    return int(n)


def test_starts_without_the_database_and_recovers_by_itself(
    pg_url: str, proxy: TcpProxy, make_gateway: MakeGateway
) -> None:
    key, _ = make_tenant(pg_url)
    gw = make_gateway(db_url=via_proxy(pg_url, proxy))  # the proxy is not listening yet
    assert httpx.get(gw.base_url + "/health").status_code == 200
    assert httpx.get(gw.base_url + "/ready").status_code == 503
    r = _chat(gw, key)
    assert r.status_code == 503  # a database fault, never "bad key"
    assert r.json()["error"]["code"] == "store_unavailable"

    proxy.start()
    assert _wait(lambda: httpx.get(gw.base_url + "/ready").status_code == 200)
    assert _chat(gw, key).status_code == 200


def test_outage_under_load_refuse_policy(pg_url: str, proxy: TcpProxy,
                                         make_gateway: MakeGateway, redis_prefix: str) -> None:
    key, tid = make_tenant(pg_url, budget_usd=1.0)
    proxy.start()
    # with Redis the key is still recognised (nothing revoked), so each request is the
    # tenant's, refused by the budget policy and logged; without it, a 503 at the key
    gw = make_gateway(db_url=via_proxy(pg_url, proxy),
                      reliability={"redis_url": REDIS_URL, "redis_prefix": redis_prefix})
    ids = [_chat(gw, key).headers["x-tollgate-request-id"]]
    proxy.stop()
    during = [_chat(gw, key) for _ in range(5)]
    assert all(r.status_code == 503 for r in during), [r.status_code for r in during]
    assert all(r.json()["error"]["code"] == "store_unavailable" for r in during)
    ids += [r.headers["x-tollgate-request-id"] for r in during]
    proxy.start()
    assert _wait(lambda: _chat(gw, key).status_code == 200)
    # every request of the outage has its log row once the database is back
    assert _wait(lambda: _rows(pg_url, ids) == len(ids))
    assert gw.settled(tid)["reserved_usd"] == 0


def test_outage_allow_policy_spends_up_to_the_allowance_then_reconciles(
    pg_url: str, proxy: TcpProxy, make_gateway: MakeGateway, redis_prefix: str
) -> None:
    key, tid = make_tenant(pg_url, budget_usd=1.0)
    proxy.start()
    # Redis confirms, while the database is unreachable, that no key was revoked since
    gw = make_gateway(db_url=via_proxy(pg_url, proxy),
                      reliability={"outage": {"budget": "allow", "allowance_usd": 0.01},
                                   "redis_url": REDIS_URL, "redis_prefix": redis_prefix})
    first = _chat(gw, key)
    cost = float(first.headers["x-tollgate-cost-usd"])
    reserve = gw.log_row(first.headers["x-tollgate-request-id"])["reserved_usd"]
    proxy.stop()
    during = [_chat(gw, key) for _ in range(6)]
    served = [r for r in during if r.status_code == 200]
    refused = [r for r in during if r.status_code == 503]
    fits = int(0.01 // reserve)  # the allowance holds the reservation of each request
    assert len(served) == min(6, fits) and len(served) + len(refused) == 6
    proxy.start()
    expected = cost + sum(float(r.headers["x-tollgate-cost-usd"]) for r in served)
    assert _wait(lambda: abs(gw.ledger(tid)["spent_usd"] - expected) < 1e-8)
    assert gw.ledger(tid)["reserved_usd"] == 0


def test_log_rows_and_outage_spend_survive_a_shutdown_during_the_outage(
    pg_url: str, proxy: TcpProxy, make_gateway: MakeGateway, tmp_path: Path,
    redis_prefix: str
) -> None:
    key, tid = make_tenant(pg_url, budget_usd=1.0)
    spool = str(tmp_path / "shared-spool")
    rel = {"spool_dir": spool, "log_flush_timeout_s": 1.0,
           "outage": {"budget": "allow", "allowance_usd": 1.0},
           "redis_url": REDIS_URL, "redis_prefix": redis_prefix}
    proxy.start()
    gw_a = make_gateway(db_url=via_proxy(pg_url, proxy), reliability=rel)
    first = _chat(gw_a, key)  # auth is cached from here on
    assert _wait(lambda: gw_a.ledger(tid)["reserved_usd"] == 0)
    proxy.stop()
    during = [_chat(gw_a, key) for _ in range(4)]
    assert all(r.status_code == 200 for r in during)
    ids = [r.headers["x-tollgate-request-id"] for r in during]
    cost = sum(float(r.headers["x-tollgate-cost-usd"]) for r in [first, *during])
    gw_a.stop()  # shut down while the database is unreachable
    assert list(Path(spool).glob("requestlog-*.jsonl"))  # the rows were spooled
    assert _rows(pg_url, ids) == 0

    proxy.start()
    gw_b = make_gateway(db_url=pg_url, reliability={**rel, "log_flush_timeout_s": 10})
    assert _wait(lambda: _rows(pg_url, ids) == len(ids))
    assert _wait(lambda: abs(gw_b.ledger(tid)["spent_usd"] - cost) < 1e-8)
    assert not list(Path(spool).glob("*.jsonl"))  # replayed and removed


def test_revocation_holds_at_once_on_both_replicas_and_through_an_outage(
    pg_url: str, proxy: TcpProxy, make_gateway: MakeGateway, redis_prefix: str
) -> None:
    """Two gateways on one PostgreSQL database: a key revoked on one stops at once on the
    other, and the other serves no possibly revoked key while it cannot reach the database."""
    key, _ = make_tenant(pg_url, budget_usd=1.0)
    rel = {"outage": {"budget": "allow", "allowance_usd": 1.0},
           "redis_url": REDIS_URL, "redis_prefix": redis_prefix}
    proxy.start()
    gw_a = make_gateway(db_url=pg_url, reliability=rel)
    gw_b = make_gateway(db_url=via_proxy(pg_url, proxy), reliability=rel)
    other_key = gw_a.admin("POST", "/admin/tenants/t-db-faults/keys",
                         json={}).json()["api_key"]
    ids = {k["prefix"]: k["id"] for k in gw_a.admin("GET", "/admin/keys").json()["data"]}

    def key_id(k: str) -> str:
        return ids[k[: len(next(iter(ids)))]]

    for k in (key, other_key):
        assert _chat(gw_a, k).status_code == 200 and _chat(gw_b, k).status_code == 200
    assert gw_a.admin("DELETE", f"/admin/keys/{key_id(key)}").status_code == 200
    assert _chat(gw_b, key).status_code == 401  # at once, on the other replica
    assert _chat(gw_b, other_key).status_code == 200  # looked up again after a revocation
    proxy.stop()  # B loses the database
    assert _chat(gw_b, other_key).status_code == 200  # nothing revoked since: served
    assert gw_a.admin("DELETE", f"/admin/keys/{key_id(other_key)}").status_code == 200
    r = _chat(gw_b, other_key)  # revoked where B cannot see: never served from its cache
    assert r.status_code == 503 and r.json()["error"]["code"] == "store_unavailable"
    proxy.start()
    assert _wait(lambda: _chat(gw_b, other_key).status_code == 401)
