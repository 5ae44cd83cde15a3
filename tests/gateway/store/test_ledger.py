"""The budget ledger: atomic reservations, settlement, idempotency, rollover, expiry."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import random
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select

from gateway.store import BudgetExceeded, Store, StoreUnavailable, Tenant
from gateway.store.models import request_logs, reservations
from gateway.store.periods import period_start
from tests.gateway.store._workers import hammer
from tests.gateway.store.conftest import FakeClock, set_allow_connections, started

pytestmark = pytest.mark.anyio

COST = 0.002  # USD per request; BUDGET fits exactly 50 of them
BUDGET = 50 * COST


async def _tenant(store: Store, name: str = "acme", budget: float | None = BUDGET,
                  period: str = "total") -> Tenant:
    _, key = await store.create_tenant(name, budget_usd=budget, period=period)
    tenant = await store.authenticate(key.api_key)
    assert tenant is not None
    return tenant


def _open_reservations(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(reservations)).scalar_one())


async def test_reserve_refuses_what_does_not_fit(db_url: str) -> None:
    async with started(db_url) as store:
        t = await _tenant(store, budget=0.01)
        a = await store.reserve(t, 0.004, "a")
        await store.reserve(t.id, 0.004, "b")  # a tenant id works as well as a Tenant
        with pytest.raises(BudgetExceeded) as exc:
            await store.reserve(t, 0.004, "c")
        e = exc.value
        assert (e.budget_usd, e.spent_usd, e.reserved_usd, e.requested_usd) == pytest.approx(
            (0.01, 0.0, 0.008, 0.004))
        await store.reserve(t, 0.002, "d")  # exactly fills the budget: allowed
        await store.settle(a, 0.004)
        info = await store.get_tenant("acme")
        assert info.spent_usd == pytest.approx(0.004) and info.reserved_usd == pytest.approx(0.006)


async def test_settle_releases_the_rest(db_url: str) -> None:
    async with started(db_url) as store:
        t = await _tenant(store, budget=0.01)
        r = await store.reserve(t, 0.008, "a")
        result = await store.settle(r, 0.003)
        assert result.applied and result.overrun_usd == 0.0
        info = await store.get_tenant(t.id)
        assert info.spent_usd == pytest.approx(0.003) and info.reserved_usd == 0.0
        assert _open_reservations(store) == 0
        await store.reserve(t, 0.007, "b")  # the released 0.005 is usable again


async def test_settle_is_idempotent_across_replicas(db_url: str) -> None:
    async with started(db_url) as store, started(db_url) as replica:
        t = await _tenant(store)
        r = await store.reserve(t, 0.004, "a")
        first = await store.settle(r, 0.001)
        second = await store.settle(r, 0.001)
        third = await replica.settle(r, 0.002)
        assert first.applied and not second.applied and not third.applied
        info = await replica.get_tenant("acme")
        assert info.spent_usd == pytest.approx(0.001) and info.reserved_usd == 0.0


async def test_settlement_overrun_is_recorded_honestly(db_url: str) -> None:
    """Issue 35: the excess is reported (the operator's), the tenant charged its reservation
    and served after it: a provider's miscount never locks a tenant out."""
    async with started(db_url) as store:
        t = await _tenant(store, budget=0.01)
        r = await store.reserve(t, 0.009, "a")
        result = await store.settle(r, 0.012)
        assert result.applied and result.overrun_usd == pytest.approx(0.003)
        info = await store.get_tenant("acme")
        assert (info.spent_usd, info.overrun_usd) == pytest.approx((0.009, 0.0))
        await store.reserve(t, 0.000001, "b")  # what is left of the budget still pays


async def test_unlimited_budget_still_tracks_spend(db_url: str) -> None:
    async with started(db_url) as store:
        t = await _tenant(store, budget=None)
        r = await store.reserve(t, 1e6, "big")
        await store.settle(r, 123.45)
        assert (await store.get_tenant("acme")).spent_usd == pytest.approx(123.45)


def _run_replicas(url: str, tenant_id: str, replicas: int, per: int, usd: float,
                  actual: float) -> tuple[int, int]:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Manager() as manager, ProcessPoolExecutor(replicas, mp_context=ctx) as pool:
        barrier = manager.Barrier(replicas)
        futures = [pool.submit(hammer, url, tenant_id, per, usd, actual, barrier)
                   for _ in range(replicas)]
        results = [f.result() for f in futures]
    return sum(r[0] for r in results), sum(r[1] for r in results)


@pytest.mark.slow
async def test_200_concurrent_reservations_across_processes_never_overspend(db_url: str
                                                                           ) -> None:
    """4 processes (= 4 replicas, each its own engine and pool) × 50 concurrent requests
    against a budget that fits exactly 50: exactly 50 pass, not a nano-dollar more."""
    async with started(db_url) as store:
        t = await _tenant(store)
        ok, refused = await asyncio.to_thread(_run_replicas, db_url, t.id, 4, 50, COST, COST)
        info = await store.get_tenant(t.id)
    assert ok + refused == 200
    assert ok == 50
    assert info.spent_usd == pytest.approx(BUDGET, abs=1e-12)
    assert info.spent_usd <= BUDGET
    assert info.reserved_usd == 0.0


async def test_two_replicas_interleaved_never_overspend(db_url: str) -> None:
    """Two stores (two engines) in one process, 200 requests interleaved across their worker
    threads, each charged its full reservation: exactly 50 fit, none more."""
    async with started(db_url) as a, started(db_url) as b:
        t = await _tenant(a)
        ok = 0

        async def one(i: int) -> None:
            nonlocal ok
            store = a if i % 2 else b
            try:
                r = await store.reserve(t, COST, f"r{i}")
            except BudgetExceeded:
                return
            ok += 1
            await asyncio.sleep(0)
            await store.settle(r, COST)

        await asyncio.gather(*(one(i) for i in range(200)))
        info = await a.get_tenant(t.id)
    assert ok == 50
    assert info.spent_usd == pytest.approx(BUDGET, abs=1e-12) and info.reserved_usd == 0.0


async def test_settled_spend_equals_the_actual_costs(db_url: str) -> None:
    """Actual costs below the reservations: what is released is reusable, and the ledger's
    spend is exactly the sum of the settlements."""
    rng = random.Random(7)
    actuals = [round(rng.uniform(0.0, COST), 9) for _ in range(200)]
    async with started(db_url) as a, started(db_url) as b:
        t = await _tenant(a)
        charged: list[float] = []

        async def one(i: int) -> None:
            store = a if i % 2 else b
            try:
                r = await store.reserve(t, COST, f"r{i}")
            except BudgetExceeded:
                return
            await asyncio.sleep(0)
            await store.settle(r, actuals[i])
            charged.append(actuals[i])

        await asyncio.gather(*(one(i) for i in range(200)))
        info = await a.get_tenant(t.id)
    assert len(charged) >= 50
    assert info.spent_usd == pytest.approx(sum(charged), abs=1e-9)
    assert info.spent_usd <= BUDGET and info.reserved_usd == 0.0


async def test_daily_rollover_at_the_boundary(db_url: str, clock: FakeClock) -> None:
    clock.now = datetime(2026, 3, 14, 23, 59, 59, 999_000, tzinfo=UTC)
    async with started(db_url, clock=clock) as store:
        t = await _tenant(store, budget=0.01, period="daily")
        r = await store.reserve(t, 0.01, "late")
        await store.settle(r, 0.01)
        with pytest.raises(BudgetExceeded):
            await store.reserve(t, 0.001, "still-today")
        clock.now = datetime(2026, 3, 15, 0, 0, tzinfo=UTC)  # the boundary itself: new day
        r = await store.reserve(t, 0.01, "tomorrow")
        await store.settle(r, 0.004)
        info = await store.get_tenant(t.id)
        assert info.spent_usd == pytest.approx(0.004)
        assert info.period_start == datetime(2026, 3, 15, tzinfo=UTC)


async def test_rollover_is_idempotent_across_replicas(db_url: str, clock: FakeClock) -> None:
    clock.now = datetime(2026, 3, 14, 18, 0, tzinfo=UTC)
    async with started(db_url, clock=clock) as a, started(db_url, clock=clock) as b:
        t = await _tenant(a, budget=0.01, period="daily")
        await a.settle(await a.reserve(t, 0.009, "day1"), 0.009)
        clock.now = datetime(2026, 3, 15, 0, 0, 1, tzinfo=UTC)
        await a.settle(await a.reserve(t, 0.003, "a"), 0.003)  # replica A rolls over
        await b.settle(await b.reserve(t, 0.004, "b"), 0.004)  # replica B must not reset again
        info = await b.get_tenant(t.id)
        assert info.spent_usd == pytest.approx(0.007)
        with pytest.raises(BudgetExceeded):
            await b.reserve(t, 0.004, "over")
        # A replica whose clock lags behind the boundary never rolls the period back.
        clock.now = datetime(2026, 3, 14, 23, 59, 59, tzinfo=UTC)
        await a.settle(await a.reserve(t, 0.001, "lagging"), 0.001)
        clock.now = datetime(2026, 3, 15, 0, 0, 2, tzinfo=UTC)
        assert (await a.get_tenant(t.id)).spent_usd == pytest.approx(0.008)


async def test_reservation_in_flight_across_rollover(db_url: str, clock: FakeClock) -> None:
    """Reserved before midnight, settled after: the hold carries over, the spend lands in
    the period in which it is settled, and nothing stays reserved."""
    clock.now = datetime(2026, 3, 14, 23, 59, 58, tzinfo=UTC)
    async with started(db_url, clock=clock) as store:
        t = await _tenant(store, budget=0.01, period="daily")
        await store.settle(await store.reserve(t, 0.005, "day1"), 0.005)
        inflight = await store.reserve(t, 0.005, "straddles")
        clock.now = datetime(2026, 3, 15, 0, 0, 3, tzinfo=UTC)
        with pytest.raises(BudgetExceeded):  # the carried-over hold still counts
            await store.reserve(t, 0.006, "too-much")
        await store.settle(inflight, 0.002)
        info = await store.get_tenant(t.id)
        assert info.spent_usd == pytest.approx(0.002) and info.reserved_usd == 0.0


async def test_applying_a_new_period_rebaselines(db_url: str, clock: FakeClock) -> None:
    async with started(db_url, clock=clock) as store:
        t = await _tenant(store, budget=0.01, period="total")
        await store.settle(await store.reserve(t, 0.008, "a"), 0.008)
        same = await store.update_tenant(t.id, budget_usd=0.02, period="total")
        assert same.spent_usd == pytest.approx(0.008) and same.budget_usd == 0.02
        daily = await store.update_tenant("acme", period="daily")
        assert daily.spent_usd == 0.0 and daily.budget_usd == 0.02
        assert daily.period_start == period_start("daily", clock.now)
        await store.settle(await store.reserve(t, 0.02, "b"), 0.02)
        reset = await store.update_tenant("acme", reset=True)
        assert reset.spent_usd == 0.0
        unlimited = await store.update_tenant("acme", budget_usd=None)
        assert unlimited.budget_usd is None and unlimited.period == "daily"


@pytest.mark.parametrize("period,now,start", [
    ("daily", datetime(2026, 3, 15, 0, 0, tzinfo=UTC), datetime(2026, 3, 15, tzinfo=UTC)),
    ("daily", datetime(2026, 3, 14, 23, 59, 59, 999999, tzinfo=UTC),
     datetime(2026, 3, 14, tzinfo=UTC)),
    ("weekly", datetime(2026, 3, 15, 23, 0, tzinfo=UTC), datetime(2026, 3, 9, tzinfo=UTC)),
    ("weekly", datetime(2026, 3, 16, 0, 0, tzinfo=UTC), datetime(2026, 3, 16, tzinfo=UTC)),
    ("monthly", datetime(2026, 2, 28, 23, 59, tzinfo=UTC), datetime(2026, 2, 1, tzinfo=UTC)),
    ("monthly", datetime(2026, 3, 1, 0, 0, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)),
    ("total", datetime(2026, 3, 1, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC)),
])
def test_period_boundaries_are_utc_calendar_boundaries(period: str, now: datetime,
                                                       start: datetime) -> None:
    assert period_start(period, now) == start
    # A non-UTC clock reading means the same instant.
    assert period_start(period, now.astimezone(UTC).astimezone(
        __import__("datetime").timezone(timedelta(hours=-5)))) == start


async def test_monthly_rollover(db_url: str, clock: FakeClock) -> None:
    clock.now = datetime(2026, 1, 31, 22, 0, tzinfo=UTC)
    async with started(db_url, clock=clock) as store:
        t = await _tenant(store, budget=0.01, period="monthly")
        await store.settle(await store.reserve(t, 0.01, "jan"), 0.01)
        clock.now = datetime(2026, 2, 1, 0, 0, tzinfo=UTC)
        await store.reserve(t, 0.01, "feb")


async def test_stale_reservations_expire_charged_what_is_provably_owed(
        db_url: str, clock: FakeClock) -> None:
    """Past the TTL a reservation is released: charged the cost its request's log row
    records when the row was written (only the settlement was lost), else nothing."""
    async with started(db_url, clock=clock, reservation_ttl_s=3600) as store:
        t = await _tenant(store)
        orphan = await store.reserve(t, 0.004, "crashed")  # its process "died"
        live = await store.reserve(t, 0.001, "live")
        logged = await store.reserve(t, 0.003, "tg-logged")  # finished, settlement lost
        with store.engine.begin() as conn:
            conn.execute(request_logs.insert().values(
                id="tg-logged", tenant_id=t.id, created_at=clock(), status=200,
                cost_usd=0.0012))
        clock.now += timedelta(minutes=30)
        assert await store.expire_stale() == 0
        clock.now += timedelta(minutes=31)
        fresh = await store.reserve(t, 0.001, "fresh")
        assert await store.expire_stale() == 3  # all but fresh are past the TTL
        info = await store.get_tenant(t.id)
        assert info.spent_usd == pytest.approx(0.0012)  # not 0.008: the reservations in full
        assert info.reserved_usd == pytest.approx(0.001)
        assert logged.amount_usd == pytest.approx(0.003)
        late = await store.settle(orphan, 0.0)  # a late settlement changes nothing
        assert not late.applied
        await store.settle(fresh, 0.0005)
        assert (await store.get_tenant(t.id)).reserved_usd == 0.0
        assert live.amount_usd == pytest.approx(0.001)


async def test_a_restarted_replica_releases_what_its_previous_run_left_open(
        db_url: str, clock: FakeClock) -> None:
    """A named replica killed mid-request: on its restart, well before the TTL, its open
    reservations are released (charged what is provably owed: nothing here); another
    replica's are left alone."""
    async with started(db_url, clock=clock, replica_id="gw-a",
                       reservation_ttl_s=3600) as a, started(
            db_url, clock=clock, replica_id="gw-b", auto_upgrade=False) as b:
        t = await _tenant(a)
        await a.reserve(t, 0.004, "killed-with-a")  # never settled: replica a "dies"
        other = await b.reserve(t, 0.001, "live-on-b")
        assert (await a.get_tenant(t.id)).reserved_usd == pytest.approx(0.005)
        clock.now += timedelta(seconds=5)
        async with started(db_url, clock=clock, replica_id="gw-a",
                           auto_upgrade=False) as again:
            info = await again.get_tenant(t.id)
            assert info.reserved_usd == pytest.approx(0.001)  # b's stays held
            assert info.spent_usd == 0.0
            assert (await b.settle(other, 0.0005)).applied


async def test_negative_and_absurd_amounts_are_refused(sqlite_url: str) -> None:
    async with started(sqlite_url) as store:
        t = await _tenant(store)
        with pytest.raises(ValueError):
            await store.reserve(t, -0.01)
        r = await store.reserve(t, 0.01)
        with pytest.raises(ValueError):
            await store.settle(r, -1.0)
        for absurd in (float("nan"), float("inf"), 2e9):  # would overflow BIGINT sums
            with pytest.raises(ValueError):
                await store.reserve(t, absurd)
        with pytest.raises(ValueError):
            await store.update_tenant(t.id, budget_usd=1e12)


async def test_cancelled_requests_never_leak_reservations(db_url: str) -> None:
    """Clients that disconnect at any moment leave nothing reserved: cancelled while the
    reservation is being booked (it is released), while "forwarding" (the `finally` settles),
    and again while that settlement runs (it completes anyway)."""
    reached: list[str] = []
    store = Store.from_url(db_url)
    await store.start()
    t = await _tenant(store, budget=1000.0)

    async def request(i: int, booked: asyncio.Event) -> None:
        r = await store.reserve(t, 0.1, f"c{i}")
        reached.append(r.id)
        booked.set()
        try:
            await asyncio.sleep(60)  # "forwarding": the client disconnects meanwhile
        finally:
            await store.settle(r, 0.05)

    async def cancel(task: asyncio.Task[None]) -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    for i in range(30):
        booked = asyncio.Event()
        task = asyncio.create_task(request(i, booked))
        if i % 3 == 0:  # mid-reserve: the task is waiting for the booking
            await asyncio.sleep(0)
            await cancel(task)
            continue
        await booked.wait()
        await asyncio.sleep(0)  # now in the "forwarding" sleep
        task.cancel()
        if i % 3 == 2:  # cancelled again while the finally's settlement is in flight
            await asyncio.sleep(0)
        await cancel(task)
    await store.close()  # waits for the releases and settlements still in flight
    async with started(db_url) as check:
        info = await check.get_tenant(t.id)
        assert _open_reservations(check) == 0
    assert len(reached) == 20
    assert info.reserved_usd == 0.0
    assert info.spent_usd == pytest.approx(0.05 * 20)


@pytest.mark.postgres
async def test_settlement_during_an_outage_is_deferred_then_applied(pg_url: str) -> None:
    async with started(pg_url, maintenance_interval_s=0.2) as store:
        t = await _tenant(store, budget=0.01)
        r = await store.reserve(t, 0.004, "before-outage")
        set_allow_connections(pg_url, False)
        try:
            result = await store.settle(r, 0.003)
            assert result.deferred and not result.applied and store.pending_settlements == 1
            with pytest.raises(StoreUnavailable):  # a 503 for the caller, never a 401/429
                await store.reserve(t, 0.001, "during-outage")
        finally:
            set_allow_connections(pg_url, True)
        for _ in range(600):  # the maintenance loop retries by itself
            if store.pending_settlements == 0:
                break
            await asyncio.sleep(0.05)
        assert store.pending_settlements == 0
        info = await store.get_tenant(t.id)
        assert info.spent_usd == pytest.approx(0.003) and info.reserved_usd == 0.0


@pytest.mark.postgres
async def test_pooled_connections_cut_by_a_database_restart_are_replaced(pg_url: str) -> None:
    """Idle pooled connections killed server-side (as by a restart or failover) are found by
    the pre-ping and replaced, so the next reserve succeeds instead of failing."""
    async with started(pg_url, engine_options={"ping_after_idle_s": 0.0}) as store:
        t = await _tenant(store)
        await store.settle(await store.reserve(t, 0.001, "warm"), 0.001)
        set_allow_connections(pg_url, False)  # kills every session of the database...
        set_allow_connections(pg_url, True)  # ...and lets new ones in again
        r = await store.reserve(t, 0.001, "after-restart")
        assert (await store.settle(r, 0.001)).applied
        assert (await store.get_tenant(t.id)).spent_usd == pytest.approx(0.002)


async def test_rollover_after_2038(db_url: str, clock: FakeClock) -> None:
    """Epoch seconds past 2**31 (2038-01-19) in the period arithmetic work on both databases."""
    clock.now = datetime(2040, 6, 30, 23, 0, tzinfo=UTC)
    async with started(db_url, clock=clock) as store:
        t = await _tenant(store, budget=0.01, period="daily")
        await store.settle(await store.reserve(t, 0.01, "late"), 0.01)
        clock.now = datetime(2040, 7, 1, 0, 0, tzinfo=UTC)
        await store.settle(await store.reserve(t, 0.01, "next-day"), 0.002)
        info = await store.get_tenant(t.id)
        assert info.spent_usd == pytest.approx(0.002)
        assert info.period_start == datetime(2040, 7, 1, tzinfo=UTC)


async def test_in_memory_sqlite_is_one_shared_database() -> None:
    """`sqlite://` works too (one shared connection, one thread at a time): the schema the
    store created is the one every later call sees, and concurrent reservations still hold."""
    async with started("sqlite://") as store:
        t = await _tenant(store, budget=1.0)
        results = await asyncio.gather(*(store.reserve(t, 0.1) for _ in range(15)),
                                       return_exceptions=True)
        booked = [r for r in results if not isinstance(r, BaseException)]
        assert len(booked) == 10
        assert all(isinstance(r, BudgetExceeded) for r in results if r not in booked)
        assert (await store.get_tenant(t.id)).reserved_usd == pytest.approx(1.0)


async def test_an_outage_journal_replayed_after_a_failure_part_way_charges_each_entry_once(
    db_url: str, tmp_path, caplog
) -> None:
    """The outage journal (gateway/reliability/outage.py) is replayed whole until every entry is in; when
    the database fails after the first entry was charged, the next replay must not charge it
    again. The failure is injected by a wrapper around the real sink (a real database cannot
    be made to fail between two given statements); every charge goes to the real database."""
    from gateway.reliability.outage import charges_sink
    from gateway.reliability.spool import Spool

    async with started(db_url) as store:
        t = await _tenant(store, budget=1.0)
        real = charges_sink(store.engine)
        failures = [1]

        def sink(rows: list[dict]) -> None:
            if failures:  # the database goes away after the first entry
                failures.pop()
                real(rows[:1])
                raise StoreUnavailable("database lost mid-replay")
            real(rows)

        journal = Spool(tmp_path, sink, name="outage")
        costs = [0.003, 0.002, 0.004]
        journal.accept([{"id": f"entry-{i}", "tenant_id": t.id, "request_id": f"r{i}",
                         "nusd": round(c * 1e9), "at_s": 0} for i, c in enumerate(costs)])
        with pytest.raises(StoreUnavailable):
            journal.replay_sync()
        assert (await store.get_tenant("acme")).spent_usd == pytest.approx(costs[0])
        with caplog.at_level("INFO", logger="gateway.reliability.outage"):
            assert journal.replay_sync() == 3  # the whole file again, the database up
        assert "1 of 3 entries were already charged" in caplog.text
        assert (await store.get_tenant("acme")).spent_usd == pytest.approx(sum(costs))
        real([{"id": "entry-1", "tenant_id": t.id, "nusd": 2_000_000, "at_s": 0}])  # again
        assert (await store.get_tenant("acme")).spent_usd == pytest.approx(sum(costs))
        assert _open_reservations(store) == 0
        journal.close()


async def test_an_overrun_is_the_operators_and_never_refuses_the_tenant(db_url: str) -> None:
    """A provider reporting more than the reservation: spent takes only the reservation (the
    budget holds by construction), nothing is booked against the tenant, which is served."""
    async with started(db_url) as store:
        t = await _tenant(store, budget=0.01)
        r = await store.reserve(t, 0.004, "a")
        result = await store.settle(r, 0.007)
        assert result.overrun_usd == pytest.approx(0.003)
        info = await store.get_tenant("acme")
        assert (info.spent_usd, info.overrun_usd) == pytest.approx((0.004, 0.0))
        await store.settle(await store.reserve(t, 0.006, "b"), 0.006)  # the rest, to the cent
        assert (await store.get_tenant("acme")).spent_usd == pytest.approx(0.01)


async def test_a_settlement_of_any_size_is_written(db_url: str) -> None:
    """Issue 35: 10^20 reported tokens failed the settlement (past BIGINT), the reservation
    held an hour and nothing charged. The amount is clamped before the database sees it."""
    from gateway.store import ledger

    async with started(db_url) as store:
        t = await _tenant(store, budget=0.01)
        r = await store.reserve(t, 0.004, "a")
        result = ledger.settle(store.engine, r.id, r.amount_nusd, 10**29, datetime.now(UTC))
        assert result.applied and result.overrun_usd > 1e9
        info = await store.get_tenant("acme")
        assert (info.spent_usd, info.reserved_usd, info.overrun_usd) == pytest.approx(
            (0.004, 0.0, 0.0))
        assert _open_reservations(store) == 0


async def test_overrun_of_an_unlimited_tenant_does_not_refuse(db_url: str) -> None:
    async with started(db_url) as store:
        t = await _tenant(store, budget=None)
        result = await store.settle(await store.reserve(t, 0.001, "a"), 0.002)
        assert result.overrun_usd == pytest.approx(0.001)
        assert (await store.get_tenant("acme")).spent_usd == pytest.approx(0.001)
        await store.reserve(t, 0.001, "b")
