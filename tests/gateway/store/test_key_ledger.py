"""A key's own budget inside its tenant's (gateway/store/key_ledger.py), on SQLite and
PostgreSQL: concurrent reservations never pass either budget; the key's period resets; an
update or a delete holds at the next authentication."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from gateway.store import BudgetExceeded, Store, Tenant
from gateway.store.key_admin import KeyFields
from gateway.store.key_ledger import KeyBudgetExceeded
from tests.gateway.store.conftest import FakeClock, started

pytestmark = pytest.mark.anyio

COST = 0.002


async def _key(store: Store, team: str, **fields: object) -> tuple[str, Tenant]:
    key, _ = await store.key_admin.generate(KeyFields(**fields), team=team)
    tenant = await store.authenticate(key)
    assert tenant is not None
    return key, tenant


async def _hammer(stores: list[Store], tenant: Tenant, n: int) -> tuple[int, int]:
    ok = refused = 0

    async def one(i: int) -> None:
        nonlocal ok, refused
        try:
            res = await stores[i % len(stores)].reserve(tenant, COST, f"r{i}")
        except BudgetExceeded:
            refused += 1
            return
        ok += 1
        await asyncio.sleep(0)  # let the others interleave before settling
        await stores[i % len(stores)].settle(res, COST)

    await asyncio.gather(*(one(i) for i in range(n)))
    return ok, refused


async def test_concurrent_reservations_pass_neither_budget(db_url: str) -> None:
    """Two replicas (two engines), 60 concurrent requests of a key whose budget fits 20 in a
    tenant whose budget fits 50: exactly 20 pass; the tenant's other key then gets the
    remaining 30 of the tenant's budget, not one more."""
    async with started(db_url) as a, started(db_url) as b:
        await a.create_tenant("acme", budget_usd=50 * COST)
        key, small = await _key(a, "acme", max_budget=20 * COST, key_alias="small")
        _, other = await _key(a, "acme")
        assert small.key_budgeted and not other.key_budgeted
        assert await _hammer([a, b], small, 60) == (20, 40)
        details = await a.key_admin.info(await a.key_admin.find(key))
        assert details.spend_usd == pytest.approx(20 * COST, abs=1e-12)
        assert details.reserved_usd == 0
        assert await _hammer([a, b], other, 60) == (30, 30)
        tenant = await a.get_tenant("acme")
        assert tenant.spent_usd == pytest.approx(50 * COST, abs=1e-12)
        assert tenant.reserved_usd == 0
        # the unbudgeted key's spend is counted too, from the tenant's one-statement path
        others = await a.key_admin.info(other.key_id or "")
        assert others.spend_usd == pytest.approx(30 * COST, abs=1e-12)


async def test_a_key_refusal_names_the_key_and_books_nothing(db_url: str) -> None:
    async with started(db_url) as store:
        await store.create_tenant("acme", budget_usd=1.0)
        _, t = await _key(store, "acme", max_budget=COST)
        with pytest.raises(KeyBudgetExceeded) as exc:
            await store.reserve(t, 2 * COST, "big")
        assert exc.value.key_id == t.key_id and exc.value.budget_usd == pytest.approx(COST)
        tenant = await store.get_tenant("acme")
        assert tenant.reserved_usd == 0  # the tenant's booking was rolled back with it


async def test_the_key_budget_resets_each_budget_duration(db_url: str, clock: FakeClock
                                                          ) -> None:
    async with started(db_url, clock=clock) as store:
        await store.create_tenant("acme")
        key, t = await _key(store, "acme", max_budget=COST, budget_duration="1d")
        await store.settle(await store.reserve(t, COST, "a"), COST)
        with pytest.raises(KeyBudgetExceeded):
            await store.reserve(t, COST, "b")
        clock.now += timedelta(days=1, seconds=1)
        details = await store.key_admin.info(await store.key_admin.find(key))
        assert details.spend_usd == 0  # a new period
        await store.settle(await store.reserve(t, COST, "c"), COST)
        details = await store.key_admin.info(t.key_id or "")
        assert details.spend_usd == pytest.approx(COST)
        assert details.budget_reset_at == clock.now.replace(microsecond=0) + timedelta(days=1)


async def test_update_and_delete_hold_at_the_next_authentication(db_url: str) -> None:
    async with started(db_url) as store:
        await store.create_tenant("acme")
        key, t = await _key(store, "acme", models=["a"])
        assert t.key_models == ("a",)
        kid = await store.key_admin.find(key)
        await store.key_admin.update(kid, KeyFields(models=["b"], max_budget=1.0))
        t = await store.authenticate(key)
        assert t is not None and t.key_models == ("b",) and t.key_budgeted
        await store.key_admin.delete([kid], [])
        assert await store.authenticate(key) is None


async def test_a_key_without_team_gets_a_tenant_of_its_own(db_url: str) -> None:
    async with started(db_url) as store:
        key, details = await store.key_admin.generate(KeyFields(max_budget=COST))
        assert details.own_tenant and details.tenant_name == f"key-{details.id}"
        t = await store.authenticate(key)
        assert t is not None and t.budget_usd is None and t.key_budgeted
        await store.key_admin.delete([details.id], [])
        tenant = await store.get_tenant(details.tenant_id)
        assert tenant.disabled_at is not None  # made for the key alone: gone with it
