"""Served requests are remembered for learning in batches (``tables.record_served_many``): one
transaction for a burst, each prompt stored once, and a batch the database refuses retried
row by row so that no row costs another. On real SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import numpy as np
import sqlalchemy as sa

from gateway.learning import tables as ldb
from gateway.store import make_engine
from gateway.store.migrate import upgrade_engine


def _row(key: str, request_id: str | None = None) -> dict:
    return {"request_id": request_id or uuid.uuid4().hex, "tenant_id": "t-batch",
            "text": f"prompt {key}", "key": key, "embedding": np.full(4, 0.5, np.float32),
            "route": "auto", "model": "m", "backend": "b", "cost_usd": 1e-4}


def test_a_batch_stores_each_prompt_once_and_a_refused_row_costs_no_other(db_url) -> None:
    engine = make_engine(db_url)
    try:
        upgrade_engine(engine)
        tag = uuid.uuid4().hex[:8]
        stored, fresh = f"{tag}-stored", f"{tag}-fresh"
        ldb.record_served(engine, **_row(stored))  # another request stored this prompt first
        first = _row(fresh)
        batch = [first, _row(fresh), _row(stored), _row(f"{tag}-other")]
        ldb.record_served_many(engine, batch)
        assert all(ldb.get_served(engine, r["request_id"]) for r in batch)
        # a batch holding an id already recorded: the rest of it is still written
        again = [_row(f"{tag}-late"), dict(first), _row(fresh)]
        ldb.record_served_many(engine, again)
        assert ldb.get_served(engine, again[0]["request_id"])["prompt_key"] == f"{tag}-late"
        assert ldb.get_served(engine, again[2]["request_id"]) is not None
        with engine.connect() as conn:
            prompts = conn.execute(sa.select(ldb.prompts_t.c.prompt_key).where(
                ldb.prompts_t.c.prompt_key.like(f"{tag}-%"))).scalars().all()
            served = conn.execute(sa.select(sa.func.count()).select_from(ldb.requests_t).where(
                ldb.requests_t.c.prompt_key.like(f"{tag}-%"))).scalar_one()
        assert sorted(prompts) == sorted({f"{tag}-{k}" for k in ("stored", "fresh", "other",
                                                                   "late")})
        assert served == 1 + len(batch) + 2  # the duplicate id once
    finally:
        engine.dispose()
