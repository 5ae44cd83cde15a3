"""Process entry points for the two-process tests (importable by multiprocessing spawn)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from gateway.store import BudgetExceeded, Store


async def _at(url: str, tenant_id: str, now_iso: str, n: int, usd: float,
              barrier: Any) -> list[float]:
    now = datetime.fromisoformat(now_iso)
    store = Store.from_url(url, auto_upgrade=False, clock=lambda: now)
    await store.start()
    try:
        await asyncio.to_thread(barrier.wait)
        charged: list[float] = []

        async def one(i: int) -> None:
            try:
                r = await store.reserve(tenant_id, usd, f"p-{i}")
            except BudgetExceeded:
                return
            await asyncio.sleep(0)
            await store.settle(r, usd)
            charged.append(usd)

        await asyncio.gather(*(one(i) for i in range(n)))
        return charged
    finally:
        await store.close()


def spend_at(url: str, tenant_id: str, now_iso: str, n: int, usd: float,
             barrier: Any) -> list[float]:
    """One replica whose clock reads ``now_iso``: n concurrent reserve+settle of ``usd``."""
    return asyncio.run(_at(url, tenant_id, now_iso, n, usd, barrier))
