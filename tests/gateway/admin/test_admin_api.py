"""The admin API over real HTTP (uvicorn on 127.0.0.1), with OpenAI-style errors."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
import pytest
import sqlalchemy as sa
import uvicorn
from fastapi import FastAPI

from gateway.admin import api as admin
from gateway.store import Store
from gateway.store.models import tenants
from tests.gateway.store import conftest as store_fixtures
from tests.gateway.store.conftest import set_allow_connections

# the store tests' database fixtures: a fresh SQLite file or PostgreSQL database per test
db_url, pg_url, sqlite_url = store_fixtures.db_url, store_fixtures.pg_url, store_fixtures.sqlite_url
anyio_backend = store_fixtures.anyio_backend

ADMIN_KEY = "tg-admin-store-tests"


@dataclass
class Served:
    base_url: str
    store: Store


@pytest.fixture
def served(db_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Served]:
    """An app hosting only the admin router and a store, like the gateway hosts it."""
    monkeypatch.setenv("TOLLGATE_ADMIN_KEY", ADMIN_KEY)
    store = Store.from_url(db_url)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await store.start()
        yield
        await store.close()

    app = FastAPI(lifespan=lifespan)
    app.state.store = store
    app.include_router(admin.build_router())
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # a generous cap, only so a broken start cannot hang
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", store)
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        sock.close()


def _client(s: Served, key: str | None = ADMIN_KEY) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=s.base_url, headers=headers, timeout=30)


def _assert_openai_error(r: httpx.Response, status: int, param: str | None = None) -> dict:
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    if param is not None:
        assert err["param"] == param
    return err


def test_admin_api_needs_the_admin_key(served: Served, monkeypatch: pytest.MonkeyPatch
                                       ) -> None:
    with _client(served, key=None) as c:
        _assert_openai_error(c.get("/admin/tenants"), 401)
    with _client(served, key="wrong") as c:
        assert _assert_openai_error(c.post("/admin/tenants", json={"name": "x"}),
                                    401)["code"] == "invalid_api_key"
    with _client(served) as c:
        created = c.post("/admin/tenants", json={"name": "acme"}).json()
    with _client(served, key=created["api_key"]) as c:  # a tenant key is not an admin key
        _assert_openai_error(c.get("/admin/tenants"), 401)
    with httpx.Client(base_url=served.base_url,
                      headers={"X-Admin-Key": ADMIN_KEY}, timeout=30) as c:
        assert c.get("/admin/tenants").status_code == 200
    monkeypatch.delenv("TOLLGATE_ADMIN_KEY")
    with _client(served) as c:
        assert _assert_openai_error(c.get("/admin/tenants"), 403)["type"] == "permission_error"


@pytest.mark.anyio
async def test_tenant_and_key_lifecycle_over_http(served: Served) -> None:
    with _client(served) as c:
        r = c.post("/admin/tenants", json={"name": "acme", "budget_usd": 3.0,
                                           "period": "monthly",
                                           "policy": {"allowed_models": ["fake-mid"]}})
        assert r.status_code == 201
        body = r.json()
        key, tenant = body["api_key"], body["tenant"]
        assert tenant["budget_usd"] == 3.0 and tenant["policy"] == {"allowed_models": ["fake-mid"]}
        assert body["key"]["prefix"] == key[:10]

        listed = c.get("/admin/tenants").text
        assert "acme" in listed and key not in listed  # shown once, never again
        assert c.get(f"/admin/tenants/{tenant['id']}").json()["name"] == "acme"

        budget = c.put("/admin/tenants/acme/budget", json={"budget_usd": 7.5, "period": "daily"})
        assert budget.status_code == 200
        assert budget.json()["budget_usd"] == 7.5 and budget.json()["period"] == "daily"
        patched = c.patch("/admin/tenants/acme", json={"budget_usd": None})
        assert patched.json()["budget_usd"] is None and patched.json()["period"] == "daily"

        second = c.post("/admin/tenants/acme/keys", json={"name": "ci"}).json()
        keys = c.get("/admin/keys", params={"tenant": "acme"}).json()["data"]
        assert {k["name"] for k in keys} == {"default", "ci"}
        assert c.delete(f"/admin/keys/{second['key']['id']}").json()["revoked_at"]

    t = await served.store.authenticate(key)
    assert t is not None and t.policy.to_dict() == {"allowed_models": ["fake-mid"]}
    assert await served.store.authenticate(second["api_key"]) is None

    with _client(served) as c:
        assert c.delete("/admin/tenants/acme").json()["disabled_at"]
        assert "acme" not in c.get("/admin/tenants").text
        assert "acme" in c.get("/admin/tenants", params={"include_disabled": True}).text
    assert await served.store.authenticate(key) is None


def test_admin_errors_are_openai_shaped(served: Served) -> None:
    with _client(served) as c:
        _assert_openai_error(c.post("/admin/tenants", json={"name": "a", "budget_usd": -1}),
                             400, param="budget_usd")
        _assert_openai_error(c.post("/admin/tenants", json={"name": "a", "period": "hourly"}),
                             400, param="period")
        _assert_openai_error(c.post("/admin/tenants", json={"budget_usd": 1}), 400,
                             param="name")
        _assert_openai_error(c.post("/admin/tenants", content=b"{not json",
                                    headers={"content-type": "application/json"}), 400)
        assert c.post("/admin/tenants", json={"name": "acme"}).status_code == 201
        assert _assert_openai_error(c.post("/admin/tenants", json={"name": "acme"}),
                                    409)["code"] == "conflict"
        _assert_openai_error(c.get("/admin/tenants/nobody"), 404)
        _assert_openai_error(c.patch("/admin/tenants/nobody", json={"budget_usd": 1}), 404)
        _assert_openai_error(c.delete("/admin/keys/key_nope"), 404)
        _assert_openai_error(c.post("/admin/tenants/acme/keys", json={"nme": "typo"}), 400,
                             param="nme")


@pytest.mark.postgres
@pytest.mark.parametrize("db_url", ["postgresql"], indirect=True)
def test_database_outage_is_a_503_not_a_crash(served: Served, db_url: str) -> None:
    with _client(served) as c:
        assert c.post("/admin/tenants", json={"name": "acme"}).status_code == 201
        set_allow_connections(db_url, False)
        try:
            err = _assert_openai_error(c.get("/admin/tenants"), 503)
            assert err["code"] == "database_unavailable" and "postgres" not in err["message"]
        finally:
            set_allow_connections(db_url, True)
        assert c.get("/admin/tenants").status_code == 200


@pytest.mark.parametrize(("policy", "param"), [
    ({"allowed_models": "fake-mid"}, "policy.allowed_models"),  # a string, not a list
    ({"max_cost_usd": "0.5"}, "policy.max_cost_usd"),
    ({"cost_weight": -1.0}, "policy.cost_weight"),
    ({"requests_per_minute": 2.5}, "policy.requests_per_minute"),
    ({"allowed_modles": ["fake-mid"]}, "policy.allowed_modles"),  # a typo is not ignored
])
def test_a_bad_policy_is_a_400_naming_the_key(served: Served, policy: dict, param: str
                                              ) -> None:
    with _client(served) as c:
        err = _assert_openai_error(c.post("/admin/tenants", json={"name": "p", "policy": policy}),
                                   400, param)
        assert err["code"] == "invalid_policy" and param.split(".")[1] in err["message"]
        assert c.post("/admin/tenants", json={"name": "p"}).status_code == 201
        _assert_openai_error(c.patch("/admin/tenants/p", json={"policy": policy}), 400, param)
        assert c.get("/admin/tenants/p").json()["policy"] == {}  # nothing changed


@pytest.mark.anyio
async def test_a_legacy_policy_that_does_not_validate_does_not_fail_requests(
        served: Served) -> None:
    """A row stored before validation existed: its valid keys apply, numbers stored as
    strings are read as before, a bad ``allowed_models`` allows nothing (fail closed)."""
    with _client(served) as c:
        created = c.post("/admin/tenants", json={"name": "old"}).json()
    legacy = {"allowed_models": "fake-mid", "max_cost_usd": "0.5", "requests_per_minute": 3,
              "cost_weight": "cheap", "retired_key": True}
    with served.store.engine.begin() as conn:
        conn.execute(sa.update(tenants).where(tenants.c.id == created["tenant"]["id"])
                     .values(policy=legacy))
    served.store.invalidate_auth_cache()
    t = await served.store.authenticate(created["api_key"])
    assert t is not None
    assert t.policy.to_dict() == {"allowed_models": [], "max_cost_usd": 0.5,
                                  "requests_per_minute": 3}
    with _client(served) as c:
        r = c.get("/admin/tenants/old")
        assert r.status_code == 200 and r.json()["policy"] == t.policy.to_dict()
