"""Process entry points for the multi-process budget tests (importable by spawn)."""

from __future__ import annotations

import asyncio
from multiprocessing.synchronize import Barrier, Event

from gateway.store import BudgetExceeded, Store


async def _hammer(url: str, tenant_id: str, n: int, usd: float, actual_usd: float,
                  barrier: Barrier) -> tuple[int, int]:
    store = Store.from_url(url, auto_upgrade=False)
    await store.start()
    try:
        await asyncio.to_thread(barrier.wait)  # every replica starts hammering together
        ok = refused = 0

        async def one(i: int) -> None:
            nonlocal ok, refused
            try:
                res = await store.reserve(tenant_id, usd, f"req-{i}")
            except BudgetExceeded:
                refused += 1
                return
            ok += 1
            await asyncio.sleep(0)  # let other requests interleave before settling
            await store.settle(res, actual_usd)

        await asyncio.gather(*(one(i) for i in range(n)))
        return ok, refused
    finally:
        await store.close()


def hammer(url: str, tenant_id: str, n: int, usd: float, actual_usd: float,
           barrier: Barrier) -> tuple[int, int]:
    """One replica: its own Store and engine, n concurrent reserve+settle; (ok, refused)."""
    return asyncio.run(_hammer(url, tenant_id, n, usd, actual_usd, barrier))


async def _hold_lease(url: str, api_key: str, leases: dict, ready: Event) -> None:
    from gateway.store.lease_settings import LeaseSettings

    store = Store.from_url(url, auto_upgrade=False, leases=LeaseSettings(**leases))
    await store.start()
    tenant = await store.authenticate(api_key)
    assert tenant is not None
    for i in range(4):  # quick arrivals: the second books a lease
        await store.reserve(tenant, 0.001, f"lease-holder-{i}")
    ready.set()
    await asyncio.sleep(3600)  # until SIGKILL: requests in flight, the lease open


def hold_lease(url: str, api_key: str, leases: dict, ready: Event) -> None:
    """A replica that leases part of a budget and is then killed (test_leases.py)."""
    asyncio.run(_hold_lease(url, api_key, leases, ready))
