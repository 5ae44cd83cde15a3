"""Benchmark of the store's request-path costs (a script, not a test: timings drift).

    /work/venv/bin/python -m tests.gateway.store.bench_ledger [--n 300] [--pg URL-of-admin-db]

For SQLite (a temporary file) and PostgreSQL (a temporary database, dropped afterwards) it
prints: reserve and settle latency at concurrency 1 (p50/p99), cached authentication, and a
burst of 200 concurrent reserve+settle from two stores (two engines = two replicas) against a
budget that fits 50, with the resulting overspend (must be 0) and throughput; then the log
writer's rows/s.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from gateway.store import BudgetExceeded, Store


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


async def _bench(url: str, n: int) -> dict[str, float]:
    out: dict[str, float] = {}
    async with _store(url) as a, _store(url) as b:
        _, key = await a.create_tenant(f"bench-{uuid.uuid4().hex[:6]}", budget_usd=1e6)
        t = await a.authenticate(key.api_key)
        assert t is not None
        res_ms, set_ms = [], []
        for i in range(n):
            t0 = time.perf_counter()
            r = await a.reserve(t, 0.001, f"r{i}")
            t1 = time.perf_counter()
            await a.settle(r, 0.0005)
            res_ms.append((t1 - t0) * 1e3)
            set_ms.append((time.perf_counter() - t1) * 1e3)
        out.update(reserve_p50_ms=statistics.median(res_ms), reserve_p99_ms=_pct(res_ms, .99),
                   settle_p50_ms=statistics.median(set_ms), settle_p99_ms=_pct(set_ms, .99))
        t0 = time.perf_counter()
        for _ in range(n):
            await a.authenticate(key.api_key)
        out["auth_cached_us"] = (time.perf_counter() - t0) / n * 1e6

        _, key2 = await a.create_tenant(f"burst-{uuid.uuid4().hex[:6]}", budget_usd=50 * 0.002)
        t2 = await a.authenticate(key2.api_key)
        ok = 0

        async def one(i: int) -> None:
            nonlocal ok
            store = a if i % 2 else b
            try:
                r = await store.reserve(t2, 0.002, f"b{i}")
            except BudgetExceeded:
                return
            ok += 1
            await asyncio.sleep(0)
            await store.settle(r, 0.002)

        t0 = time.perf_counter()
        await asyncio.gather(*(one(i) for i in range(200)))
        burst_s = time.perf_counter() - t0
        info = await a.get_tenant(t2.id)
        out.update(burst_ok=ok, burst_overspend_usd=max(0.0, info.spent_usd - 0.1),
                   burst_req_per_s=200 / burst_s)

        t0 = time.perf_counter()
        for i in range(5000):
            a.logs.submit({"id": f"log-{i}", "tenant_id": t.id, "route": "auto",
                           "candidates": [{"model": "m", "score": 0.5}], "status": 200})
        await a.logs.flush()
        out["log_rows_per_s"] = 5000 / (time.perf_counter() - t0)
    return out


class _store:
    def __init__(self, url: str) -> None:
        self.store = Store.from_url(url)

    async def __aenter__(self) -> Store:
        await self.store.start()
        return self.store

    async def __aexit__(self, *exc: object) -> None:
        await self.store.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = ap.parse_args()
    rows: list[tuple[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        rows.append(("sqlite", asyncio.run(_bench(f"sqlite:///{Path(tmp) / 'b.db'}", args.n))))
    name = f"tollgate_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.pg, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        pg_url = args.pg.rsplit("/", 1)[0] + "/" + name
        rows.append(("postgresql", asyncio.run(_bench(pg_url, args.n))))
    finally:
        with psycopg.connect(args.pg, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    keys = list(rows[0][1])
    print(f"{'metric':<22}" + "".join(f"{db:>14}" for db, _ in rows))
    for k in keys:
        print(f"{k:<22}" + "".join(f"{r[k]:>14.3f}" for _, r in rows))


if __name__ == "__main__":
    main()
