"""Router versions in the ``router_versions`` table: every trained router with its metrics,
status and artifact (a zip of the artifact directory, so replicas need no shared disk);
``active`` marks the live one. Synchronous: run these in a thread."""

from __future__ import annotations

import io
import tempfile
import zipfile
from pathlib import Path

from sqlalchemy import Engine, insert, select, update

from gateway.learning.tables import versions_t
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
