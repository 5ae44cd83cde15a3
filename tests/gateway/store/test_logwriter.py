"""The request log writer: batched, non-blocking, nothing lost on close or in an outage."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select

from gateway.store import Store
from gateway.store.models import request_logs
from tests.gateway.store.conftest import set_allow_connections, started

pytestmark = pytest.mark.anyio


def _row(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"req-{i:05d}", "tenant_id": "t1", "route": "auto", "lam": 0.5,
        "router_version": "r-2026-03-14",
        "candidates": [{"model": "fake-mid", "similarity": 0.81, "predicted_cost_usd": 1.2e-5,
                        "score": 0.77}, {"model": "fake-cheap", "similarity": 0.4,
                                         "predicted_cost_usd": 2e-6, "score": 0.35}],
        "equivalent": ["fake-mid"], "reason": "cheapest in equivalent set",
        "chosen_model": "fake-mid",
        "attempts": [{"model": "fake-strong", "status": 503, "error": "upstream 503",
                      "latency_ms": 12.5}, {"model": "fake-mid", "status": 200, "error": None,
                                            "latency_ms": 40.0}],
        "prompt_tokens": 12, "completion_tokens": 30, "cost_usd": 1.1e-5,
        "reserved_usd": 2.0e-5, "latency_ms": 55.0, "ttft_ms": None, "stream": False,
        "status": 200, "error": None, "prompt_text": "what is 2+2?", **extra,
    }


def _count(store: Store) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(request_logs)).scalar_one())


async def test_log_writer_batches_and_flushes_on_close(db_url: str) -> None:
    store = Store.from_url(db_url, log_options={"batch_size": 100})
    await store.start()
    submitted = [store.logs.submit(_row(i)) for i in range(1000)]  # no await in between
    assert all(submitted) and store.logs.pending == 1000
    engine_for_check = Store.from_url(db_url)  # read back through a separate engine
    await store.close()
    stats = store.logs.stats
    assert stats.written == 1000 and stats.dropped == 0 and stats.rejected == 0
    assert stats.batches <= 20  # batched: ~10 executemany calls, not 1000 inserts
    assert _count(engine_for_check) == 1000
    with engine_for_check.engine.connect() as conn:
        row = conn.execute(select(request_logs).where(request_logs.c.id == "req-00007")).one()
    assert row.candidates[0] == {"model": "fake-mid", "similarity": 0.81,
                                 "predicted_cost_usd": 1.2e-5, "score": 0.77}
    assert [a["status"] for a in row.attempts] == [503, 200]
    assert row.equivalent == ["fake-mid"] and row.stream is False and row.status == 200
    assert row.created_at.tzinfo is not None
    assert row.prompt_text is None  # log_prompts is off by default
    engine_for_check.engine.dispose()


async def test_prompt_text_is_stored_only_when_enabled(db_url: str) -> None:
    async with started(db_url, log_prompts=True) as store:
        store.logs.submit(_row(1, created_at=datetime(2026, 3, 14, 9, 30, tzinfo=UTC)))
        store.logs.submit(_row(2, created_at=1_773_480_600.0))  # epoch seconds also accepted
        assert await store.logs.flush(timeout_s=60)
        with store.engine.connect() as conn:
            rows = {r.id: r for r in conn.execute(select(request_logs))}
    assert rows["req-00001"].prompt_text == "what is 2+2?"
    assert rows["req-00001"].created_at == datetime(2026, 3, 14, 9, 30, tzinfo=UTC)
    assert rows["req-00002"].created_at == datetime.fromtimestamp(1_773_480_600, tz=UTC)


async def test_a_bad_row_does_not_cost_its_batch(db_url: str) -> None:
    async with started(db_url) as store:
        for i in range(10):
            store.logs.submit(_row(i))
        store.logs.submit(_row(3))  # duplicate id: the database refuses this one row
        assert await store.logs.flush(timeout_s=60)
        assert _count(store) == 10
        assert store.logs.stats.rejected == 1 and store.logs.stats.written == 10


async def test_unknown_fields_and_missing_id_are_programming_errors(sqlite_url: str) -> None:
    async with started(sqlite_url) as store:
        with pytest.raises(ValueError, match="unknown request log fields"):
            store.logs.submit({"id": "x", "tenant": "typo"})
        with pytest.raises(ValueError, match="needs an id"):
            store.logs.submit({"route": "auto"})
        assert store.logs.submit({"id": "minimal"})  # every other field may be absent


async def test_full_queue_drops_and_counts_without_blocking(sqlite_url: str) -> None:
    store = Store.from_url(sqlite_url, log_options={"max_queue": 5})
    accepted = [store.logs.submit(_row(i)) for i in range(8)]  # writer not started yet
    assert accepted == [True] * 5 + [False] * 3 and store.logs.stats.dropped == 3
    await store.start()
    await store.close()
    assert _count(store) == 5


@pytest.mark.postgres
async def test_rows_submitted_during_an_outage_are_written_after_it(pg_url: str) -> None:
    async with started(pg_url, log_options={"batch_size": 50, "max_backoff_s": 0.2}) as store:
        store.logs.submit(_row(0))
        assert await store.logs.flush(timeout_s=60)
        set_allow_connections(pg_url, False)
        try:
            for i in range(1, 201):
                assert store.logs.submit(_row(i))
            for _ in range(1200):  # wait until the writer has met the outage at least once
                if store.logs.stats.retries:
                    break
                await asyncio.sleep(0.05)
            assert store.logs.stats.retries > 0 and store.logs.pending > 0
        finally:
            set_allow_connections(pg_url, True)
        assert await store.logs.flush(timeout_s=120)
        assert _count(store) == 201 and store.logs.stats.rejected == 0
