"""Router versions in the ``router_versions`` table: every trained router with its metrics,
status and artifact (a zip of the artifact directory, so replicas need no shared disk);
``active`` marks the live one. Synchronous: run these in a thread.

One publisher at a time, by compare-and-set on the parent (DESIGN.md, "A router version is
published by compare-and-set on its parent"): ``record_version(activate=True)`` makes a
version active only if its ``parent`` still is, in the same transaction that clears it (a
conditional UPDATE the database serialises). A replica that built on a version the operator or
another replica has since replaced gets ``StaleParent`` and rebuilds on the new active
version, or drops its work and logs it; it never overwrites.

An operator's rollback (``activate``, ``tollgate router rollback V``) also takes the
operator's *hold*: until ``tollgate router resume`` (``release_hold``), the automatic
publishers (cold-start refinement, scheduled retraining) publish nothing (``Held``), so a
refinement due during the rollback cannot redo what was rolled back. The hold is a row of
``learning_leases`` that never expires (no migration: a lease is exactly "who may publish");
an operator's own publish (``tollgate models add|remove|learn``) passes it.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

from sqlalchemy import Connection, Engine, delete, insert, select, update

from gateway.learning.tables import leases_t, versions_t
from gateway.store.periods import utcnow
from router_core.artifact import load_router, save_router
from router_core.runtime.router import Router


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


HOLD = "router_hold"  # the learning_leases row of an operator's hold
OPERATOR = "operator"


class StaleParent(Exception):
    """The version's parent is no longer the active one: it was not activated."""

    def __init__(self, parent: str | None, active: str | None) -> None:
        super().__init__(f"parent {parent!r} is no longer the active router version "
                         f"(active: {active!r})")
        self.parent, self.active = parent, active


class Held(Exception):
    """An operator's rollback holds the active version: automatic publishers wait."""

    def __init__(self) -> None:
        super().__init__("an operator's rollback holds the active router version until "
                         "`tollgate router resume`")


def _active_name(conn: Connection) -> str | None:
    return conn.execute(select(versions_t.c.version).where(versions_t.c.active)).scalar()


def _is_held(conn: Connection) -> bool:
    return conn.execute(select(leases_t.c.name).where(leases_t.c.name == HOLD)).first() is not None


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
    operator: bool = False,
) -> int:
    """Store a version; when ``activate``, it becomes the only active one, compare-and-set on
    ``parent`` (module docstring): raises ``StaleParent`` when another version than ``parent``
    is active (``parent=None``: when any version is), and ``Held`` under an operator's hold
    unless the ``operator`` publishes it; either way nothing is stored."""
    blob = pack_router(router, metrics)
    with engine.begin() as conn:
        if activate:
            # the compare-and-set: the UPDATE takes the row (PostgreSQL) or the database
            # (SQLite) for this transaction, so a concurrent publisher on the same parent
            # re-reads it inactive and matches nothing
            if parent is None:
                if _active_name(conn) is not None:
                    raise StaleParent(parent, _active_name(conn))
            else:
                cleared = conn.execute(update(versions_t)
                                       .where(versions_t.c.active, versions_t.c.version == parent)
                                       .values(active=False)).rowcount
                if cleared != 1 and (active := _active_name(conn)) is not None:
                    raise StaleParent(parent, active)  # none active: nothing to overwrite
            if not operator and _is_held(conn):
                raise Held()
        res = conn.execute(
            insert(versions_t).values(
                version=router.version, parent=parent, created_at=utcnow(), status=status,
                active=activate, n_observations=n_observations, max_observation_id=max_obs_id,
                metrics=metrics, artifact=blob)
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


def activate(engine: Engine, version: str, hold: bool = True) -> None:
    """Make ``version`` the active router (an operator's rollback) and, with ``hold``, take
    the operator's hold in the same transaction (module docstring); raises LookupError if
    unknown."""
    with engine.begin() as conn:
        found = conn.execute(
            select(versions_t.c.seq).where(versions_t.c.version == version)
        ).first()
        if found is None:
            raise LookupError(f"no router version {version!r}")
        conn.execute(update(versions_t).where(versions_t.c.active).values(active=False))
        conn.execute(update(versions_t).where(versions_t.c.version == version).values(active=True))
        if hold and not _is_held(conn):
            conn.execute(insert(leases_t).values(name=HOLD, holder=OPERATOR,
                                                 expires_at_s=float("inf")))


def held(engine: Engine) -> bool:
    """Whether an operator's rollback holds the active version (``Held``)."""
    with engine.connect() as conn:
        return _is_held(conn)


def release_hold(engine: Engine) -> bool:
    """Lift the operator's hold (``tollgate router resume``); whether there was one."""
    with engine.begin() as conn:
        return conn.execute(delete(leases_t).where(leases_t.c.name == HOLD)).rowcount > 0
