"""``python -m bench.serving.scale``: one tenant past one database row (issue 49).

N replica processes (default 4), each its own ``Store`` on one fresh PostgreSQL database,
admit and settle one tenant's requests as fast as they can: reserve ($0.002 held), the
upstream answers at once (no call: the fake upstream's time is not what is measured), settle
($0.0015 charged), and a request log row handed to the store's batched log writer. Measured
in the same run, in order:

1. baseline: today's design, one reservation row per request (``budget.leases`` off);
2. leases (``budget.leases.enabled``, defaults otherwise): admissions/s, and ledger writes per
   request (lease bookings, adjustments and settlements, plus requests that booked their own
   reservation, over admitted requests; the baseline makes 2);
3. burst: a $0.50 budget, every replica at once until the budget refuses for good (a request
   refused while others hold reservations retries every 5 ms, as the budget's waiting line
   does): overspend_usd = max(0, spent - budget) once everything is settled;
   burst_share_of_ceiling = admitted / the hard bound's ceiling, ⌊(budget - hold) / charge⌋ + 1
   (a request is admitted only while its hold fits what the settled spend leaves);
4. SIGKILL: a replica holding a lease is killed; stale_lease_usd_after_kill = what is still
   leased once the lease TTL (``budget.leases.ttl_s``, default 30 s) has passed, as another
   replica's sweep returns it (printed with the seconds it took);
5. 1,000 tenants at once over every replica: each replica's peak RSS (MB) beside its RSS
   after phase 2 (memory per replica stays bounded: idle leases close, arrivals are pruned);
lost_rows = admitted requests without their log row, over every phase.

This measures the ledger, where one tenant's row was the limit; the HTTP path's own cost per
request is bench/serving/overhead's. The last line:
``admissions_per_s=… baseline_admissions_per_s=… ledger_writes_per_request=… overspend_usd=…
burst_share_of_ceiling=… stale_lease_usd_after_kill=… lost_rows=…``
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import func, select

from bench.serving.cluster import pg_database
from gateway.store import BudgetExceeded, Store
from gateway.store.lease_ledger import LEASE_MARK
from gateway.store.lease_settings import LeaseSettings
from gateway.store.models import request_logs, reservations

HOLD, CHARGE = 0.002, 0.0015  # USD a request holds and is charged
BURST_BUDGET = 0.5


def _rss_mb() -> float:
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def _drive(url: str, keys: list[str], leases: dict | None, seconds: float,
                 concurrency: int, until_refused: bool) -> dict[str, Any]:
    store = Store.from_url(url, auto_upgrade=False,
                           leases=LeaseSettings(**leases) if leases is not None else None)
    await store.start()
    tenants = [await store.authenticate(k) for k in keys]
    admitted = 0
    peak = _rss_mb()
    end = time.monotonic() + seconds

    async def one(worker: int) -> None:
        nonlocal admitted, peak
        i = worker
        while time.monotonic() < end:
            tenant = tenants[i % len(tenants)]
            i += concurrency
            rid = uuid.uuid4().hex
            try:
                r = await store.reserve(tenant, HOLD, rid)
            except BudgetExceeded as e:
                if not until_refused:
                    continue
                if e.spent_usd + HOLD > e.budget_usd + 1e-12:
                    return  # final: the settled spend leaves less than one request
                await asyncio.sleep(0.005)  # others hold reservations: the waiting line
                continue
            await store.settle(r, CHARGE)
            store.logs.submit({"id": rid, "tenant_id": tenant.id, "cost_usd": CHARGE,
                               "status": 200, "created_at": datetime.now(UTC)})
            admitted += 1
            if admitted % 2000 == 0:
                peak = max(peak, _rss_mb())

    started = time.monotonic()
    await asyncio.gather(*(one(w) for w in range(concurrency)))
    elapsed = time.monotonic() - started
    peak = max(peak, _rss_mb())
    stats = store.leases.stats if store.leases is not None else None
    await store.close()
    writes = (stats.opened + stats.adjusted + stats.closed + stats.plain) if stats else \
        2 * admitted
    return {"admitted": admitted, "elapsed_s": elapsed, "writes": writes,
            "peak_rss_mb": peak, "stats": stats}


def drive(args: tuple) -> dict[str, Any]:
    """One replica process (spawned): its own Store, ``concurrency`` request loops."""
    *rest, start_at = args
    time.sleep(max(0.0, start_at - time.time()))  # every replica starts together
    return asyncio.run(_drive(*rest))


async def _hold(url: str, key: str) -> None:
    store = Store.from_url(url, auto_upgrade=False, leases=LeaseSettings(enabled=True))
    await store.start()
    tenant = await store.authenticate(key)
    for _ in range(4):
        await store.reserve(tenant, HOLD, uuid.uuid4().hex)
    print("holder: leased", flush=True)
    await asyncio.sleep(3600)


def hold(url: str, key: str) -> None:
    asyncio.run(_hold(url, key))


def _phase(pool: Any, url: str, keys: list[str], leases: dict | None, replicas: int,
           seconds: float, concurrency: int, until_refused: bool = False
           ) -> tuple[list[dict[str, Any]], float]:
    start_at = time.time() + 1.0
    out = pool.map(drive, [(url, keys, leases, seconds, concurrency, until_refused, start_at)
                           for _ in range(replicas)])
    return out, max(r["elapsed_s"] for r in out)  # from the replicas' common start


async def _admin(url: str, n: int, budget: float | None) -> list[str]:
    store = Store.from_url(url)
    await store.start()
    keys = []
    for _ in range(n):
        _, key = await store.create_tenant("t-" + uuid.uuid4().hex[:10], budget_usd=budget)
        keys.append(key.api_key)
    await store.close()
    return keys


async def _tenant_ledger(url: str, key: str) -> tuple[float, float]:
    store = Store.from_url(url, auto_upgrade=False)
    await store.start()
    tenant = await store.authenticate(key)
    info = await store.get_tenant(tenant.id)
    await store.close()
    return info.spent_usd, info.reserved_usd


def _rows(url: str) -> int:
    store = Store.from_url(url, auto_upgrade=False)
    with store.engine.connect() as conn:
        n = int(conn.execute(select(func.count()).select_from(request_logs)).scalar_one())
    store.engine.dispose()
    return n


def _lease_usd(url: str) -> float:
    """USD booked in budget leases (reservation rows marked as leases)."""
    store = Store.from_url(url, auto_upgrade=False)
    with store.engine.connect() as conn:
        n = conn.execute(select(func.coalesce(func.sum(reservations.c.amount_nusd), 0)).where(
            reservations.c.id.contains(LEASE_MARK))).scalar_one()
    store.engine.dispose()
    return int(n) / 1e9


def _kill_phase(url: str, key: str) -> tuple[float, float]:
    """A replica leases and is SIGKILLed; a surviving replica's sweep returns the lease:
    (USD still leased ttl_s after the kill, seconds until none was)."""
    ttl = LeaseSettings().ttl_s
    ctx = multiprocessing.get_context("spawn")
    holder = ctx.Process(target=hold, args=(url, key))
    holder.start()
    deadline = time.monotonic() + 120
    while _lease_usd(url) == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    os.kill(holder.pid, signal.SIGKILL)
    holder.join()
    killed = time.monotonic()
    print(f"killed a replica holding a lease of ${_lease_usd(url):.4f}", flush=True)

    async def survive() -> tuple[float, float]:
        store = Store.from_url(url, auto_upgrade=False, leases=LeaseSettings(enabled=True))
        await store.start()
        tenant = await store.authenticate(key)
        r = await store.reserve(tenant, HOLD, uuid.uuid4().hex)  # starts its upkeep
        await store.settle(r, 0.0)
        returned_s: float | None = None
        while time.monotonic() - killed < ttl:
            if returned_s is None and await asyncio.to_thread(_lease_usd, url) == 0:
                returned_s = time.monotonic() - killed
            await asyncio.sleep(0.5)
        await store.close()
        return await asyncio.to_thread(_lease_usd, url), returned_s

    stale, returned_s = asyncio.run(survive())
    return stale, float("nan") if returned_s is None else returned_s


def run(replicas: int, seconds: float, concurrency: int, tenants: int) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    with pg_database("tollgate_scale_") as url, ctx.Pool(replicas) as pool:
        asyncio.run(Store.from_url(url).start())  # schema
        big = asyncio.run(_admin(url, 1, 1e6))
        submitted = 0
        base, base_s = _phase(pool, url, big, None, replicas, seconds, concurrency)
        n_base = sum(r["admitted"] for r in base)
        submitted += n_base
        print(f"baseline: {n_base} admitted in {base_s:.1f}s", flush=True)
        leased, lease_s = _phase(pool, url, big, {"enabled": True}, replicas, seconds,
                                 concurrency)
        n_lease = sum(r["admitted"] for r in leased)
        submitted += n_lease
        writes = sum(r["writes"] for r in leased)
        print(f"leases: {n_lease} admitted in {lease_s:.1f}s, {writes} ledger writes; "
              f"stats {[r['stats'] for r in leased]}", flush=True)
        small = asyncio.run(_admin(url, 1, BURST_BUDGET))
        burst, _ = _phase(pool, url, small, {"enabled": True}, replicas, 60.0, concurrency,
                          until_refused=True)
        n_burst = sum(r["admitted"] for r in burst)
        submitted += n_burst
        spent, reserved = asyncio.run(_tenant_ledger(url, small[0]))
        ceiling = int((BURST_BUDGET - HOLD) / CHARGE + 1e-9) + 1
        print(f"burst: {n_burst} admitted of a ceiling of {ceiling}; spent ${spent:.6f} of "
              f"${BURST_BUDGET}, reserved ${reserved:.6f}", flush=True)
        stale, returned_s = _kill_phase(url, asyncio.run(_admin(url, 1, 10.0))[0])
        print(f"kill: lease returned {returned_s:.1f}s after the SIGKILL "
              f"(ttl_s {LeaseSettings().ttl_s:g}); still held after: ${stale:.6f}", flush=True)
        many = asyncio.run(_admin(url, tenants, 100.0))
        wide, _ = _phase(pool, url, many, {"enabled": True}, replicas, seconds, concurrency)
        submitted += sum(r["admitted"] for r in wide)
        print(f"{tenants} tenants: {sum(r['admitted'] for r in wide)} admitted; peak RSS per "
              f"replica {[round(r['peak_rss_mb']) for r in wide]} MB (one tenant: "
              f"{[round(r['peak_rss_mb']) for r in leased]} MB)", flush=True)
        lost = submitted - _rows(url)
    return {"admissions_per_s": round(n_lease / lease_s),
            "baseline_admissions_per_s": round(n_base / base_s),
            "ledger_writes_per_request": round(writes / max(n_lease, 1), 4),
            "overspend_usd": round(max(0.0, spent - BURST_BUDGET), 9),
            "burst_share_of_ceiling": round(n_burst / ceiling, 3),
            "stale_lease_usd_after_kill": round(stale, 6), "lost_rows": lost}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=32, help="request loops per replica")
    p.add_argument("--tenants", type=int, default=1000)
    a = p.parse_args(argv)
    fields = run(a.replicas, a.seconds, a.concurrency, a.tenants)
    ratio = fields["admissions_per_s"] / max(fields["baseline_admissions_per_s"], 1)
    print(f"ratio to the one-row baseline: {ratio:.1f}x")
    print(" ".join(f"{k}={v}" for k, v in fields.items()))


if __name__ == "__main__":
    main()
