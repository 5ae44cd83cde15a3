"""The learning loop's tables and their queries (synchronous; run them in a thread).

- ``learning_prompts``: prompt key → text (NULL in privacy mode) and frozen Φ(x), so the head
  can be retrained from Φ(x) alone.
- ``learning_requests``: request id → tenant, prompt key, route, router model, backend, cost:
  what feedback and shadow calls attach their observations to.
- ``observations``: one scored outcome each (quality ∈ [0, 1], cost, source, sample index);
  several feedbacks on one request are several rows, never an overwrite.
- ``router_versions``: every trained router with its metrics, status and artifact (a zip of
  the artifact directory, so replicas need no shared disk); ``active`` marks the live one.
- ``exploration_ledger``: the exploration budget per period (separate from tenants' budgets),
  booked with one conditional UPDATE like the tenants' ledger.
- ``learning_leases``: named leases (``retrain``) so one replica at a time retrains.

Money is integer nano-dollars as in the tenants' ledger. The schema is created only by the
Alembic revision ``0002_learning``; these models mirror it.
"""

from __future__ import annotations

import hashlib
import io
import tempfile
import time
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import (
    BigInteger,
    Boolean,
    Engine,
    Float,
    Integer,
    LargeBinary,
    String,
    Text,
    func,
    insert,
    select,
    update,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Mapped, mapped_column

from gateway.store.models import Base
from gateway.store.periods import utcnow
from gateway.store.types import JSONType, UTCDateTime
from router_core.artifact import load_router, save_router
from router_core.router import Router

NANO = 1_000_000_000


def usd_to_nusd(usd: float) -> int:
    return round(usd * NANO)


def prompt_key(text: str) -> str:
    """The stable key of a prompt: sha256 of the embedded text."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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


class ObservationRow(Base):
    __tablename__ = "observations"

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
    status: Mapped[str] = mapped_column(String(16))  # promoted | refused | rolled_back | seed
    active: Mapped[bool] = mapped_column(Boolean, default=False)
    n_observations: Mapped[int] = mapped_column(Integer, default=0)
    max_observation_id: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[Any] = mapped_column(JSONType, nullable=True)
    artifact: Mapped[bytes] = mapped_column(LargeBinary)


class ExplorationLedgerRow(Base):
    __tablename__ = "exploration_ledger"

    period_start_s: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    budget_nusd: Mapped[int] = mapped_column(BigInteger)
    spent_nusd: Mapped[int] = mapped_column(BigInteger, default=0)
    reserved_nusd: Mapped[int] = mapped_column(BigInteger, default=0)


class LearningLeaseRow(Base):
    __tablename__ = "learning_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    expires_at_s: Mapped[float] = mapped_column(Float)


prompts_t = LearningPromptRow.__table__
requests_t = LearningRequestRow.__table__
observations_t = ObservationRow.__table__
versions_t = RouterVersionRow.__table__
ledger_t = ExplorationLedgerRow.__table__
leases_t = LearningLeaseRow.__table__


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
        conn.execute(
            insert(requests_t).values(
                request_id=request_id,
                tenant_id=tenant_id,
                prompt_key=key,
                route=route,
                model=model,
                backend=backend,
                cost_usd=cost_usd,
                created_at=now,
            )
        )


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
    """Insert one observation; its sample index counts earlier ones of the same pair."""
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


# -- router versions ------------------------------------------------------------------------
def pack_router(router: Router, metrics: dict | None = None) -> bytes:
    """The artifact directory of ``router`` as zip bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        path = save_router(router, Path(tmp) / "router", metrics=metrics or {})
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
            for f in sorted(path.iterdir()):
                zf.write(f, f.name)
        return buf.getvalue()


def unpack_router(blob: bytes) -> Router:
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(io.BytesIO(blob)) as zf:
            zf.extractall(tmp)
        return load_router(tmp)


def record_version(
    engine: Engine,
    router: Router,
    *,
    status: str,
    parent: str | None,
    metrics: dict,
    n_observations: int,
    max_obs_id: int,
    activate: bool,
) -> int:
    """Store a version; when ``activate``, it becomes the only active one (one transaction)."""
    blob = pack_router(router, metrics)
    with engine.begin() as conn:
        if activate:
            conn.execute(update(versions_t).where(versions_t.c.active).values(active=False))
        res = conn.execute(
            insert(versions_t).values(
                version=router.version,
                parent=parent,
                created_at=utcnow(),
                status=status,
                active=activate,
                n_observations=n_observations,
                max_observation_id=max_obs_id,
                metrics=metrics,
                artifact=blob,
            )
        )
        return int(res.inserted_primary_key[0])


def active_version(engine: Engine) -> dict | None:
    """The active version's row without the artifact (cheap to poll)."""
    cols = [c for c in versions_t.c if c.name != "artifact"]
    with engine.connect() as conn:
        row = conn.execute(select(*cols).where(versions_t.c.active)).first()
    return None if row is None else dict(row._mapping)


def load_version(engine: Engine, version: str) -> Router:
    with engine.connect() as conn:
        blob = conn.execute(
            select(versions_t.c.artifact).where(versions_t.c.version == version)
        ).scalar_one()
    return unpack_router(blob)


def history(engine: Engine) -> list[dict]:
    cols = [c for c in versions_t.c if c.name != "artifact"]
    with engine.connect() as conn:
        rows = conn.execute(select(*cols).order_by(versions_t.c.seq)).all()
    return [dict(r._mapping) for r in rows]


def activate(engine: Engine, version: str) -> None:
    """Make ``version`` the active router (rollback); raises LookupError if unknown."""
    with engine.begin() as conn:
        found = conn.execute(
            select(versions_t.c.seq).where(versions_t.c.version == version)
        ).first()
        if found is None:
            raise LookupError(f"no router version {version!r}")
        conn.execute(update(versions_t).where(versions_t.c.active).values(active=False))
        conn.execute(update(versions_t).where(versions_t.c.version == version).values(active=True))


# -- leases -----------------------------------------------------------------------------------
def acquire_lease(engine: Engine, name: str, holder: str, ttl_s: float) -> bool:
    """Take (or renew) the lease ``name`` for ``ttl_s`` seconds; False if another holds it.

    One conditional UPDATE (expired or ours), or an INSERT for a new name: the database
    serialises both, so two replicas never both hold it.
    """
    now = time.time()
    with engine.begin() as conn:
        res = conn.execute(
            update(leases_t)
            .where(
                leases_t.c.name == name,
                (leases_t.c.expires_at_s < now) | (leases_t.c.holder == holder),
            )
            .values(holder=holder, expires_at_s=now + ttl_s)
        )
        if res.rowcount == 1:
            return True
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(leases_t).values(name=name, holder=holder, expires_at_s=now + ttl_s)
            )
        return True
    except IntegrityError:
        return False


def release_lease(engine: Engine, name: str, holder: str) -> None:
    with engine.begin() as conn:
        conn.execute(
            update(leases_t)
            .where(leases_t.c.name == name, leases_t.c.holder == holder)
            .values(expires_at_s=0.0)
        )


# -- exploration ledger -----------------------------------------------------------------------
def reserve_exploration(engine: Engine, period_start_s: int, budget_usd: float, usd: float) -> bool:
    """Book ``usd`` in this period's exploration budget in one conditional UPDATE.

    Invariant: spent + reserved ≤ budget after every booking, under any interleaving.
    """
    amount, budget = usd_to_nusd(usd), usd_to_nusd(budget_usd)
    if amount > budget:
        return False
    for _ in range(2):
        with engine.begin() as conn:
            res = conn.execute(
                update(ledger_t)
                .where(
                    ledger_t.c.period_start_s == period_start_s,
                    ledger_t.c.spent_nusd + ledger_t.c.reserved_nusd + amount
                    <= ledger_t.c.budget_nusd,
                )
                .values(reserved_nusd=ledger_t.c.reserved_nusd + amount)
            )
            if res.rowcount == 1:
                return True
            exists = conn.execute(
                select(ledger_t.c.period_start_s).where(ledger_t.c.period_start_s == period_start_s)
            ).first()
        if exists is not None:
            return False
        try:
            with engine.begin() as conn:
                conn.execute(
                    insert(ledger_t).values(
                        period_start_s=period_start_s,
                        budget_nusd=budget,
                        spent_nusd=0,
                        reserved_nusd=0,
                    )
                )
        except IntegrityError:  # another replica opened the period first: retry the update
            pass
    return False


def settle_exploration(
    engine: Engine, period_start_s: int, reserved_usd: float, actual_usd: float
) -> None:
    """Move a booking from reserved to spent at its actual cost (capped at the booking)."""
    held = usd_to_nusd(reserved_usd)
    spent = min(usd_to_nusd(actual_usd), held)
    with engine.begin() as conn:
        conn.execute(
            update(ledger_t)
            .where(ledger_t.c.period_start_s == period_start_s)
            .values(
                reserved_nusd=ledger_t.c.reserved_nusd - held,
                spent_nusd=ledger_t.c.spent_nusd + spent,
            )
        )


def exploration_spend(engine: Engine, period_start_s: int | None = None) -> dict:
    """Spent and reserved USD in one period (or summed over all periods)."""
    q = select(
        func.coalesce(func.sum(ledger_t.c.spent_nusd), 0),
        func.coalesce(func.sum(ledger_t.c.reserved_nusd), 0),
        func.coalesce(func.max(ledger_t.c.budget_nusd), 0),
    )
    if period_start_s is not None:
        q = q.where(ledger_t.c.period_start_s == period_start_s)
    with engine.connect() as conn:
        spent, reserved, budget = conn.execute(q).one()
    return {
        "spent_usd": int(spent) / NANO,
        "reserved_usd": int(reserved) / NANO,
        "budget_usd": int(budget) / NANO,
    }
