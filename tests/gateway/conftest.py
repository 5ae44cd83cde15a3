"""A real gateway over real HTTP: uvicorn on 127.0.0.1 in a thread, the fake upstream, the real
store on SQLite and on PostgreSQL (a database created and dropped per run), real MiniLM.

Tenants are created through the admin API (the same path an operator uses); each test makes
its own tenant so budgets never leak between tests.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa

from bench.serving.cluster import pg_database
from gateway.app import create_app
from gateway.config import Settings, settings_from_dict
from gateway.sandbox.local_server import serve_in_thread
from gateway.store.models import request_logs
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.router_fixture import PRICES, REPLIES, write_artifact

ADMIN_KEY = "tg-admin-test-key"
# fake-mid is the usual routed choice; its short timeout keeps the "hang" tests quick.
TIMEOUTS = {"fake-strong": 20.0, "fake-mid": 2.0, "fake-cheap": 20.0}


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    enc = Encoder(cache=False)
    enc.encode(["load the weights once per session"])
    return enc


@pytest.fixture(scope="session")
def upstream() -> Iterator[FakeUpstream]:
    backends = [
        FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0], output_per_m=PRICES[n][1])
        for n in PRICES
    ]
    with FakeUpstream(backends) as up:
        yield up


@pytest.fixture(autouse=True)
def _reset_upstream(request: pytest.FixtureRequest) -> None:
    """Every backend back to "ok" before a test that talks to the fake upstream (the store,
    CLI and sandbox tests below this folder do not, and start no upstream)."""
    if "upstream" in request.fixturenames:
        request.getfixturevalue("upstream").reset()


@pytest.fixture(scope="session")
def test_router(tmp_path_factory: pytest.TempPathFactory) -> Router:
    return write_artifact(tmp_path_factory.mktemp("router") / "test_router")


def gateway_config(up: FakeUpstream, spool_dir: Path, **extra: Any) -> dict[str, Any]:
    return {
        "model_list": [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES],
        "routes": {
            "auto": {"cost_weight": 0.5},
            "best": {"cost_weight": 0.0},
            "cheap": {"cost_weight": 5.0},
            "no-strong": {"cost_weight": 0.0, "models": ["fake-mid", "fake-cheap"]},
        },
        "admin_key": ADMIN_KEY,
        # these tests break backends on purpose, test after test: keep the circuit breakers
        # (tested in tests/gateway/reliability) from taking them out of rotation between tests
        "reliability": {
            "circuit": {"failure_threshold": 1_000_000},
            "spool_dir": str(spool_dir),
        },
        **extra,
    }


@dataclass
class Gateway:
    """A running gateway and helpers to talk to it as a client and as its operator."""

    base_url: str
    settings: Settings
    app: Any
    db_url: str
    engine: sa.Engine
    tenants: list[str] = field(default_factory=list)

    def client(self, key: str, **kw: Any) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url + "/v1", api_key=key, max_retries=0, **kw)

    def admin(self, method: str, path: str, **kw: Any) -> httpx.Response:
        headers = {"authorization": f"Bearer {ADMIN_KEY}"}
        return httpx.request(method, self.base_url + path, headers=headers, timeout=30, **kw)

    def tenant(self, budget_usd: float | None = None, period: str = "total",
               policy: dict | None = None) -> tuple[str, str]:
        """Create a tenant through the admin API: (api_key, tenant_id)."""
        name = "t-" + uuid.uuid4().hex[:10]
        body: dict[str, Any] = {"name": name, "budget_usd": budget_usd, "period": period}
        if policy is not None:
            body["policy"] = policy
        r = self.admin("POST", "/admin/tenants", json=body)
        assert r.status_code in (200, 201), r.text
        data = r.json()
        return data["api_key"], data["tenant"]["id"]

    def ledger(self, tenant_id: str) -> dict[str, Any]:
        r = self.admin("GET", f"/admin/tenants/{tenant_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def log_row(self, request_id: str, wait_s: float = 30.0) -> dict[str, Any]:
        """The request's log row as stored in the database (the writer is batched)."""
        deadline = time.monotonic() + wait_s
        while True:
            with self.engine.connect() as conn:
                row = conn.execute(
                    sa.select(request_logs).where(request_logs.c.id == request_id)
                ).mappings().first()
            if row is not None:
                return dict(row)
            if time.monotonic() > deadline:
                raise AssertionError(f"no log row for {request_id}")
            time.sleep(0.05)

    def settled(self, tenant_id: str, wait_s: float = 30.0) -> dict[str, Any]:
        """The tenant's ledger once nothing is reserved (settlement runs after the response)."""
        deadline = time.monotonic() + wait_s
        while True:
            info = self.ledger(tenant_id)
            if info["reserved_usd"] == 0 or time.monotonic() > deadline:
                return info
            time.sleep(0.05)


def _pg_database() -> Iterator[str]:
    """A fresh PostgreSQL database, dropped afterwards, for fixtures to ``yield from``."""
    with pg_database("tollgate_gw_") as url:
        yield url


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'tollgate.db'}"
    else:
        yield from _pg_database()


def run_gateway(settings: Settings, router: Router, encoder: Encoder,
                transport: Any = None) -> Iterator[Gateway]:
    """Start create_app(settings) under uvicorn on a free port; stop it afterwards.
    ``transport``: what provider calls go through instead of litellm (a MockTransport)."""
    app = create_app(settings, router=router, encoder=encoder, transport=transport)
    engine = sa.create_engine(settings.database_url.replace("postgresql://",
                                                           "postgresql+psycopg://"))
    try:
        with serve_in_thread(app) as url:
            yield Gateway(url, settings, app, settings.database_url, engine)
    finally:
        engine.dispose()


@pytest.fixture(scope="session")
def gateway(
    db_url: str,
    upstream: FakeUpstream,
    test_router: Router,
    encoder: Encoder,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Gateway]:
    spool = tmp_path_factory.mktemp("spool")
    settings = settings_from_dict(gateway_config(upstream, spool, database_url=db_url))
    yield from run_gateway(settings, test_router, encoder)


@pytest.fixture
def tenant(gateway: Gateway) -> tuple[str, str]:
    """A tenant without a budget: (api_key, tenant_id)."""
    return gateway.tenant()


@pytest.fixture
def client(gateway: Gateway, tenant: tuple[str, str]) -> openai.OpenAI:
    return gateway.client(tenant[0])


def project_root() -> Path:
    return Path(__file__).resolve().parents[2]
