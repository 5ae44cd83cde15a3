"""One feedback per request and tenant: a later feedback replaces the earlier one.

A client that posts feedback 200 times on one request would otherwise weigh that one prompt
200 times in the next retraining. The row is found by (request id, tenant); the unique
partial index ``uq_observations_feedback`` (gateway/learning/tables.py) makes two concurrent
first feedbacks end in one row. Synchronous: run in a worker thread.
"""

from __future__ import annotations

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError

from gateway.learning import tables as ldb
from gateway.store.periods import utcnow

observations_t = ldb.observations_t


def record_feedback(engine: Engine, *, key: str, model: str, quality: float,
                    cost_usd: float | None, request_id: str, tenant_id: str | None,
                    comment: str | None) -> tuple[int, bool]:
    """The tenant's feedback on ``request_id``: (observation id, whether it replaced an
    earlier one). The unique partial index settles two concurrent first feedbacks: the
    loser's insert fails and it replaces the winner's row."""
    for _ in range(2):
        replaced = _replace_feedback(engine, request_id, tenant_id, quality, comment)
        if replaced is not None:
            return replaced, True
        try:
            return ldb.add_observation(engine, key=key, model=model, quality=quality,
                                       cost_usd=cost_usd, source="feedback",
                                       request_id=request_id, tenant_id=tenant_id,
                                       comment=comment), False
        except IntegrityError:
            continue
    raise RuntimeError(f"feedback on {request_id} could be neither inserted nor replaced")


def _replace_feedback(engine: Engine, request_id: str, tenant_id: str | None, quality: float,
                      comment: str | None) -> int | None:
    match = (observations_t.c.source == "feedback", observations_t.c.request_id == request_id,
             observations_t.c.tenant_id == tenant_id)
    with engine.begin() as conn:
        row = conn.execute(select(observations_t.c.id).where(*match)).first()
        if row is None:
            return None
        conn.execute(update(observations_t).where(observations_t.c.id == row.id).values(
            quality=float(quality), comment=comment, created_at=utcnow()))
        return int(row.id)
