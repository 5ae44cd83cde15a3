"""Budget leases end to end (issue 49): a gateway with ``budget.leases.enabled`` serves a
burst of one tenant through the official OpenAI SDK from leases, never past the budget, every
answer logged, and the leases returned when the traffic stops. Real uvicorn, litellm over HTTP
to the fake upstream, PostgreSQL (the database replicas share)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from gateway.store.lease_ledger import LEASE_MARK
from gateway.store.models import request_logs, reservations
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, _pg_database, gateway_config, run_gateway

MSG = [{"role": "user", "content": "Tell me something useful"}]
pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def leased(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream,
           test_router: Router, encoder) -> Iterator[Gateway]:
    for url in _pg_database():
        cfg = gateway_config(upstream, tmp_path_factory.mktemp("spool"), database_url=url,
                             budget={"leases": {"enabled": True, "idle_s": 0.2}})
        yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _leases_open(gw: Gateway) -> int:
    with gw.engine.connect() as conn:
        return len(conn.execute(sa.select(reservations.c.id).where(
            reservations.c.id.contains(LEASE_MARK))).all())


def test_a_burst_is_served_from_leases_within_the_budget(leased: Gateway) -> None:
    gw = leased
    probe_key, _ = gw.tenant(budget_usd=1.0)
    one = gw.client(probe_key).chat.completions.with_raw_response.create(
        model="fake-mid", messages=MSG, max_tokens=40)
    held = gw.log_row(one.headers["x-tollgate-request-id"])["reserved_usd"]
    budget = 30 * held  # holds 30 at once; the settled spend pays for more
    key, tid = gw.tenant(budget_usd=budget)
    client = gw.client(key)

    def ask(_: int) -> str | None:
        try:
            raw = client.chat.completions.with_raw_response.create(
                model="fake-mid", messages=MSG, max_tokens=40)
        except openai.RateLimitError:
            return None
        return raw.headers["x-tollgate-request-id"]

    with ThreadPoolExecutor(16) as pool:
        ids = [i for i in pool.map(ask, range(120)) if i is not None]
    assert len(ids) >= 60, len(ids)
    stats = gw.app.state.ctx.store.inner.leases.stats
    assert stats.draws > 0 and stats.opened > 0
    deadline = time.monotonic() + 30
    while _leases_open(gw) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _leases_open(gw) == 0  # returned when the traffic stopped
    info = gw.settled(tid)
    assert info["reserved_usd"] == 0 and info["spent_usd"] <= budget + 1e-12
    with gw.engine.connect() as conn:
        rows = conn.execute(sa.select(request_logs.c.cost_usd).where(
            request_logs.c.id.in_(ids))).all()
    assert len(rows) == len(ids)
    assert info["spent_usd"] == pytest.approx(sum(r.cost_usd for r in rows), abs=1e-9)
