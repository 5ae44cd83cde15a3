"""Budget leases (issue 49, gateway/store/leases.py): a replica books a slice of the budget in
one write and serves requests from it in memory; the hard bound (L1) holds exactly; a lease
held by a killed replica comes back after its TTL; an admin's lower budget is seen within
``max_age_s``. Real SQLite and PostgreSQL; a real process killed with SIGKILL."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import time

import pytest
from sqlalchemy import select

from gateway.store import BudgetExceeded, Store, Tenant
from gateway.store.lease_ledger import LEASE_MARK
from gateway.store.lease_settings import LeaseSettings
from gateway.store.models import reservations
from gateway.store.records import TenantInfo
from tests.gateway.store._workers import hold_lease
from tests.gateway.store.conftest import started

pytestmark = pytest.mark.anyio

FAST = {"enabled": True, "max_age_s": 0.5, "ttl_s": 1.5, "idle_s": 0.2}


async def _tenant(store: Store, budget: float | None) -> tuple[Tenant, str]:
    _, key = await store.create_tenant("acme", budget_usd=budget)
    tenant = await store.authenticate(key.api_key)
    assert tenant is not None
    return tenant, key.api_key


def _leases_open(store: Store) -> int:
    with store.engine.connect() as conn:
        return len(conn.execute(select(reservations.c.id).where(
            reservations.c.id.contains(LEASE_MARK))).all())


async def _settled(store: Store, wait_s: float = 10.0) -> TenantInfo:
    deadline = time.monotonic() + wait_s
    while True:
        info = await store.get_tenant("acme")
        if info.reserved_usd == 0 or time.monotonic() > deadline:
            return info
        await asyncio.sleep(0.05)


async def _burst(store: Store, tenant: Tenant, n: int) -> tuple[float, int]:
    """n concurrent requests holding $0.002 and charged $0.0015: (charged, refused)."""
    charged, refused = 0.0, 0

    async def one(i: int) -> None:
        nonlocal charged, refused
        try:
            r = await store.reserve(tenant, 0.002, f"r{i}")
        except BudgetExceeded:
            refused += 1
            return
        await asyncio.sleep(0.001)
        await store.settle(r, 0.0015)
        charged += 0.0015

    await asyncio.gather(*(one(i) for i in range(n)))
    return charged, refused


@pytest.mark.parametrize("budget", [5.0, 0.5])
async def test_requests_drawn_from_leases_never_pass_the_budget(db_url: str,
                                                                budget: float) -> None:
    """400 concurrent requests of $0.002: on $5 all fit and leases serve them with few ledger
    writes; on $0.5 (250 holds fit) the tail is served one reservation each; either way
    spent == the sum charged, never past the budget, nothing left held."""
    async with started(db_url, leases=LeaseSettings(**FAST)) as store:
        tenant, _ = await _tenant(store, budget)
        charged, refused = await _burst(store, tenant, 400)
        stats = store.leases.stats
        writes = stats.opened + stats.adjusted + stats.closed + stats.plain
        if budget == 5.0:
            assert refused == 0 and writes <= 0.1 * 400, stats
        else:
            assert 400 - refused >= 250, stats  # the settled spend pays for 333
        await store.leases.close()
        info = await _settled(store)
        assert info.reserved_usd == 0
        assert info.spent_usd == pytest.approx(charged, abs=1e-9)
        assert info.spent_usd <= budget + 1e-12
        assert _leases_open(store) == 0


async def test_a_killed_replicas_lease_returns_within_its_ttl(db_url: str) -> None:
    """A replica holding a lease is killed with SIGKILL: its lease stays booked while its
    heartbeat is fresh, and another replica's sweep returns it after ``ttl_s``."""
    async with started(db_url, leases=LeaseSettings(**FAST)) as store:
        tenant, api_key = await _tenant(store, 1.0)
        ctx = multiprocessing.get_context("spawn")
        ready = ctx.Event()
        holder = ctx.Process(target=hold_lease, args=(db_url, api_key, FAST, ready))
        holder.start()
        try:
            assert await asyncio.to_thread(ready.wait, 120), "the holder never leased"
            held = (await store.get_tenant("acme")).reserved_usd
            assert held > 0.004 and _leases_open(store) == 1  # a lease, beyond 4 requests
        finally:
            os.kill(holder.pid, signal.SIGKILL)
            holder.join()
        killed = time.monotonic()
        # the survivor's upkeep sweeps (started by its first request)
        r = await store.reserve(tenant, 0.001, "survivor")
        await store.settle(r, 0.001)
        deadline = killed + 4 * FAST["ttl_s"]
        while _leases_open(store) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert _leases_open(store) == 0
        info = await store.get_tenant("acme")
        # the lease came back; the killed replica's 4 unsettled plain and drawn requests
        # are charged nothing provable (no log rows), as for any killed replica
        assert info.reserved_usd <= 0.001 + 1e-12  # only its plain first request may remain
        assert info.spent_usd == pytest.approx(0.001)


async def test_a_lowered_budget_takes_effect_within_max_age(db_url: str) -> None:
    """An admin lowers the budget below what is spent: a lease this replica holds keeps
    serving for at most ``max_age_s``; after that every request is refused."""
    async with started(db_url, leases=LeaseSettings(**{**FAST, "idle_s": 10.0})) as store:
        tenant, _ = await _tenant(store, 10.0)
        for i in range(5):
            r = await store.reserve(tenant, 0.01, f"a{i}")
            await store.settle(r, 0.01)
        assert store.leases.stats.opened >= 1
        lowered = time.monotonic()
        await store.update_tenant("acme", budget_usd=0.02)
        while time.monotonic() - lowered < FAST["max_age_s"] + 0.1:
            await asyncio.sleep(0.05)
        with pytest.raises(BudgetExceeded):
            await store.reserve(tenant, 0.01, "after")
        await store.leases.close()
        info = await _settled(store)
        assert info.reserved_usd == 0 and info.spent_usd == pytest.approx(0.05)


async def test_a_keys_own_budget_holds_under_leases(db_url: str) -> None:
    """Two replicas with leases, a key whose budget fits 20 requests' charges in a tenant
    whose budget fits 50: the key's spend and the tenant's stay within each, and nothing is
    left held on either row once the leases are settled (keyed leases, lease_ledger.adjust)."""
    from gateway.store.key_admin import KeyFields

    cfg = LeaseSettings(**FAST)
    async with started(db_url, leases=cfg) as a, started(db_url, leases=cfg) as b:
        await a.create_tenant("acme", budget_usd=50 * 0.002)
        key, _ = await a.key_admin.generate(KeyFields(max_budget=20 * 0.0015), team="acme")
        small = await a.authenticate(key)
        assert small is not None and small.key_budgeted
        charged = 0.0

        async def one(store: Store, i: int) -> None:
            nonlocal charged
            try:
                r = await store.reserve(small, 0.002, f"k{i}")
            except BudgetExceeded:
                return
            await asyncio.sleep(0.001)
            await store.settle(r, 0.0015)
            charged += 0.0015

        for _ in range(3):  # waves: arrivals quick enough to lease
            await asyncio.gather(*(one(s, i) for i in range(30) for s in (a, b)))
        await a.leases.close()
        await b.leases.close()
        details = await a.key_admin.info(await a.key_admin.find(key))
        assert details.reserved_usd == 0
        assert details.spend_usd == pytest.approx(charged, abs=1e-9)
        assert details.spend_usd <= 20 * 0.0015 + 1e-12
        info = await _settled(a)
        assert info.reserved_usd == 0 and info.spent_usd == pytest.approx(charged, abs=1e-9)
        assert a.leases.stats.opened + b.leases.stats.opened > 0
