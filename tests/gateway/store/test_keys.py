"""API keys: stored only as keyed hashes, verifiable, revocable; faults are not 401s."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
import uuid

import pytest
from sqlalchemy import event, select, text

from gateway.store import Store, StoreUnavailable
from gateway.store.keys import SECRET_SETTING
from gateway.store.models import api_keys, settings
from gateway.store.revocations import RevocationSignal
from tests.gateway.reliability.harness import REDIS_URL
from tests.gateway.store.conftest import set_allow_connections, started

pytestmark = pytest.mark.anyio
KEY_RE = re.compile(r"^sk-tg-[A-Za-z0-9_-]{43}$")


def _dump_all_text(store: Store) -> str:
    """Every value in every table, as one string (to prove a key is nowhere in clear)."""
    parts = []
    with store.engine.connect() as conn:
        for table in ("tenants", "api_keys", "settings", "budget_reservations", "request_logs"):
            for row in conn.execute(text(f"SELECT * FROM {table}")):
                parts.extend(str(v) for v in row)
    return "\n".join(parts)


async def test_keys_are_stored_only_as_keyed_hashes(db_url: str) -> None:
    async with started(db_url) as store:
        info, new = await store.create_tenant("acme", budget_usd=1.0, period="daily")
        assert KEY_RE.match(new.api_key)
        assert new.api_key not in _dump_all_text(store)
        with store.engine.connect() as conn:
            stored = conn.execute(select(api_keys.c.key_hash)).scalar_one()
            secret = bytes.fromhex(conn.execute(
                select(settings.c.value).where(settings.c.key == SECRET_SETTING)).scalar_one())
        # HMAC-SHA256 with the server secret, not a plain hash anyone could recompute.
        assert stored == hmac.new(secret, new.api_key.encode(), hashlib.sha256).hexdigest()
        assert stored != hashlib.sha256(new.api_key.encode()).hexdigest()

        tenant = await store.authenticate(new.api_key)
        assert tenant is not None and tenant.id == info.id and tenant.name == "acme"
        assert tenant.budget_usd == 1.0 and tenant.period == "daily"
        assert tenant.key_id == new.info.id
        assert await store.authenticate(new.api_key[:-1] + ("A" if new.api_key[-1] != "A"
                                                             else "B")) is None
        assert await store.authenticate("not-a-key") is None

    # A second store (another replica) loads the same persisted secret and verifies the key.
    async with started(db_url) as replica:
        assert (await replica.authenticate(new.api_key)).id == info.id


async def test_env_secret_changes_the_hash(db_url: str, monkeypatch: pytest.MonkeyPatch,
                                           caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("TOLLGATE_SECRET", "first-secret")
    async with started(db_url) as store:
        _, new = await store.create_tenant("acme")
        assert await store.authenticate(new.api_key) is not None
    assert "secret differs" not in caplog.text
    monkeypatch.setenv("TOLLGATE_SECRET", "another-secret")
    async with started(db_url) as store:
        assert await store.authenticate(new.api_key) is None
    assert "secret differs" in caplog.text  # the operator is told why every key fails


async def test_revoked_key_and_disabled_tenant_are_rejected(db_url: str) -> None:
    async with started(db_url) as store, started(db_url, auth_ttl_s=0) as replica:
        _, first = await store.create_tenant("acme")
        second = await store.create_key("acme", name="ci")
        assert (await store.authenticate(first.api_key)) is not None
        assert (await replica.authenticate(first.api_key)) is not None

        revoked = await store.revoke_key(first.info.id)
        assert revoked.revoked_at is not None
        assert await store.authenticate(first.api_key) is None  # own cache invalidated
        assert await replica.authenticate(first.api_key) is None  # other replica, TTL 0
        assert (await store.authenticate(second.api_key)) is not None
        again = await store.revoke_key(first.info.id)
        assert again.revoked_at == revoked.revoked_at  # idempotent: first time kept

        await store.disable_tenant("acme")
        assert await store.authenticate(second.api_key) is None
        assert await replica.authenticate(second.api_key) is None
        keys = {k.id: k for k in await store.list_keys("acme")}
        assert keys[first.info.id].revoked_at is not None and keys[second.info.id].name == "ci"


async def test_auth_is_cached_in_process(sqlite_url: str) -> None:
    """After the first lookup a request costs one primary-key read for auth (the revocation
    epoch, gateway.store.auth_epoch), never the key lookup again."""
    async with started(sqlite_url, auth_ttl_s=60) as store:
        _, new = await store.create_tenant("acme")
        assert await store.authenticate(new.api_key) is not None
        statements: list[str] = []

        def count(*args: object) -> None:
            statements.append(str(args[2]))

        event.listen(store.engine, "before_cursor_execute", count)
        try:
            for _ in range(20):
                assert await store.authenticate(new.api_key) is not None
        finally:
            event.remove(store.engine, "before_cursor_execute", count)
        # the store's own start-up reclaim of a previous run's reservations may run meanwhile
        auth = [q for q in statements if "budget_reservations" not in q]
        assert len(auth) == 20
        assert all("FROM settings" in q and "api_keys" not in q for q in auth)


@pytest.mark.postgres
async def test_database_outage_is_unavailable_not_unauthenticated(pg_url: str) -> None:
    async with started(pg_url, auth_ttl_s=0, auth_stale_s=600) as store:
        # what confirms, while the database is down, that nothing was revoked since
        store.revocations = RevocationSignal(REDIS_URL, "tg-test-" + uuid.uuid4().hex[:10])
        _, seen = await store.create_tenant("acme")
        unseen = await store.create_key("acme")
        assert await store.authenticate(seen.api_key) is not None
        set_allow_connections(pg_url, False)
        try:
            # A key seen recently is served stale; an unseen one is a 503, never a None/401.
            assert (await store.authenticate(seen.api_key)).name == "acme"
            with pytest.raises(StoreUnavailable):
                await store.authenticate(unseen.api_key)
            assert await store.ping() is False
        finally:
            set_allow_connections(pg_url, True)
        assert (await store.authenticate(unseen.api_key)).name == "acme"
        assert await store.ping() is True


@pytest.mark.postgres
async def test_store_starts_while_database_is_down_and_recovers(pg_url: str) -> None:
    async with started(pg_url) as store:
        _, new = await store.create_tenant("acme")
    set_allow_connections(pg_url, False)
    try:
        async with started(pg_url, maintenance_interval_s=0.2) as store:
            assert not store.ready
            with pytest.raises(StoreUnavailable):
                await store.authenticate(new.api_key)
            set_allow_connections(pg_url, True)
            for _ in range(600):  # the background retry makes it ready by itself
                if store.ready:
                    break
                await asyncio.sleep(0.05)
            assert store.ready
            assert (await store.authenticate(new.api_key)).name == "acme"
    finally:
        set_allow_connections(pg_url, True)
