"""The exploration ledger's scopes: the migration that adds them (existing rows become the
global budget), and a route's daily cap on shadowing its reference, booked beside the global
budget by ``ExplorationBounds.book`` from concurrent threads of two replicas (two engines), on
SQLite and PostgreSQL: neither is ever exceeded, and a refusal of one releases the other."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import anyio
import pytest
import sqlalchemy as sa
from alembic import command

from bench.serving.cluster import pg_database
from gateway.config import ExplorationSettings
from gateway.learning import exploration_ledger as xl
from gateway.learning import tables as ldb
from gateway.learning.exploration_bounds import ExplorationBounds
from gateway.store import make_engine
from gateway.store.migrate import alembic_config, upgrade_engine
from gateway.store.periods import period_start_s

NOW = datetime(2026, 3, 14, 23, 59, tzinfo=UTC)
COST = 0.001  # USD per booking
CAP = 10 * COST  # the route's cap fits 10 bookings


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database for this test."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'tollgate.db'}"
    else:
        with pg_database("tollgate_xl_") as u:
            yield u


def _rows(engine: sa.Engine) -> list[dict]:
    with engine.connect() as conn:
        rows = conn.execute(sa.select(ldb.ledger_t).order_by(ldb.ledger_t.c.scope)).mappings()
        return [dict(r) for r in rows]


def test_the_migration_keeps_every_existing_row_as_the_global_budget(url: str) -> None:
    engine = make_engine(url)
    try:
        upgrade_engine(engine, "0004_overrun_sessions")
        with engine.begin() as conn:
            conn.execute(sa.text(
                "INSERT INTO exploration_ledger (period_start_s, budget_nusd, spent_nusd, "
                "reserved_nusd) VALUES (1000, 500, 200, 100), (2000, 500, 0, 0)"))
        upgrade_engine(engine)
        insp = sa.inspect(engine)
        assert insp.get_pk_constraint("exploration_ledger")["constrained_columns"] == [
            "period_start_s", "scope"]
        assert [c["name"] for c in insp.get_check_constraints("exploration_ledger")] == [
            "ck_exploration_within_budget"]  # SQLite's copy keeps the CHECK
        assert [(r["period_start_s"], r["scope"], r["spent_nusd"]) for r in _rows(engine)
                ] == [(1000, "", 200), (2000, "", 0)]
        assert xl.spending(engine, 1000) == {"spent_usd": 2e-7, "reserved_usd": 1e-7,
                                             "budget_usd": 5e-7}
        # a route's cap lives beside the global budget of the same period
        assert xl.reserve(engine, 1000, 1e-6, 1e-7, xl.reference_scope("auto"))
        assert xl.spending_by_scope(engine, 1000) == {
            "": {"spent_usd": 2e-7, "reserved_usd": 1e-7, "budget_usd": 5e-7},
            "reference:auto": {"spent_usd": 0.0, "reserved_usd": 1e-7, "budget_usd": 1e-6}}
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:  # still checked
            conn.execute(sa.update(ldb.ledger_t).values(spent_nusd=10**6))
    finally:
        engine.dispose()
    command.downgrade(alembic_config(url), "0004_overrun_sessions")  # the scoped rows go
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(sa.text(
                "SELECT period_start_s FROM exploration_ledger ORDER BY 1")).all()
        assert [r[0] for r in rows] == [1000, 2000]
        assert sa.inspect(engine).get_pk_constraint("exploration_ledger")[
            "constrained_columns"] == ["period_start_s"]
    finally:
        engine.dispose()


@pytest.mark.parametrize(("budget_n", "others"), [(15, 4), (8, 60)],
                         ids=["the-cap-binds", "the-budget-binds"])
def test_a_routes_reference_cap_is_never_exceeded_under_concurrent_bookings(
    url: str, budget_n: int, others: int
) -> None:
    """Two replicas, bookings at once from worker threads: 60 of route ``auto``'s reference
    shadowing (on its cap, 10 bookings, and on the global budget), and ``others`` on the
    global budget only. When the cap binds, exactly 10 pass; when the global budget binds
    (8 bookings), it ends exactly full, and the cap bookings it refused were released."""
    engines = [make_engine(url) for _ in range(2)]
    upgrade_engine(engines[0])
    budget = budget_n * COST
    cfg = ExplorationSettings(enabled=True, budget_usd=budget, period="weekly",
                              reference_budget_usd={"auto": CAP})
    replicas = [ExplorationBounds(e, cfg, clock=lambda: NOW) for e in engines]
    booked: dict[str | None, int] = {"auto": 0, None: 0}
    jobs = ["auto"] * 60 + [None] * others
    random.Random(0).shuffle(jobs)

    async def one(bounds: ExplorationBounds, route: str | None) -> None:
        holds = await bounds.book(COST, route=route)
        if holds is None:
            return
        booked[route] += 1
        await anyio.sleep(random.random() * 0.01)
        await bounds.settle(holds, COST, COST)

    async def main() -> None:
        anyio.to_thread.current_default_thread_limiter().total_tokens = 16
        async with anyio.create_task_group() as tg:
            for i, route in enumerate(jobs):
                tg.start_soon(one, replicas[i % 2], route)

    try:
        anyio.run(main)
        rows = {r["scope"]: r for r in _rows(engines[0])}
        assert set(rows) == {"", "reference:auto"}
        glob, ref = rows[""], rows["reference:auto"]
        assert glob["period_start_s"] == period_start_s("weekly", NOW)
        assert ref["period_start_s"] == period_start_s("daily", NOW)  # per day, always
        assert glob["reserved_nusd"] == ref["reserved_nusd"] == 0  # every hold settled
        assert (glob["budget_nusd"], ref["budget_nusd"]) == (xl.nusd(budget), xl.nusd(CAP))
        if budget_n == 15:  # 10 + 4 fit the global budget: only the cap refuses
            assert (booked["auto"], booked[None]) == (10, others)
            assert ref["spent_nusd"] == ref["budget_nusd"]
        else:  # the global budget refuses; what it refused was released from the cap
            assert booked["auto"] + booked[None] == budget_n
            assert glob["spent_nusd"] == glob["budget_nusd"]
        assert ref["spent_nusd"] == booked["auto"] * xl.nusd(COST) <= ref["budget_nusd"]
        total = booked["auto"] + booked[None]
        assert glob["spent_nusd"] == total * xl.nusd(COST) <= glob["budget_nusd"]
        assert sum(r.skipped_reference_cap + r.skipped_budget for r in replicas) == (
            len(jobs) - total)
        assert xl.current_spending(engines[1], "weekly", NOW) == {
            "": {"spent_usd": pytest.approx(total * COST), "reserved_usd": 0.0,
                 "budget_usd": pytest.approx(budget)},
            "reference:auto": {"spent_usd": pytest.approx(booked["auto"] * COST),
                               "reserved_usd": 0.0, "budget_usd": pytest.approx(CAP)}}
        assert xl.spending(engines[1])["spent_usd"] == pytest.approx(total * COST)  # global
    finally:
        for e in engines:
            e.dispose()


def test_a_route_without_a_cap_books_only_the_global_budget(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'tollgate.db'}")
    try:
        upgrade_engine(engine)
        cfg = ExplorationSettings(enabled=True, budget_usd=1.0, reference_budget_usd=0.0)
        bounds = ExplorationBounds(engine, cfg, clock=lambda: NOW)
        assert anyio.run(bounds.book, COST, "auto") is None  # a cap of 0: never shadowed
        assert bounds.skipped_reference_cap == 1
        assert xl.spending(engine)["reserved_usd"] == 0.0  # nothing held on the global budget
        bounds.cfg = ExplorationSettings(enabled=True, budget_usd=1.0,
                                         reference_budget_usd={"other": 1.0})
        holds = anyio.run(bounds.book, COST, "auto")
        assert holds == [("", period_start_s("daily", NOW))]
        assert set(xl.spending_by_scope(engine)) == {""}
    finally:
        engine.dispose()


def test_reference_budget_usd_is_a_number_or_a_mapping() -> None:
    assert ExplorationSettings().reference_budget_for("auto") is None  # the default: no cap
    assert ExplorationSettings(reference_budget_usd=2).reference_budget_for("auto") == 2.0
    per_route = ExplorationSettings(reference_budget_usd={"auto": 1.5})
    assert per_route.reference_budget_for("auto") == 1.5
    assert per_route.reference_budget_for("auto-cheap") is None
    for bad in (-1.0, {"auto": -0.5}, {"auto": "x"}, True):
        with pytest.raises(ValueError, match="reference_budget_usd"):
            ExplorationSettings(reference_budget_usd=bad)  # type: ignore[arg-type]
