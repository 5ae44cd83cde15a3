"""A hostile tenant, one scenario per test, against a real gateway on PostgreSQL through the
OpenAI SDK (bench/serving/hostile.py replays them all on two replicas): no overspend, no circuit
opened by a client's own bad request, no image URL fetched, no 500 for bad input, every log
row stored, /metrics for operators only, feedback bounded, wrong keys (tenant and admin)
throttled, dashboard sessions that are not the key."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import openai
import pytest
import sqlalchemy as sa

from gateway.learning import tables as ldb
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import ADMIN_KEY, TIMEOUTS, Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway
from tests.gateway.router_fixture import PRICES

# One token per UTF-8 byte: the most any byte-level tokenizer can bill for a text.
HARSH = {"count_tokens": lambda text: len(text.encode("utf-8"))}
CJK = "漢字かな交じり文😀" * 400  # 4,400 characters, ~14,000 UTF-8 bytes


@pytest.fixture(scope="module")
def harsh() -> Iterator[FakeUpstream]:
    """An upstream that bills the most a tokenizer could: a byte per token, 1,600 per image."""
    b = FakeBackend("pricey", reply="ok", input_per_m=10.0, output_per_m=10.0,
                    image_tokens=1600)
    with FakeUpstream([b], **HARSH) as up:
        yield up


@pytest.fixture
def image_host() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server an image URL points at; it records every fetch."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("content-type", "image/png")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/cat.png", hits
    server.shutdown()


def _models(upstream: FakeUpstream, harsh: FakeUpstream) -> list[dict]:
    return ([upstream.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
            + [harsh.model_entry("pricey", timeout=20, max_output_tokens=64)])


@pytest.fixture
def gw(pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream,
       harsh: FakeUpstream) -> Gateway:
    return make_gateway(db_url=pg_url, model_list=_models(upstream, harsh), log_prompts=True)


def _hostile_message(url: str) -> list[dict]:
    return [{"role": "user", "content": [
        {"type": "text", "text": CJK},
        {"type": "image_url", "image_url": {"url": url, "detail": "high"}}]}]


def _scrape(gw: Gateway) -> str:
    r = httpx.get(gw.base_url + "/metrics", timeout=30,
                  headers={"authorization": f"Bearer {ADMIN_KEY}"})
    assert r.status_code == 200
    return r.text


def _metric(text: str, name: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + " ", name + "{")))


def test_no_overspend_with_cjk_images_functions_and_schemas(
        gw: Gateway, harsh: FakeUpstream, image_host: tuple[str, list[str]]) -> None:
    """Concurrent requests billed at a byte per token and 1,600 tokens per image, with
    functions and a response_format schema: the budget holds, nothing is an overrun, the
    image URL is never fetched."""
    url, hits = image_host
    key, tid = gw.tenant(budget_usd=0.5)
    extra = {"functions": [{"name": "lookup", "parameters": {"type": "object", "properties": {
        "q": {"type": "string", "description": "検索語" * 200}}}}],
        "response_format": {"type": "json_schema", "json_schema": {
            "name": "answer", "schema": {"type": "object", "description": "答え" * 300}}}}

    def one(_: int) -> int:
        try:
            gw.client(key).chat.completions.create(
                model="pricey", messages=_hostile_message(url), max_tokens=16, **extra)
            return 200
        except openai.APIStatusError as e:
            return e.status_code

    with ThreadPoolExecutor(5) as pool:
        codes = list(pool.map(one, range(5)))
    info = gw.settled(tid)
    assert 200 in codes and set(codes) <= {200, 429}, codes
    assert info["spent_usd"] <= 0.5 and info["overrun_usd"] == 0
    assert info["spent_usd"] >= 0.1 * codes.count(200)  # the bill was real and large
    assert hits == []
    assert _metric(_scrape(gw), "tollgate_budget_overruns_total") == 0


def test_a_provider_billing_past_the_bound_is_the_operators_and_never_stops_the_tenant(
        pg_url: str, make_gateway: MakeGateway, upstream: FakeUpstream, harsh: FakeUpstream,
        image_host: tuple[str, list[str]]) -> None:
    """The provider bills 50,000 tokens per image, past max_image_tokens (~4x the prompt's
    bound): spent takes at most the reservation, the excess is the operator's (metric), the
    tenant keeps being served, and the backend's next reservation is widened to what it
    reported (gateway/serving/budget/bound_factors.py), so the same request is no overrun again."""
    models = _models(upstream, harsh)
    gw = make_gateway(db_url=pg_url, model_list=models)
    harsh.backends["pricey"].image_tokens = 50_000
    try:
        key, tid = gw.tenant(budget_usd=5.0)
        client = gw.client(key)
        client.chat.completions.create(model="pricey", messages=_hostile_message(image_host[0]),
                                       max_tokens=4)
        info = gw.settled(tid)
        assert info["overrun_usd"] == 0 and 0 < info["spent_usd"] <= 5.0
        text = _scrape(gw)
        assert _metric(text, "tollgate_budget_overruns_total") == 1
        assert _metric(text, 'tollgate_overrun_usd_total{backend="pricey"}') > 0
        client.chat.completions.create(model="fake-cheap", messages=MSG)  # not locked out
        client.chat.completions.create(model="pricey", messages=_hostile_message(image_host[0]),
                                       max_tokens=4)
        assert _metric(_scrape(gw), "tollgate_budget_overruns_total") == 1  # it fits now
        assert gw.settled(tid)["overrun_usd"] == 0
    finally:
        harsh.backends["pricey"].image_tokens = 1600


def test_a_clients_bad_requests_open_no_circuit_and_reach_no_upstream(
        gw: Gateway, upstream: FakeUpstream) -> None:
    bad_key, _ = gw.tenant()
    bodies = [{"messages": [{"role": "user", "content": [1]}]},
              {"messages": MSG, "tools": [1]},
              {"messages": [{"role": "user", "content": [{"type": "text"}]}]}]
    for _ in range(4):
        for body in bodies:
            r = httpx.post(gw.base_url + "/v1/chat/completions", timeout=30,
                           json={"model": "auto", **body},
                           headers={"authorization": f"Bearer {bad_key}"})
            assert r.status_code == 400, r.text
        r = httpx.post(gw.base_url + "/v1/chat/completions", timeout=30,
                       headers={"authorization": f"Bearer {bad_key}",
                                "content-type": "application/json"},
                       content=b'{"model": "auto", "messages": [{"role": "user", '
                               b'"content": "x"}], "temperature": NaN}')
        assert r.status_code == 400
    assert upstream.requests == []
    good_key, _ = gw.tenant()
    gw.client(good_key).chat.completions.create(model="auto", messages=MSG)
    assert _metric(_scrape(gw), "tollgate_circuit_state") == 0  # every breaker closed


def test_both_output_caps_are_capped_upstream(gw: Gateway, upstream: FakeUpstream) -> None:
    key, _ = gw.tenant(budget_usd=1.0)
    gw.client(key).chat.completions.create(model="fake-cheap", messages=MSG, max_tokens=5,
                                           max_completion_tokens=7)
    sent = upstream.requests_for("fake-cheap")[-1]
    assert sent.get("max_tokens", 5) == 5 and sent.get("max_completion_tokens", 5) == 5


def test_every_log_row_is_stored_with_nul_and_surrogates(gw: Gateway) -> None:
    key, _ = gw.tenant()
    r = gw.client(key).chat.completions.with_raw_response.create(
        model="fake-cheap", messages=[{"role": "user", "content": "nul \x00 inside"}])
    row = gw.log_row(r.headers["x-tollgate-request-id"])
    assert row["status"] == 200 and "\\u0000" in row["prompt_text"]
    with pytest.raises(openai.NotFoundError) as exc:
        gw.client(key).chat.completions.create(model="no\x00such", messages=MSG)
    row = gw.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert row["status"] == 404


def test_metrics_are_for_operators_only(pg_url: str, make_gateway: MakeGateway) -> None:
    gw = make_gateway(db_url=pg_url, metrics_token="scrape-token")
    key, _ = gw.tenant(budget_usd=1.0)
    url = gw.base_url + "/metrics"
    assert httpx.get(url, timeout=30).status_code == 401
    assert httpx.get(url, timeout=30,
                     headers={"authorization": f"Bearer {key}"}).status_code == 401
    for token in (ADMIN_KEY, "scrape-token"):
        r = httpx.get(url, timeout=30, headers={"authorization": f"Bearer {token}"})
        assert r.status_code == 200 and "tollgate_budget_usd" in r.text


def _feedback(gw: Gateway, key: str, **kw: object) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/feedback", timeout=30,
                      headers={"authorization": f"Bearer {key}"}, **kw)


def test_feedback_is_bounded(gw: Gateway) -> None:
    key, _ = gw.tenant()
    r = gw.client(key).chat.completions.with_raw_response.create(model="auto", messages=MSG)
    rid = r.headers["x-tollgate-request-id"]
    answers = [_feedback(gw, key, json={"request_id": rid, "score": i / 20}) for i in range(20)]
    assert all(a.status_code == 200 for a in answers)
    assert [a.json()["replaced"] for a in answers].count(True) == 19
    with gw.engine.connect() as conn:
        rows = conn.execute(sa.select(ldb.observations_t.c.quality)
                            .where(ldb.observations_t.c.request_id == rid)).scalars().all()
    assert rows == [pytest.approx(19 / 20)]
    assert _metric(_scrape(gw), "tollgate_feedback_replaced_total") == 19
    big = _feedback(gw, key, json={"request_id": rid, "score": 1, "comment": "x" * 10**6})
    assert big.status_code == 413
    nul = _feedback(gw, key, json={"request_id": rid, "score": 1, "comment": "a\x00b"})
    assert nul.status_code == 400 and nul.json()["error"]["param"] == "comment"
    deep = _feedback(gw, key, content=b'{"request_id": ' + b"[" * 30_000 + b"]" * 30_000 + b"}")
    assert deep.status_code == 400
    nan = _feedback(gw, key, content=json.dumps({"request_id": rid}).encode()[:-1]
                    + b', "score": NaN}')
    assert nan.status_code == 400
    assert _feedback(gw, key, json={"request_id": "not-ours", "score": 1}).status_code == 404


def test_wrong_keys_are_throttled_per_address(gw: Gateway) -> None:
    """Past 20 wrong keys a minute an address gets 429 instead of lookups; a tenant whose
    key is live behind the same address (a NAT, a proxy) is not locked out."""
    key, _ = gw.tenant()
    client = gw.client(key)
    client.chat.completions.create(model="auto", messages=MSG)
    url = gw.base_url + "/v1/chat/completions"
    codes = [httpx.post(url, json={"model": "auto", "messages": MSG}, timeout=30,
                        headers={"authorization": f"Bearer sk-tg-guess{i}"}).status_code
             for i in range(21)]
    assert codes[:20] == [401] * 20 and codes[20] == 429
    client.chat.completions.create(model="auto", messages=MSG)


def test_wrong_admin_keys_are_throttled_per_address(pg_url: str,
                                                    make_gateway: MakeGateway) -> None:
    """Wrong admin keys and metrics tokens count with wrong tenant keys: past 20 an address
    gets 429 (OpenAI error body, Retry-After) on the admin API, /metrics, the dashboard login
    and the chat API, even for the right admin key; another address is unaffected."""
    gw = make_gateway(db_url=pg_url, metrics_token="scrape-token")
    key, _ = gw.tenant()
    gw.client(key).chat.completions.create(model="auto", messages=MSG)  # live in the cache
    base = gw.base_url
    wrong = {"authorization": "Bearer not-the-admin-key"}
    codes = []
    for i in range(20):
        if i % 3 == 0:
            r = httpx.get(base + "/admin/tenants", headers=wrong, timeout=30)
        elif i % 3 == 1:
            r = httpx.get(base + "/metrics", headers=wrong, timeout=30)
        else:
            r = httpx.post(base + "/dashboard/login", data={"key": "not-the-admin-key"},
                           timeout=30)
        codes.append(r.status_code)
    assert codes == [401] * 20

    def refused(r: httpx.Response, json_body: bool = True) -> None:
        assert r.status_code == 429, r.text
        assert 1 <= int(r.headers["retry-after"]) <= 60
        if json_body:
            err = r.json()["error"]
            assert err["type"] == "rate_limit_error" and err["code"] == "too_many_failed_logins"

    admin = {"authorization": f"Bearer {ADMIN_KEY}"}
    refused(httpx.get(base + "/admin/tenants", headers=wrong, timeout=30))
    refused(httpx.get(base + "/admin/tenants", headers={"x-admin-key": ADMIN_KEY}, timeout=30))
    refused(httpx.get(base + "/metrics", headers=admin, timeout=30))
    refused(httpx.get(base + "/metrics", timeout=30,
                      headers={"authorization": "Bearer scrape-token"}))
    refused(httpx.get(base + "/dashboard/api/summary", headers=admin, timeout=30))
    refused(httpx.post(base + "/dashboard/login", data={"key": ADMIN_KEY}, timeout=30),
            json_body=False)  # the login form answers its HTML page, with 429 and Retry-After
    refused(httpx.post(base + "/v1/chat/completions", json={"model": "auto", "messages": MSG},
                       headers={"authorization": "Bearer sk-tg-guess"}, timeout=30))
    gw.client(key).chat.completions.create(model="auto", messages=MSG)  # still served

    # The right keys from another address (127.0.0.2, also this machine) are unaffected.
    other = httpx.Client(base_url=base, timeout=30,
                         transport=httpx.HTTPTransport(local_address="127.0.0.2"))
    with other:
        assert other.get("/admin/tenants", headers=admin).status_code == 200
        assert other.get("/metrics", headers={"authorization": "Bearer scrape-token"}
                         ).status_code == 200
        assert other.post("/dashboard/login", data={"key": ADMIN_KEY}).status_code == 303
        assert other.get("/admin/tenants", headers=wrong).status_code == 401


def test_the_dashboard_cookie_is_a_signed_session_that_logout_ends(gw: Gateway) -> None:
    key, tid = gw.tenant()
    login = httpx.post(gw.base_url + "/dashboard/login", data={"key": key}, timeout=30)
    assert login.status_code == 303
    cookie = login.cookies["tollgate_dashboard"]
    assert key not in cookie and key[6:] not in cookie
    api = gw.base_url + "/dashboard/api/summary"

    def status(value: str) -> int:
        return httpx.get(api, cookies={"tollgate_dashboard": value}, timeout=30).status_code

    assert status(cookie) == 200
    assert status(cookie[:-1] + ("0" if cookie[-1] != "0" else "1")) == 401  # tampered
    assert status(key) == 401  # the key itself is not a session
    httpx.post(gw.base_url + "/dashboard/logout", cookies={"tollgate_dashboard": cookie},
               timeout=30)
    assert status(cookie) == 401  # a copy of the cookie dies with the session
    again = httpx.post(gw.base_url + "/dashboard/login", data={"key": key}, timeout=30)
    fresh = again.cookies["tollgate_dashboard"]
    assert status(fresh) == 200
    keys = gw.admin("GET", f"/admin/keys?tenant={tid}").json()["data"]
    gw.admin("DELETE", f"/admin/keys/{keys[0]['id']}")
    assert status(fresh) == 401  # the key it was opened with is revoked
