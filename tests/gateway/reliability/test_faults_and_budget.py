"""Upstream faults and the budget's exit paths, on the real store (SQLite and PostgreSQL):
- every fault mode of the fake upstream before the first byte falls back to the next
  candidate (streaming and not) and the client sees a normal answer;
- the reservation is released on every exit path: upstream error, timeout, client
  disconnect mid-stream (settled from the tokens streamed), client gone while waiting; an
  attempt that timed out after sending costs its prompt's input, any other failure nothing."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
import sqlalchemy as sa

from gateway.prompt_tokens import count_text_tokens
from gateway.store.models import request_logs
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway
from tests.gateway.reliability.harness import pg_database
from tests.gateway.router_fixture import PRICES, REPLIES

MODES = ["error_500", "error_429", "hang", "reset", "malformed_json", "stall_mid_stream"]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgres",
                                                               marks=pytest.mark.postgres)])
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('faults') / 'tg.db'}"
    else:
        with pg_database() as url:
            yield url


def _gateway(make_gateway: MakeGateway, upstream: FakeUpstream, db: str | None) -> Gateway:
    # fake-mid (the routed choice) times out after 1 s: hangs and stalls end quickly
    models = [upstream.model_entry(n, timeout=1.0 if n == "fake-mid" else 20.0) for n in PRICES]
    return make_gateway(db_url=db, model_list=models,
                        reliability={"circuit": {"failure_threshold": 1000}})


@pytest.fixture
def gw(make_gateway: MakeGateway, upstream: FakeUpstream, db: str) -> Gateway:
    return _gateway(make_gateway, upstream, db)


@pytest.fixture
def sqlite_gw(make_gateway: MakeGateway, upstream: FakeUpstream) -> Gateway:
    return _gateway(make_gateway, upstream, None)


def _settled(gw: Gateway, tid: str) -> dict:
    deadline = time.monotonic() + 30
    while True:
        info = gw.ledger(tid)
        if info["reserved_usd"] == 0 or time.monotonic() > deadline:
            return info
        time.sleep(0.05)


# streams: the two mid-stream faults reach the client first (an error event, tests/gateway/serving)
FALLBACK_CASES = [(m, False) for m in MODES] + [
    (m, True) for m in MODES if m not in ("stall_mid_stream", "malformed_json")]


@pytest.mark.parametrize(("mode", "stream"), FALLBACK_CASES)
def test_fault_before_first_byte_falls_back(sqlite_gw: Gateway, upstream: FakeUpstream,
                                            mode: str, stream: bool) -> None:
    """On SQLite only: the database plays no part in fallback (test_replicas runs every
    fault mode again on PostgreSQL)."""
    gw = sqlite_gw
    key, tid = gw.tenant(budget_usd=1.0)
    upstream.set_mode("fake-mid", mode)
    client = gw.client(key)
    if stream:
        with client.chat.completions.with_streaming_response.create(
                model="auto", messages=MSG, stream=True) as raw:
            rid = raw.headers["x-tollgate-request-id"]
            model = raw.headers["x-tollgate-model"]
            text = "".join(c.choices[0].delta.content or "" for c in raw.parse() if c.choices)
    else:
        raw = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
        rid, model = raw.headers["x-tollgate-request-id"], raw.headers["x-tollgate-model"]
        text = raw.parse().choices[0].message.content
    assert model == "fake-cheap" and text == REPLIES["fake-cheap"]
    row = gw.log_row(rid)
    assert [a["model"] for a in row["attempts"]] == ["fake-mid", "fake-cheap"]
    assert row["attempts"][0]["status"] >= 429 and row["attempts"][1]["status"] == 200
    info = _settled(gw, tid)
    assert info["reserved_usd"] == 0 and abs(info["spent_usd"] - row["cost_usd"]) < 1e-9


@pytest.mark.parametrize("mode", ["error_500", "hang", "reset"])
def test_reservation_released_on_upstream_error_and_timeout(gw: Gateway, upstream: FakeUpstream,
                                                            mode: str) -> None:
    key, tid = gw.tenant(budget_usd=1.0)
    upstream.set_mode("fake-mid", mode)
    with pytest.raises(openai.APIStatusError) as exc:
        gw.client(key).chat.completions.create(model="fake-mid", messages=MSG)  # no fallback
    assert exc.value.status_code in (502, 504)
    row = gw.log_row(exc.value.response.headers["x-tollgate-request-id"])
    # a timeout after the request was sent may be billed by the provider, output included:
    # the attempt owes its whole reservation (issue 24)
    owed = row["reserved_usd"] if mode == "hang" else 0.0
    info = _settled(gw, tid)
    assert info["reserved_usd"] == 0 and info["spent_usd"] == pytest.approx(owed, abs=3e-9)
    assert row["cost_usd"] == pytest.approx(owed)


def test_client_disconnect_mid_stream_settles_what_was_streamed(gw: Gateway,
                                                                upstream: FakeUpstream) -> None:
    key, tid = gw.tenant(budget_usd=1.0)
    for b in upstream.backends.values():
        b.hang_s = 5.0
    upstream.set_mode("fake-strong", "stall_mid_stream")  # half the answer, then nothing
    with httpx.stream("POST", gw.base_url + "/v1/chat/completions", timeout=60,
                      headers={"authorization": f"Bearer {key}"},
                      json={"model": "fake-strong", "messages": MSG, "stream": True}) as r:
        rid = r.headers["x-tollgate-request-id"]
        got = ""
        for line in r.iter_lines():
            if '"content": "' in line or '"content":"' in line:
                got += line
            if got.count("content") >= 3:
                break  # the client goes away in the middle of the stream
    row = gw.log_row(rid)
    assert row["status"] == 499 and row["error"] == "client disconnected"
    half = " ".join(REPLIES["fake-strong"].split()[: len(REPLIES["fake-strong"].split()) // 2])
    backend = gw.settings.backend("fake-strong")
    assert row["completion_tokens"] == count_text_tokens(backend, half)
    pin, pout = PRICES["fake-strong"]
    assert abs(row["cost_usd"]
               - (row["prompt_tokens"] * pin + row["completion_tokens"] * pout) / 1e6) < 1e-12
    info = _settled(gw, tid)
    assert info["reserved_usd"] == 0
    assert abs(info["spent_usd"] - row["cost_usd"]) < 1e-9 and 0 < info["spent_usd"]
    assert info["spent_usd"] < row["reserved_usd"]  # charged for what was streamed, not held


def test_client_gone_while_waiting_still_settles_and_logs(gw: Gateway,
                                                          upstream: FakeUpstream) -> None:
    key, tid = gw.tenant(budget_usd=1.0)
    upstream.set_mode("fake-mid", "hang")
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gw.base_url + "/v1/chat/completions", timeout=0.3,
                   headers={"authorization": f"Bearer {key}"},
                   json={"model": "fake-mid", "messages": MSG})
    info = _settled(gw, tid)
    # the attempt timed out upstream after the request was sent: its whole reservation
    deadline = time.monotonic() + 30
    while True:  # the log row follows the settlement (batched writer)
        with gw.engine.connect() as conn:
            row = conn.execute(sa.select(request_logs).where(request_logs.c.tenant_id == tid)
                               ).mappings().first()
        if row is not None or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert row is not None
    owed = row["reserved_usd"]
    assert row["attempts"][0]["status"] == 504 and row["cost_usd"] == pytest.approx(owed)
    assert info["reserved_usd"] == 0 and info["spent_usd"] == pytest.approx(owed, abs=3e-9)


def test_timeouts_are_per_backend(sqlite_gw: Gateway, upstream: FakeUpstream) -> None:
    """fake-mid times out after 1 s, fake-strong after 20 s; both hang for 3 s and then
    close the connection. Only the backend whose own timeout is shorter than the hang
    reports a timeout (504); the other sees the connection closed (502)."""
    key, _ = sqlite_gw.tenant()
    statuses = {}
    for name in ("fake-mid", "fake-strong"):
        upstream.backends[name].hang_s = 3.0
        upstream.set_mode(name, "hang", times=1)
        with pytest.raises(openai.APIStatusError) as exc:
            sqlite_gw.client(key).chat.completions.create(model=name, messages=MSG)
        statuses[name] = (exc.value.status_code, exc.value.response.json()["error"]["code"])
    assert statuses["fake-mid"] == (504, "upstream_timeout")
    assert statuses["fake-strong"][0] == 502
