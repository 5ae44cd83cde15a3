"""A cached key dropped while a call read the revocation epoch (a concurrent lookup found it
deleted) is looked up again, not a KeyError (a 500 seen when a key was deleted under its
waiting requests, issue 35 finding 7). The database calls are stand-ins here so the
interleaving is exact: the race cannot be timed through a real database."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

import gateway.store.tenants as tenantlib
from gateway.store.key_cache import Entry, KeyCache
from gateway.store.records import Tenant

pytestmark = pytest.mark.anyio


async def test_a_key_dropped_during_the_epoch_read_is_looked_up_again() -> None:
    epoch_read = asyncio.Event()
    release = asyncio.Event()

    async def run(fn: Any, *_args: Any) -> Any:
        if fn is tenantlib.read_epoch:
            epoch_read.set()
            await release.wait()
            return 5
        assert fn is tenantlib.lookup_key_at
        return 5, None  # the key is gone

    cache = KeyCache(None, run, ttl_s=600, stale_s=60, size=10)  # type: ignore[arg-type]
    tenant = Tenant(id="t", name="t", budget_usd=None, period="total", key_id="k")
    cache._live["d"] = Entry(tenant, time.monotonic() + 600, time.monotonic(), epoch=5)
    call = asyncio.create_task(cache.authenticate("d"))
    await epoch_read.wait()
    cache._live.pop("d")  # what a concurrent lookup does when it finds the key deleted
    release.set()
    assert await call is None
