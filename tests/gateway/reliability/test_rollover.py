"""Period rollover across two processes: both replicas cross midnight at once, hammering the
same tenant; the old period's spend is dropped exactly once and the new period's spend is
exactly what was settled in it, never above the budget."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from datetime import UTC, datetime

import pytest

from gateway.store import Store
from tests.gateway.reliability._workers import spend_at

pytestmark = pytest.mark.postgres

BUDGET = 0.01
COST = 0.0004  # 25 fit in a day


def _setup(url: str) -> str:
    async def go() -> str:
        day1 = datetime(2026, 3, 14, 20, 0, tzinfo=UTC)
        store = Store.from_url(url, clock=lambda: day1)
        await store.start()
        try:
            info, _ = await store.create_tenant("rollover", budget_usd=BUDGET, period="daily")
            await store.settle(await store.reserve(info.id, 0.009, "day1"), 0.009)
            return info.id
        finally:
            await store.close()

    return asyncio.run(go())


def _info(url: str, tid: str, now: datetime):
    async def go():
        store = Store.from_url(url, auto_upgrade=False, clock=lambda: now)
        await store.start()
        try:
            return await store.get_tenant(tid)
        finally:
            await store.close()

    return asyncio.run(go())


def test_rollover_is_exact_and_idempotent_across_two_processes(pg_url: str) -> None:
    tid = _setup(pg_url)
    day2 = datetime(2026, 3, 15, 0, 0, 1, tzinfo=UTC)
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        barrier = manager.Barrier(2)
        results = pool.starmap(spend_at, [(pg_url, tid, day2.isoformat(), 30, COST, barrier)
                                          for _ in range(2)])
    charged = sum(sum(r) for r in results)
    info = _info(pg_url, tid, day2)
    # 60 attempts, 25 fit the new day: yesterday's 0.009 was dropped once, not per replica
    assert sum(len(r) for r in results) == 25
    assert info.spent_usd == pytest.approx(charged, abs=1e-12) and info.spent_usd <= BUDGET
    assert info.reserved_usd == 0
    assert info.period_start == datetime(2026, 3, 15, tzinfo=UTC)
