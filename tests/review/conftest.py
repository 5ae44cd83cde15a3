"""Review-side fixtures: the real gateway (uvicorn on 127.0.0.1, real store, real MiniLM) in
front of the fake upstream, reusing the gateway tests' helpers, plus a way to attach feedback.

Feedback rows go into the learning loop's ``observations`` table (issue 5's schema: one row
per feedback event, ``source = 'feedback'``). When that table is not in the schema yet, the
test creates it with those columns, so the review code is tested against the same shape.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from tests.gateway.conftest import (  # noqa: F401 - fixtures are used by name
    ADMIN_KEY,
    Gateway,
    _pg_database,
    _reset_upstream,
    encoder,
    gateway_config,
    run_gateway,
    test_router,
    upstream,
)


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def db_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'tollgate.db'}"
    else:
        yield from _pg_database()


def review_config(up, tmp: Path, **extra: Any) -> dict[str, Any]:
    """The gateway tests' config (with a spool folder where that helper takes one)."""
    if "spool_dir" in inspect.signature(gateway_config).parameters:
        return gateway_config(up, tmp / "spool", **extra)
    return gateway_config(up, **extra)


@pytest.fixture(scope="module")
def gateway(db_url, upstream, test_router, encoder,  # noqa: F811
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("review")
    settings = settings_from_dict(review_config(upstream, tmp, database_url=db_url))
    yield from run_gateway(settings, test_router, encoder)


def observations_table(engine: sa.Engine) -> sa.Table:
    """The learning loop's observations table (created with its documented columns if the
    schema does not have it yet)."""
    md = sa.MetaData()
    if "observations" in sa.inspect(engine).get_table_names():
        return sa.Table("observations", md, autoload_with=engine)
    t = sa.Table(
        "observations", md,
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("prompt_key", sa.String(64), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("quality", sa.Float, nullable=False),
        sa.Column("cost_usd", sa.Float),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("sample", sa.Integer, nullable=False, default=0),
        sa.Column("request_id", sa.String(64), index=True),
        sa.Column("tenant_id", sa.String(36)),
        sa.Column("comment", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    md.create_all(engine)
    return t


def add_feedback(engine: sa.Engine, request_id: str, tenant_id: str, model: str,
                 quality: float, comment: str | None = None, source: str = "feedback") -> None:
    """One feedback event on a request, as the learning loop records it."""
    t = observations_table(engine)
    with engine.begin() as conn:
        conn.execute(sa.insert(t).values(
            prompt_key=uuid.uuid4().hex, model=model, quality=quality, cost_usd=None,
            source=source, sample=0, request_id=request_id, tenant_id=tenant_id,
            comment=comment, created_at=datetime.now(UTC)))
