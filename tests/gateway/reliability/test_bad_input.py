"""Bad input: each a 400/413 OpenAI error naming the problem; nothing reserved, forwarded or
half-written (the ledger stays at zero, the upstream sees nothing, the log row says why)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.reliability.conftest import MSG, MakeGateway
from tests.gateway.reliability.harness import run_fuzz

MAX_BODY = 64 * 1024


@pytest.fixture
def gw(make_gateway: MakeGateway, upstream: FakeUpstream) -> Gateway:
    # small context windows so an overflow is cheap to provoke
    cfg_models = [
        upstream.model_entry(n, timeout=20, max_input_tokens=200, max_output_tokens=1000)
        for n in ("fake-strong", "fake-mid", "fake-cheap")
    ]
    return make_gateway(reliability={"max_body_bytes": MAX_BODY}, model_list=cfg_models)


def _post(gw: Gateway, key: str, content: bytes, **headers: str) -> httpx.Response:
    return httpx.post(gw.base_url + "/v1/chat/completions", content=content, timeout=60,
                      headers={"authorization": f"Bearer {key}",
                               "content-type": "application/json", **headers})


CASES = [
    ("invalid_json", b'{"model": "auto", "messages": [', 400, None, "not valid JSON"),
    ("invalid_utf8", b'{"model": "auto", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
     400, None, "not valid JSON"),
    ("lone_surrogate", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": "\ud800"}]}).encode(), 400, None, "UTF-8"),
    ("not_an_object", b"[1, 2, 3]", 400, None, "JSON object"),
    ("model_wrong_type", json.dumps({"model": 7, "messages": MSG}).encode(), 400, "model",
     "model"),
    ("messages_wrong_type", json.dumps({"model": "auto", "messages": "hi"}).encode(), 400,
     "messages", "messages"),
    ("empty_messages", json.dumps({"model": "auto", "messages": []}).encode(), 400, "messages",
     "non-empty"),
    ("message_not_object", json.dumps({"model": "auto", "messages": ["hi"]}).encode(), 400,
     "messages[0]", "object"),
    ("unknown_role", json.dumps({"model": "auto", "messages": [
        {"role": "wizard", "content": "x"}]}).encode(), 400, "messages[0].role", "role"),
    ("content_wrong_type", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": 5}]}).encode(), 400, "messages[0].content", "content"),
    ("missing_content", json.dumps({"model": "auto", "messages": [
        {"role": "user"}]}).encode(), 400, "messages[0].content", "required"),
    ("max_tokens_wrong_type", json.dumps({"model": "auto", "messages": MSG,
                                          "max_tokens": "many"}).encode(), 400, "max_tokens",
     "max_tokens"),
    ("absurd_max_tokens", json.dumps({"model": "auto", "messages": MSG,
                                      "max_tokens": 10**12}).encode(), 400, "max_tokens",
     "too large"),
    ("absurd_max_tokens_passthrough", json.dumps({"model": "fake-cheap", "messages": MSG,
                                                  "max_tokens": 10**9}).encode(), 400,
     "max_tokens", "too large"),
    # what litellm would fail on in the gateway's own process (and once opened circuits)
    ("untyped_content_part", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": [1]}]}).encode(), 400, "messages[0].content[0]", "type"),
    ("text_part_without_text", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": [{"type": "text"}]}]}).encode(), 400,
     "messages[0].content[0].text", "string"),
    ("image_part_without_url", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}).encode(), 400,
     "messages[0].content[0].image_url.url", "url"),
    ("nan_temperature", (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}], '
     b'"temperature": NaN}'), 400, None, "NaN"),
    ("overflowing_number", (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}],'
     b' "top_p": 1e400}'), 400, None, "infinity"),
    ("nan_cost_weight", (b'{"model": "auto", "messages": [{"role": "user", "content": "x"}], '
     b'"tollgate": {"cost_weight": NaN}}'), 400, None, "NaN"),
    ("tools_not_objects", json.dumps({"model": "auto", "messages": MSG,
                                      "tools": [1]}).encode(), 400, "tools[0].function",
     "name"),
    ("huge_n", json.dumps({"model": "auto", "messages": MSG, "n": 10**16,
                           "max_tokens": 1}).encode(), 400, "n", "too large"),
    ("huge_max_completion_tokens", json.dumps({"model": "auto", "messages": MSG,
                                               "max_tokens": 5,
                                               "max_completion_tokens": 10**12}).encode(),
     400, "max_completion_tokens", "too large"),
    ("deep_nesting", b'{"model": "auto", "messages": [{"role": "user", "content": "x"}], '
     b'"metadata": ' + b'{"a": ' * 5000 + b'1' + b'}' * 5000 + b'}', 400, None, "nested"),
    ("deeper_than_the_parser", b'{"model": "auto", "messages": ' + b'[' * 30_000
     + b']' * 30_000 + b'}', 400, None, "nested"),
    ("context_overflow_every_candidate", json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": "word " * 400}]}).encode(), 400, "messages",
     "context window"),
    ("context_overflow_passthrough", json.dumps({"model": "fake-mid", "messages": [
        {"role": "user", "content": "word " * 400}]}).encode(), 400, "messages",
     "context window"),
]


@pytest.mark.parametrize(("name", "body", "status", "param", "says"), CASES,
                         ids=[c[0] for c in CASES])
def test_bad_input_is_refused_before_anything_happens(
    gw: Gateway, upstream: FakeUpstream, name: str, body: bytes, status: int,
    param: str | None, says: str,
) -> None:
    key, tid = gw.tenant(budget_usd=1.0)
    r = _post(gw, key, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error"
    assert says.lower() in err["message"].lower()
    if param is not None:
        assert err["param"] == param
    assert upstream.requests == []  # nothing forwarded
    ledger = gw.ledger(tid)
    assert ledger["spent_usd"] == 0 and ledger["reserved_usd"] == 0  # nothing reserved
    row = gw.log_row(r.headers["x-tollgate-request-id"])
    assert row["status"] == status and row["attempts"] == [] and row["cost_usd"] == 0


def test_context_overflow_drops_only_the_candidates_it_overflows(
    make_gateway: MakeGateway, upstream: FakeUpstream
) -> None:
    """fake-mid (the usual choice) has a small window; fake-cheap still fits."""
    models = [upstream.model_entry("fake-strong", timeout=20),
              upstream.model_entry("fake-mid", timeout=20, max_input_tokens=50),
              upstream.model_entry("fake-cheap", timeout=20)]
    gw = make_gateway(model_list=models)
    key, _ = gw.tenant()
    r = gw.client(key).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "word " * 100}])
    assert r.headers["x-tollgate-model"] != "fake-mid"
    assert upstream.requests_for("fake-mid") == []


def test_oversized_body_is_413(gw: Gateway, upstream: FakeUpstream) -> None:
    key, tid = gw.tenant(budget_usd=1.0)
    big = json.dumps({"model": "auto", "messages": [
        {"role": "user", "content": "x" * (MAX_BODY + 10)}]}).encode()
    r = _post(gw, key, big)
    assert r.status_code == 413
    assert r.json()["error"]["code"] == "request_too_large"

    def chunks():  # no content-length: the limit applies to the bytes read
        for i in range(0, len(big), 8192):
            yield big[i:i + 8192]

    r = httpx.post(gw.base_url + "/v1/chat/completions", content=chunks(), timeout=60,
                   headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 413
    assert upstream.requests == []
    assert gw.ledger(tid)["reserved_usd"] == 0


def test_schemathesis_fuzz_finds_no_5xx(gw: Gateway) -> None:
    """Every operation of the app's own OpenAPI schema, valid and invalid inputs."""
    key, _ = gw.tenant(budget_usd=5.0)
    from tests.gateway.conftest import ADMIN_KEY

    report = run_fuzz(gw.base_url, key, ADMIN_KEY, max_examples=5)
    assert report["cases"] > 20
    assert report["server_errors"] == 0, report["failures"]
    assert any(s < 300 for s in report["statuses"]), report["statuses"]  # some got through
