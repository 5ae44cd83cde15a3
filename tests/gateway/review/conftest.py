"""Review-side fixtures: the real gateway (uvicorn on 127.0.0.1, real store, real MiniLM) in
front of the fake upstream, reusing the gateway tests' helpers, plus a way to attach feedback.

Client feedback goes through ``POST /v1/feedback``; ``add_feedback`` writes other sources
(a judge's score) straight into the learning loop's ``observations`` table, to check that
the review side tells them apart.
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
from tests.gateway.review.log_db import create_log_tables


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
    """The learning loop's observations table (Alembic revision 0002_learning)."""
    return sa.Table("observations", sa.MetaData(), autoload_with=engine)


def add_feedback(engine: sa.Engine, request_id: str, tenant_id: str, model: str,
                 quality: float, comment: str | None = None, source: str = "feedback") -> None:
    """One observation on a request, as the learning loop records it."""
    t = observations_table(engine)
    with engine.begin() as conn:
        conn.execute(sa.insert(t).values(
            prompt_key=uuid.uuid4().hex, model=model, quality=quality, cost_usd=None,
            source=source, sample=0, request_id=request_id, tenant_id=tenant_id,
            comment=comment, created_at=datetime.now(UTC)))


@pytest.fixture(scope="module",
                params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def log_engine(request: pytest.FixtureRequest) -> Iterator[sa.Engine]:
    """An empty log database per module; each test starts from empty tables."""
    urls = iter([]) if request.param == "sqlite" else _pg_database()
    url = "sqlite://" if request.param == "sqlite" else next(urls)
    engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://"))
    create_log_tables(engine)
    try:
        yield engine
    finally:
        engine.dispose()
        for _ in urls:  # drops the PostgreSQL database
            pass
