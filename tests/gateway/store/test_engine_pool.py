"""The SQLite engine keeps the connections its store's threads use: under concurrent
reservations no request pays for opening a connection (its PRAGMAs, its first read of the
schema), which SQLAlchemy's default pool (5 kept) did for every request past the fifth."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import event

from gateway.store import Store
from gateway.store.engine import SQLITE_POOL_SIZE, pool_capacity
from tests.gateway.store.conftest import started

pytestmark = pytest.mark.anyio


async def test_concurrent_reservations_reuse_the_pools_connections(sqlite_url: str) -> None:
    async with started(sqlite_url) as store:
        assert pool_capacity(store.engine) == SQLITE_POOL_SIZE  # the thread limiter's size
        _, key = await store.create_tenant("acme", budget_usd=None)
        tenant = await store.authenticate(key.api_key)
        opened: list[int] = []
        event.listen(store.engine, "connect", lambda *_: opened.append(1))

        async def one(i: int) -> None:
            r = await store.reserve(tenant, 0.001, f"r{i}")
            await store.settle(r, 0.0005)

        for _ in range(5):  # 5 waves of 32 requests in flight, as wrk's c=32 sends them
            await asyncio.gather(*(one(i) for i in range(32)))
        # at most one connection per thread the limiter lets run, each opened once
        assert len(opened) <= SQLITE_POOL_SIZE
        info = await store.get_tenant("acme")
        assert info.spent_usd == pytest.approx(160 * 0.0005) and info.reserved_usd == 0


def test_in_memory_sqlite_keeps_its_one_shared_connection() -> None:
    """Only a SQLite file gets the larger pool: in memory every connection would be its own
    empty database, so there is one, and one thread at a time uses it."""
    memory = Store.from_url("sqlite://")
    try:
        assert pool_capacity(memory.engine) == 1
    finally:
        memory.engine.dispose()
