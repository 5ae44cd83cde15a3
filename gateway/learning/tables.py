"""The learning loop's tables, and the queries on served requests, prompts and observations
(synchronous; run them in a thread). Router versions, leases and the exploration ledger are
queried from router_versions.py, leases.py and exploration_ledger.py.

- ``learning_prompts``: prompt key → text (NULL in privacy mode) and frozen Φ(x), so the head
  can be retrained from Φ(x) alone.
- ``learning_requests``: request id → tenant, prompt key, route, router model, backend, cost:
  what feedback and shadow calls attach their observations to.
- ``observations``: one scored outcome each (quality ∈ [0, 1], cost, source, sample index);
  a tenant has one feedback per request: a later one replaces it (a unique partial index,
  so concurrent feedbacks cannot both insert); other sources add rows.
- ``router_versions``: every trained router with its metrics, status and artifact (a zip of
  the artifact directory, so replicas need no shared disk); ``active`` marks the live one.
- ``exploration_ledger``: the exploration budget per period and scope (separate from tenants'
  budgets), booked with one conditional UPDATE like the tenants' ledger: scope ``''`` is the
  global budget, ``reference:<route>`` a route's daily cap on shadowing its reference.
- ``learning_leases``: named leases (``retrain``) so one replica at a time retrains.

Money is integer nano-dollars as in the tenants' ledger. The schema is created only by the
Alembic revisions ``0002_learning`` (and ``0005_exploration_scope`` for the ledger's scope);
these models mirror it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import (
    BigInteger,
    Boolean,
    Engine,
    Float,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store import prompt_keys
from gateway.store.models import Base
from gateway.store.periods import utcnow
from gateway.store.types import JSONType, UTCDateTime

if TYPE_CHECKING:  # pandas only where observations are loaded: serving never needs it
    import pandas as pd

log = logging.getLogger(__name__)


def prompt_key(text: str, secret: bytes | None = None) -> str:
    """The stable key of a prompt: an HMAC of the embedded text with the deployment secret
    (gateway.store.prompt_keys), never a plain hash a guessed prompt could be matched to."""
    return prompt_keys.prompt_key(text, secret)


class LearningPromptRow(Base):
    __tablename__ = "learning_prompts"

    prompt_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str | None] = mapped_column(Text, nullable=True)
    embedding: Mapped[bytes] = mapped_column(LargeBinary)  # float32 Φ(x)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class LearningRequestRow(Base):
    __tablename__ = "learning_requests"

    request_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant_id: Mapped[str | None] = mapped_column(String(36), nullable=True, index=True)
    prompt_key: Mapped[str] = mapped_column(String(64))
    route: Mapped[str | None] = mapped_column(String(200), nullable=True)
    model: Mapped[str] = mapped_column(String(200))  # router model name
    backend: Mapped[str] = mapped_column(String(200))
    cost_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


FEEDBACK_ROWS = "source = 'feedback' AND request_id IS NOT NULL"


class ObservationRow(Base):
    __tablename__ = "observations"
    __table_args__ = (Index("uq_observations_feedback", "request_id", "tenant_id", unique=True,
                            postgresql_where=text(FEEDBACK_ROWS),
                            sqlite_where=text(FEEDBACK_ROWS)),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    prompt_key: Mapped[str] = mapped_column(String(64), index=True)
    model: Mapped[str] = mapped_column(String(200))
    quality: Mapped[float] = mapped_column(Float)
    cost_usd: Mapped[float | None] = mapped_column(Float, nullable=True)
    source: Mapped[str] = mapped_column(String(16))  # feedback | shadow | judge | import
    sample: Mapped[int] = mapped_column(Integer, default=0)
    request_id: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    tenant_id: Mapped[str | None] = mapped_column(String(36), nullable=True)
    comment: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)


class RouterVersionRow(Base):
    __tablename__ = "router_versions"

    seq: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    version: Mapped[str] = mapped_column(String(200), unique=True)
    parent: Mapped[str | None] = mapped_column(String(200), nullable=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    status: Mapped[str] = mapped_column(String(16))  # promoted | refused | stale | learned | seed | ...
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    n_observations: Mapped[int] = mapped_column(Integer, default=0)
    max_observation_id: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[Any] = mapped_column(JSONType, nullable=True)
    artifact: Mapped[bytes] = mapped_column(LargeBinary)


class ExplorationLedgerRow(Base):
    __tablename__ = "exploration_ledger"

    period_start_s: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    scope: Mapped[str] = mapped_column(String(200), primary_key=True, default="")
    budget_nusd: Mapped[int] = mapped_column(BigInteger)
    spent_nusd: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved_nusd: Mapped[int] = mapped_column(BigInteger, default=0)


class LearningLeaseRow(Base):
    __tablename__ = "learning_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at_s: Mapped[float] = mapped_column(Float)


prompts_t, requests_t, observations_t = (
    LearningPromptRow.__table__, LearningRequestRow.__table__, ObservationRow.__table__)
versions_t, ledger_t, leases_t = (
    RouterVersionRow.__table__, ExplorationLedgerRow.__table__, LearningLeaseRow.__table__)


# -- served requests and prompts ----------------------------------------------------------
def record_served(
    engine: Engine,
    *,
    request_id: str,
    tenant_id: str | None,
    text: str | None,
    key: str,
    embedding: np.ndarray,
    route: str | None,
    model: str,
    backend: str,
    cost_usd: float | None,
) -> None:
    """Remember a routed request (and its prompt, once) for feedback and shadow calls."""
    now = utcnow()
    with engine.begin() as conn:
        exists = conn.execute(
            select(prompts_t.c.prompt_key).where(prompts_t.c.prompt_key == key)
        ).first()
        if exists is None:
            try:
                with conn.begin_nested():
                    conn.execute(
                        insert(prompts_t).values(
                            prompt_key=key,
                            text=text,
                            embedding=np.asarray(embedding, dtype=np.float32).ravel().tobytes(),
                            created_at=now,
                        )
                    )
            except IntegrityError:  # another request stored the same prompt first
                pass
        conn.execute(insert(requests_t).values(
            request_id=request_id, tenant_id=tenant_id, prompt_key=key, route=route, model=model,
            backend=backend, cost_usd=cost_usd, created_at=now))


def record_served_many(engine: Engine, rows: Sequence[Mapping[str, Any]]) -> None:
    """``record_served`` for a batch (its keyword arguments per row) in one transaction: a
    worker under load remembers its requests in a few writes, not one transaction each. A
    batch the database refuses (a prompt another replica stored meanwhile, a duplicate id) is
    retried row by row, so no row costs another."""
    try:
        _record_batch(engine, rows)
    except IntegrityError:
        for row in rows:
            try:
                record_served(engine, **row)
            except IntegrityError:
                log.warning("request %s was not recorded for learning: already recorded",
                            row.get("request_id"))


def _record_batch(engine: Engine, rows: Sequence[Mapping[str, Any]]) -> None:
    now = utcnow()
    with engine.begin() as conn:
        keys = list({r["key"] for r in rows})
        stored = set(conn.execute(
            select(prompts_t.c.prompt_key).where(prompts_t.c.prompt_key.in_(keys))).scalars())
        new: dict[str, dict[str, Any]] = {}
        for r in rows:
            if r["key"] not in stored and r["key"] not in new:
                new[r["key"]] = {
                    "prompt_key": r["key"], "text": r["text"], "created_at": now,
                    "embedding": np.asarray(r["embedding"], dtype=np.float32).ravel().tobytes()}
        if new:
            conn.execute(insert(prompts_t), list(new.values()))
        conn.execute(insert(requests_t), [
            {"request_id": r["request_id"], "tenant_id": r["tenant_id"], "prompt_key": r["key"],
             "route": r["route"], "model": r["model"], "backend": r["backend"],
             "cost_usd": r["cost_usd"], "created_at": now} for r in rows])


def get_served(engine: Engine, request_id: str) -> dict | None:
    with engine.connect() as conn:
        row = conn.execute(select(requests_t).where(requests_t.c.request_id == request_id)).first()
    return None if row is None else dict(row._mapping)


def add_observation(
    engine: Engine,
    *,
    key: str,
    model: str,
    quality: float,
    cost_usd: float | None,
    source: str,
    request_id: str | None = None,
    tenant_id: str | None = None,
    comment: str | None = None,
) -> int:
    """Insert one observation; its sample index counts earlier ones of the same pair.
    A tenant's feedback goes through ``feedback_rows.record_feedback`` (one per request)."""
    with engine.begin() as conn:
        n = conn.execute(
            select(func.count())
            .select_from(observations_t)
            .where(observations_t.c.prompt_key == key, observations_t.c.model == model)
        ).scalar_one()
        res = conn.execute(
            insert(observations_t).values(
                prompt_key=key,
                model=model,
                quality=float(quality),
                cost_usd=cost_usd,
                source=source,
                sample=int(n),
                request_id=request_id,
                tenant_id=tenant_id,
                comment=comment,
                created_at=utcnow(),
            )
        )
        return int(res.inserted_primary_key[0])


def load_observations(engine: Engine, max_id: int | None = None) -> pd.DataFrame:
    """All observations (up to ``max_id``) as a frame in supervision's long format."""
    import pandas as pd

    q = select(
        observations_t.c.id,
        observations_t.c.prompt_key,
        observations_t.c.model,
        observations_t.c.quality,
        observations_t.c.cost_usd.label("cost"),
        observations_t.c.source,
        observations_t.c.sample,
    ).order_by(observations_t.c.id)
    if max_id is not None:
        q = q.where(observations_t.c.id <= max_id)
    with engine.connect() as conn:
        rows = conn.execute(q).all()
    cols = ["id", "prompt_key", "model", "quality", "cost", "source", "sample"]
    return pd.DataFrame([tuple(r) for r in rows], columns=cols)


def max_observation_id(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.max(observations_t.c.id))).scalar() or 0)


def load_prompts(engine: Engine, keys: list[str]) -> tuple[dict[str, str | None], np.ndarray]:
    """Text (None in privacy mode) and Φ(x) (len(keys), d) for the given keys, in order."""
    text: dict[str, str | None] = {}
    emb: dict[str, np.ndarray] = {}
    with engine.connect() as conn:
        for start in range(0, len(keys), 500):
            chunk = keys[start : start + 500]
            for k, t, e in conn.execute(
                select(prompts_t.c.prompt_key, prompts_t.c.text, prompts_t.c.embedding).where(
                    prompts_t.c.prompt_key.in_(chunk)
                )
            ):
                text[k] = t
                emb[k] = np.frombuffer(e, dtype=np.float32)
    return text, np.stack([emb[k] for k in keys]) if keys else np.zeros((0, 384), np.float32)
