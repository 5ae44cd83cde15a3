"""Feedback auth and repeated observations, retrain/rollback records, and a hot swap under
concurrent load: a real gateway over HTTP (uvicorn, the fake upstream, the official openai
SDK), on SQLite and PostgreSQL."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
import sqlalchemy as sa

from gateway.config import settings_from_dict
from gateway.learning import router_versions
from gateway.learning import tables as ldb
from router_core.runtime.router import Calibration, Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import (
    Gateway,
    run_gateway,
)
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import VERSION


@pytest.fixture(scope="module")
def gw(db_url: str, upstream: FakeUpstream, test_router: Router, encoder) -> Iterator[Gateway]:
    cfg = learning_config(upstream, database_url=db_url, retraining={"poll_s": 0.1})
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def _ask(gw: Gateway, key: str, text: str, model: str = "best") -> tuple[str, str, str]:
    raw = gw.client(key).chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}]
    )
    return (
        raw.headers["x-tollgate-request-id"],
        raw.headers["x-tollgate-router-version"],
        raw.parse().model,
    )


def _feedback(gw: Gateway, key: str, body: dict) -> httpx.Response:
    return httpx.post(
        gw.base_url + "/v1/feedback",
        headers={"authorization": f"Bearer {key}"},
        json=body,
        timeout=30,
    )


def test_feedback_from_the_requesting_tenant_is_one_observation_later_ones_replace(
        gw: Gateway) -> None:
    key, tenant_id = gw.tenant()
    rid, _, model = _ask(gw, key, "What is the capital of France?")
    r1 = _feedback(gw, key, {"request_id": rid, "correct": True})
    assert r1.status_code == 200, r1.text
    assert r1.json()["model"] == model and r1.json()["quality"] == 1.0
    r2 = _feedback(gw, key, {"request_id": rid, "score": 0.25, "comment": "partly wrong"})
    assert r2.status_code == 200, r2.text
    assert (r1.json()["replaced"], r2.json()["replaced"]) == (False, True)
    with gw.engine.connect() as conn:
        rows = (
            conn.execute(
                sa.select(ldb.observations_t)
                .where(ldb.observations_t.c.request_id == rid)
                .order_by(ldb.observations_t.c.id)
            )
            .mappings()
            .all()
        )
        served = (
            conn.execute(sa.select(ldb.requests_t).where(ldb.requests_t.c.request_id == rid))
            .mappings()
            .one()
        )
        prompt = (
            conn.execute(
                sa.select(ldb.prompts_t).where(ldb.prompts_t.c.prompt_key == served["prompt_key"])
            )
            .mappings()
            .one()
        )
    # one observation per request and tenant: the second feedback replaced the first
    assert [(r["quality"], r["sample"], r["source"]) for r in rows] == [(0.25, 0, "feedback")]
    assert rows[0]["comment"] == "partly wrong" and rows[0]["tenant_id"] == tenant_id
    assert served["backend"] == model and served["tenant_id"] == tenant_id
    # privacy default (log_prompts off): only Φ(x) is kept, 384 float32 values
    assert prompt["text"] is None and len(prompt["embedding"]) == 384 * 4


def test_feedback_is_refused_for_other_tenants_bad_keys_and_bad_bodies(gw: Gateway) -> None:
    key_a, _ = gw.tenant()
    key_b, _ = gw.tenant()
    rid, _, _ = _ask(gw, key_a, "Name a prime number.")
    other = _feedback(gw, key_b, {"request_id": rid, "correct": True})
    assert other.status_code == 404
    err = other.json()["error"]
    assert err["code"] == "request_not_found" and err["param"] == "request_id"
    assert err["type"] == "invalid_request_error"
    assert _feedback(gw, "tg-not-a-key", {"request_id": rid, "correct": True}).status_code == 401
    unknown = _feedback(gw, key_a, {"request_id": "tg-unknown", "correct": True})
    assert unknown.status_code == 404
    for body, param in [
        ({"request_id": rid, "score": 1.5}, "score"),
        ({"request_id": rid, "score": 1, "correct": True}, "score"),
        ({"request_id": rid}, "score"),
        ({"request_id": rid, "correct": "yes"}, "correct"),
        ({"score": 1}, "request_id"),
    ]:
        bad = _feedback(gw, key_a, body)
        assert bad.status_code == 400 and bad.json()["error"]["param"] == param, body
    with gw.engine.connect() as conn:
        n = conn.execute(
            sa.select(sa.func.count())
            .select_from(ldb.observations_t)
            .where(ldb.observations_t.c.request_id == rid)
        ).scalar_one()
    assert n == 0


def test_feedback_on_a_passthrough_request_is_refused_at_once(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gateway.learning import feedback

    # were the answer to wait for a served row that never comes, the client's 30 s timeout
    # would end the test: the passthrough is recognised from its log row instead
    monkeypatch.setattr(feedback, "SERVED_WAIT_S", 3600.0)
    key, _ = gw.tenant()
    other, _ = gw.tenant()
    rid, version, _ = _ask(gw, key, "Say hi.", model="fake-cheap")
    assert version == "passthrough"
    gw.log_row(rid)
    r = _feedback(gw, key, {"request_id": rid, "correct": True})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "not_routed" and err["param"] == "request_id"
    assert "fake-cheap" in err["message"]
    assert _feedback(gw, other, {"request_id": rid, "correct": True}).status_code == 404


def _cheap_first(router: Router, version: str) -> Router:
    """The same router with a calibration that makes λ = 0 pick fake-cheap."""
    cal = Calibration(
        a={}, b={"fake-strong": -3.0, "fake-mid": -2.0, "fake-cheap": 3.0}, a0=0.0, b0=0.0
    )
    return dataclasses.replace(router, version=version, calibration=cal)


def test_hot_swap_under_concurrent_load_has_zero_errors(
    gw: Gateway,
    test_router: Router,
) -> None:
    key, _ = gw.tenant()
    engine = ldb_engine(gw)
    other = _cheap_first(test_router, "test-router-2")
    router_versions.record_version(
        engine,
        other,
        status="promoted",
        parent=VERSION,
        metrics={},
        n_observations=0,
        max_obs_id=0,
        activate=False,
    )
    expected = {VERSION: "fake-strong", "test-router-2": "fake-cheap"}
    results: list[tuple[str, str]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def client_loop(i: int) -> None:
        n = 0
        while not stop.is_set():
            try:
                _, version, model = _ask(gw, key, f"load request {i}-{n}")
                results.append((version, model))
            except BaseException as e:  # noqa: BLE001 - every failure is counted
                errors.append(e)
            n += 1

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    try:
        for version in ["test-router-2", VERSION, "test-router-2"]:
            router_versions.activate(engine, version)  # what `tollgate router rollback` does
            deadline = time.monotonic() + 60
            while gw.app.state.ctx.pool.current.version != version:
                assert time.monotonic() < deadline, "the replica did not swap"
                time.sleep(0.02)
            seen = len(results)
            while len(results) < seen + 4:  # let traffic run on this version
                time.sleep(0.02)
    finally:
        stop.set()
        for t in threads:
            t.join()
        engine.dispose()
    assert errors == []
    versions = {v for v, _ in results}
    assert versions == {VERSION, "test-router-2"}
    # every answer came from the model the router version it reports would choose
    assert all(expected[v] == m for v, m in results)
    assert gw.app.state.ctx.learning.swapper.swaps >= 3


def ldb_engine(gw: Gateway) -> sa.Engine:
    from gateway.store import make_engine

    return make_engine(gw.db_url)
