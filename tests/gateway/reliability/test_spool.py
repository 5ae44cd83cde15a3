"""The local spool: rows the log writer would lose (full queue, unwritten at close) are kept in
a bounded file and written once the database takes them; a replay never writes a row twice;
another process's leftover spool is replayed; the bound drops and counts, never blocks."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import sqlalchemy as sa

from gateway.reliability.spool import Spool, log_rows_sink
from gateway.store import Store
from gateway.store.logwriter import LogWriter
from gateway.store.models import request_logs


def _row(i: int) -> dict:
    return {"id": f"req-{i}", "tenant_id": "t", "created_at": datetime.now(UTC),
            "status": 200, "cost_usd": 0.001 * i, "attempts": [{"model": "m", "status": 200}]}


def _ids(engine: sa.Engine) -> set[str]:
    with engine.connect() as conn:
        return set(conn.execute(sa.select(request_logs.c.id)).scalars())


async def _store(url: str) -> Store:
    store = Store.from_url(url)
    await store.start()
    return store


def test_full_queue_goes_to_the_spool_and_is_replayed_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tg.db'}"

    async def main() -> None:
        store = await _store(url)  # creates the schema
        await store.close()
        engine = sa.create_engine(url)
        writer = LogWriter(engine, max_queue=3, linger_s=0.0)
        spool = Spool(tmp_path / "spool", log_rows_sink(engine), name="requestlog")
        writer.overflow = spool.accept
        for i in range(10):  # not started: the queue fills after 3, the rest is spooled
            assert writer.submit(_row(i))
        assert spool.spooled == 7 and spool.pending == 7
        await writer.start()
        assert await writer.flush(10)
        assert await spool.replay() == 7
        assert await spool.replay() == 0  # nothing left, nothing written twice
        assert _ids(engine) == {f"req-{i}" for i in range(10)}
        spool.accept([_row(3)])  # a row written already: the replay skips it
        assert await spool.replay() == 1
        assert len(_ids(engine)) == 10
        await writer.close()
        spool.close()
        engine.dispose()

    asyncio.run(main())


def test_a_dead_processes_spool_is_replayed_and_removed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'tg.db'}"
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    rows = [{**_row(i), "created_at": _row(i)["created_at"].isoformat()} for i in range(5)]
    left = spool_dir / "requestlog-99999-deadbeef.jsonl"  # no process holds its lock
    left.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "cut sh')

    async def main() -> None:
        store = await _store(url)
        await store.close()
        engine = sa.create_engine(url)
        spool = Spool(spool_dir, log_rows_sink(engine), name="requestlog")
        assert await spool.replay() == 5  # the torn last line is skipped
        assert not left.exists()
        assert _ids(engine) == {f"req-{i}" for i in range(5)}
        engine.dispose()

    asyncio.run(main())


def test_the_spool_is_bounded(tmp_path: Path) -> None:
    spool = Spool(tmp_path, lambda rows: None, name="requestlog", max_bytes=2000)
    kept = spool.accept([_row(i) for i in range(100)])
    assert 0 < kept < 100 and spool.dropped == 100 - kept
    assert sum(p.stat().st_size for p in tmp_path.glob("requestlog-*.jsonl")) <= 2000
    spool.close()


def test_a_row_the_database_refuses_is_moved_aside_not_blocking_its_batch(
        tmp_path: Path) -> None:
    """PostgreSQL refuses a NUL character: a spooled row carrying one (written before rows
    were made storable, or by hand) is isolated; its batch neighbours and later rows land."""
    from tests.gateway.reliability.harness import pg_database

    with pg_database() as url:
        async def main() -> None:
            store = await _store(url)
            await store.close()
            engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
            spool = Spool(tmp_path / "spool", log_rows_sink(engine), name="requestlog")
            rows = [_row(i) for i in range(5)]
            rows[2]["error"] = "bad \x00 byte"
            spool.accept(rows)
            assert await spool.replay() == 5
            assert spool.rejected == 1
            assert _ids(engine) == {f"req-{i}" for i in (0, 1, 3, 4)}
            rejected = (tmp_path / "spool" / "rejected-requestlog.jsonl").read_text()
            assert '"req-2"' in rejected
            spool.accept([_row(7)])  # the next replay is not blocked by it
            assert await spool.replay() == 1 and "req-7" in _ids(engine)
            spool.close()
            engine.dispose()

        asyncio.run(main())


def test_rows_with_nul_and_lone_surrogates_are_stored_escaped(tmp_path: Path) -> None:
    from tests.gateway.reliability.harness import pg_database

    with pg_database() as url:
        async def main() -> None:
            store = await _store(url)
            row = {**_row(1), "chosen_model": "m\x00x", "error": "e\ud800",
                   "prompt_text": "p\x00", "attempts": [{"model": "a\x00", "status": 404}]}
            store.logs.log_prompts = True
            assert store.logs.submit(row)
            assert await store.logs.flush(10)
            with store.engine.connect() as conn:
                got = conn.execute(sa.select(request_logs)).one()
            assert got.chosen_model == "m\\u0000x" and got.error == "e\\ud800"
            assert got.prompt_text == "p\\u0000" and got.attempts[0]["model"] == "a\\u0000"
            assert store.logs.stats.rejected == 0
            await store.close()

        asyncio.run(main())
