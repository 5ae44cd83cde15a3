"""Revocation holds at once on every replica, and a replica cut off from the database never
serves a key that may have been revoked since it last saw it (gateway/store/store.py,
``authenticate``); learning prompt keys are keyed with the deployment secret."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator

import numpy as np
import pytest
from sqlalchemy import delete, select

from gateway.learning import tables as ldb
from gateway.store import StoreUnavailable, prompt_keys
from gateway.store.models import settings
from gateway.store.revocations import RevocationSignal
from tests.gateway.reliability.harness import REDIS_URL, TcpProxy, redis_cleanup, via_proxy
from tests.gateway.store.conftest import started

pytestmark = pytest.mark.anyio


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    prefix = "tg-test-" + uuid.uuid4().hex[:10]
    yield prefix
    redis_cleanup(prefix)


@pytest.fixture
def proxy() -> Iterator[TcpProxy]:
    p = TcpProxy(("127.0.0.1", 5432)).start()
    yield p
    p.stop()


async def test_revocation_holds_at_once_on_another_replica(db_url: str) -> None:
    # long cache lifetimes: only the revocation epoch can make the replica notice
    async with started(db_url, auth_ttl_s=600) as admin, \
            started(db_url, auth_ttl_s=600) as replica:
        _, first = await admin.create_tenant("acme", budget_usd=1.0)
        second = await admin.create_key("acme")
        _, other = await admin.create_tenant("other")
        for key in (first.api_key, second.api_key, other.api_key):
            assert await replica.authenticate(key) is not None
        await admin.revoke_key(first.info.id)
        assert await replica.authenticate(first.api_key) is None
        assert replica.cached_tenant(first.api_key) is None  # dropped, not kept stale
        assert (await replica.authenticate(second.api_key)).budget_usd == 1.0
        await admin.update_tenant("acme", budget_usd=2.0)  # a change is seen at once too
        assert (await replica.authenticate(second.api_key)).budget_usd == 2.0
        await admin.disable_tenant("acme")
        assert await replica.authenticate(second.api_key) is None
        assert await replica.authenticate(other.api_key) is not None


@pytest.mark.postgres
async def test_a_replica_cut_off_from_the_database_serves_no_revoked_key(
        pg_url: str, proxy: TcpProxy, redis_prefix: str) -> None:
    async with started(pg_url) as admin, \
            started(via_proxy(pg_url, proxy), auth_ttl_s=600) as replica, \
            started(via_proxy(pg_url, proxy), auth_ttl_s=600) as no_redis:
        admin.revocations = RevocationSignal(REDIS_URL, redis_prefix)
        replica.revocations = RevocationSignal(REDIS_URL, redis_prefix)
        _, first = await admin.create_tenant("acme")
        second = await admin.create_key("acme")
        for key in (first.api_key, second.api_key):
            assert await replica.authenticate(key) is not None
            assert await no_redis.authenticate(key) is not None
        proxy.stop()  # the replicas lose the database; the admin side keeps it
        assert (await replica.authenticate(first.api_key)).name == "acme"  # nothing revoked
        with pytest.raises(StoreUnavailable):  # nothing can confirm it: 503, not stale
            await no_redis.authenticate(first.api_key)

        await admin.revoke_key(first.info.id)  # committed where the replica cannot see it
        for key in (first.api_key, second.api_key):  # any key may be the revoked one
            with pytest.raises(StoreUnavailable):
                await replica.authenticate(key)
        proxy.start()
        assert await replica.authenticate(first.api_key) is None
        assert await replica.authenticate(second.api_key) is not None
        proxy.stop()  # validated again after the revocation: served through an outage
        assert await replica.authenticate(second.api_key) is not None
        proxy.start()


async def test_prompt_keys_are_keyed_and_old_rows_rekeyed(
        sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOLLGATE_SECRET", "deployment-one")
    async with started(sqlite_url) as store:
        key = ldb.prompt_key("what is 2+2?", store.prompt_secret)
        unkeyed = hashlib.sha256(b"what is 2+2?").hexdigest()
        assert key != unkeyed and len(key) == 64
        assert ldb.prompt_key("what is 2+2?") == key  # the process default: this store's
        # rows an earlier version wrote with the unkeyed hash
        ldb.record_served(store.engine, request_id="r-old", tenant_id=None, text=None,
                          key=unkeyed, embedding=np.zeros(4), route="auto", model="m",
                          backend="b", cost_usd=0.0)
        ldb.add_observation(store.engine, key=unkeyed, model="m", quality=1.0, cost_usd=0.0,
                            source="judge")
        with store.engine.begin() as conn:
            conn.execute(delete(settings).where(settings.c.key == prompt_keys.MARKER))
    async with started(sqlite_url) as store:  # the next start re-keys them, once
        with store.engine.connect() as conn:
            for table in (ldb.prompts_t, ldb.requests_t, ldb.observations_t):
                assert set(conn.execute(select(table.c.prompt_key)).scalars()) == {key}
    async with started(sqlite_url):
        with store.engine.connect() as conn:
            assert set(conn.execute(select(ldb.prompts_t.c.prompt_key)).scalars()) == {key}
    monkeypatch.setenv("TOLLGATE_SECRET", "deployment-two")
    assert prompt_keys.prompt_key("what is 2+2?", prompt_keys.derive(b"deployment-two")) != key
