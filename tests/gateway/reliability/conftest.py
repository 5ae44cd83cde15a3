"""Fixtures: the gateway tests' real parts (fake upstream on 127.0.0.1, MiniLM, the test router
artifact, uvicorn in a thread) plus gateways configured per test for reliability settings."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from gateway.config import settings_from_dict
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import (  # noqa: F401 - fixtures re-used from the gateway tests
    ADMIN_KEY,
    TIMEOUTS,
    Gateway,
    _reset_upstream,
    encoder,
    run_gateway,
    test_router,
    upstream,
)
from tests.gateway.reliability.harness import pg_database, redis_cleanup
from tests.gateway.router_fixture import PRICES

MSG = [{"role": "user", "content": "Say hello to the reliability tests"}]

MakeGateway = Callable[..., Gateway]


def reliability_config(up: FakeUpstream, db_url: str, tmp: Path,
                       reliability: dict[str, Any] | None = None, **extra: Any) -> dict:
    """The gateway tests' config with this test's reliability section and spool directory."""
    rel = {"spool_dir": str(tmp / f"spool-{uuid.uuid4().hex[:6]}")}
    rel.update(reliability or {})
    return {
        "model_list": [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES],
        "routes": {"auto": {"cost_weight": 0.5}, "cheap": {"cost_weight": 5.0}},
        "admin_key": ADMIN_KEY,
        "database_url": db_url,
        "reliability": rel,
        **extra,
    }


@pytest.fixture
def make_gateway(upstream: FakeUpstream, test_router: Router, encoder: Encoder,  # noqa: F811
                 tmp_path: Path) -> Iterator[MakeGateway]:
    """Start gateways with given settings (stopped at the end of the test)."""
    with ExitStack() as stack:

        def make(db_url: str | None = None, reliability: dict | None = None,
                 **extra: Any) -> Gateway:
            url = db_url or f"sqlite:///{tmp_path / ('gw-' + uuid.uuid4().hex[:6] + '.db')}"
            cfg = reliability_config(upstream, url, tmp_path, reliability, **extra)
            gen = run_gateway(settings_from_dict(cfg), test_router, encoder)
            gw = next(gen)
            gw.stop = lambda: next(gen, None)  # type: ignore[attr-defined]  # stop early
            stack.callback(gw.stop)  # type: ignore[attr-defined]
            return gw

        yield make


@pytest.fixture(autouse=True)
def _restore_backend_timing(upstream: FakeUpstream) -> Iterator[None]:  # noqa: F811
    """Tests here change hang_s / delay_s of the shared fake backends: put them back."""
    saved = {n: (b.hang_s, b.delay_s) for n, b in upstream.backends.items()}
    yield
    for n, (hang, delay) in saved.items():
        upstream.backends[n].hang_s, upstream.backends[n].delay_s = hang, delay


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database, dropped at teardown. Ask for it before ``make_gateway``:
    fixtures tear down in reverse, so the gateways stop (and flush their log) before the
    database goes; the other way round each waited out its 10 s log flush timeout."""
    with pg_database() as url:
        yield url


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = "tg-test-" + uuid.uuid4().hex[:10]
    yield prefix
    redis_cleanup(prefix)
