"""POST /v1/messages through a real gateway with the official ``anthropic`` SDK: a backend
name is a passthrough (to an Anthropic-wire backend, and to an OpenAI-wire one through
litellm's bridge), ``auto`` is routed like chat from the same text; non-streamed and streamed
(Anthropic's events), budgeted at max_tokens, settled at the reported usage before
``message_stop``, logged and explained; refusals in Anthropic's error shape.

Real parts: uvicorn, the anthropic SDK (x-api-key), litellm's anthropic_messages over HTTP to
the fake upstream's /v1/messages (Anthropic's wire) and /v1/responses (OpenAI's, litellm's
bridge for an openai/ model), SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import httpx
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import TIMEOUTS, Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

CLAUDE = "fake-claude"  # reached on Anthropic's own wire (litellm_params.model anthropic/...)
CLAUDE_PRICE = (3.0, 15.0)
CLAUDE_REPLY = "a native anthropic answer of eight words here"
CACHE_READ = 0.3e-6  # USD per cached input token read: 0.1x the input price, as Anthropic's


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends.append(FakeBackend(CLAUDE, reply=CLAUDE_REPLY, input_per_m=CLAUDE_PRICE[0],
                                output_per_m=CLAUDE_PRICE[1]))
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('messages') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] = [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
    claude = up.model_entry(CLAUDE, cache_read_input_token_cost=CACHE_READ)
    claude["litellm_params"].update(model=f"anthropic/{CLAUDE}",
                                    api_base=up.base_url.removesuffix("/v1"))
    cfg["model_list"].append(claude)
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def client(gw: Gateway, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url, api_key=key, max_retries=0)


def cost(model: str, prompt: int, completion: int) -> float:
    pin, pout = CLAUDE_PRICE if model == CLAUDE else PRICES[model]
    return (prompt * pin + completion * pout) / 1e6


@pytest.mark.parametrize("model", [CLAUDE, "fake-cheap"])
def test_a_named_backend_answers_settled_and_logged(
    gw: Gateway, up: FakeUpstream, model: str
) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    raw = client(gw, key).messages.with_raw_response.create(
        model=model, max_tokens=50, system="Answer briefly.",
        messages=[{"role": "user", "content": [{"type": "text", "text": "Say hello"}]}])
    msg = raw.parse()
    reply = CLAUDE_REPLY if model == CLAUDE else REPLIES[model]
    assert msg.type == "message" and msg.role == "assistant" and msg.model == model
    assert msg.content[0].text == reply and msg.stop_reason == "end_turn"
    assert msg.usage.input_tokens == 4  # words of system + the user's text
    n_out = len(reply.split())
    assert msg.usage.output_tokens == n_out
    charged = float(raw.headers["x-tollgate-cost-usd"])
    assert charged == pytest.approx(cost(model, 4, n_out))
    sent = up.requests_for(model)[-1]
    if model == CLAUDE:  # Anthropic's own wire: the body as the client sent it
        assert sent["max_tokens"] == 50 and sent["system"] == "Answer briefly."
    else:  # litellm's bridge to OpenAI's Responses API
        assert sent["max_output_tokens"] == 50 and "input" in sent
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["chosen_model"] == model and row["reason"] == "passthrough"
    assert row["prompt_tokens"] == 4 and row["completion_tokens"] == n_out
    assert row["reserved_usd"] >= cost(model, 0, 50)  # max_tokens at the output price
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(charged, abs=2e-9)


@pytest.mark.parametrize("model", [CLAUDE, "fake-cheap"])
def test_a_stream_is_anthropics_events_settled_before_message_stop(
    gw: Gateway, up: FakeUpstream, model: str
) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    with client(gw, key).messages.stream(
            model=model, max_tokens=100,
            messages=[{"role": "user", "content": "Stream me a reply"}]) as stream:
        kinds = [e.type for e in stream]
        final = stream.get_final_message()
        rid = stream.response.headers["x-tollgate-request-id"]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
    assert "content_block_delta" in kinds and "message_delta" in kinds
    reply = CLAUDE_REPLY if model == CLAUDE else REPLIES[model]
    assert final.content[0].text == reply and final.model == model
    assert up.requests_for(model)[-1].get("stream") is True  # streamed upstream too
    n_out = len(reply.split())
    row = gw.log_row(rid)
    assert row["stream"] is True and row["status"] == 200 and row["chosen_model"] == model
    assert row["prompt_tokens"] == 4 and row["completion_tokens"] == n_out
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(cost(model, 4, n_out), abs=2e-9)


def test_the_spend_is_settled_before_the_client_has_message_stop(gw: Gateway) -> None:
    """Read the raw SSE: at message_stop the ledger has the charge and nothing reserved."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    body = {"model": CLAUDE, "max_tokens": 40, "stream": True,
            "messages": [{"role": "user", "content": "hello there"}]}
    with httpx.stream("POST", gw.base_url + "/v1/messages", json=body, timeout=30,
                      headers={"x-api-key": key}) as r:
        for line in r.iter_lines():
            if line == "event: message_stop":
                ledger = gw.ledger(tenant_id)
                assert ledger["reserved_usd"] == 0
                assert ledger["spent_usd"] == pytest.approx(
                    cost(CLAUDE, 2, len(CLAUDE_REPLY.split())), abs=2e-9)
                break
        else:
            raise AssertionError("no message_stop")


def test_auto_is_routed_like_chat_from_the_same_text_and_explained(gw: Gateway) -> None:
    key, _ = gw.tenant()
    text = "Prove that there are infinitely many primes."
    chat = gw.client(key).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "system", "content": "Be rigorous."},
                                {"role": "user", "content": text}])
    raw = client(gw, key).messages.with_raw_response.create(
        model="auto", max_tokens=200, system="Be rigorous.",
        messages=[{"role": "user", "content": text}])
    msg = raw.parse()
    assert raw.headers["x-tollgate-model"] == chat.headers["x-tollgate-model"] == msg.model
    rid = raw.headers["x-tollgate-request-id"]
    row, chat_row = gw.log_row(rid), gw.log_row(chat.headers["x-tollgate-request-id"])
    assert row["route"] == "auto" and row["router_version"] == chat_row["router_version"]
    assert [c["backend"] for c in row["candidates"]] == [
        c["backend"] for c in chat_row["candidates"]]
    assert row["cost_usd"] > 0 and row["status"] == 200
    explained = httpx.get(f"{gw.base_url}/v1/routing/{rid}", timeout=30,
                          headers={"authorization": f"Bearer {key}"})
    assert explained.status_code == 200, explained.text
    doc = explained.json()
    assert doc["routed"] is True and doc["answered_by"] == msg.model
    assert doc["decision"]["winner"] == row["candidates"][0]["backend"]


def test_refusals_are_in_anthropics_error_shape_and_the_budget_holds(gw: Gateway) -> None:
    key, tenant_id = gw.tenant(budget_usd=1e-9)
    c = client(gw, key)
    for kwargs, where in (
            ({"messages": []}, "messages"),
            ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
            ({"messages": [{"role": "user", "content": "x"}],
              "extra_body": {"temperature": 1.5}}, "temperature"),
            ({"messages": [{"role": "user", "content": "x"}],
              "tools": [{"type": "web_search_20250305", "name": "web_search"}]},
             "tools[0].type"),
            ({"messages": [{"role": "user", "content": "x"}], "extra_body": {"api_base": "h"}},
             "api_base"),
            ({"messages": [{"role": "user", "content": "x"}],
              "metadata": {"user_id": "u", "model_group": "x"}}, "metadata"),
            ({"messages": [{"role": "user", "content": [
                {"type": "document", "source": {"type": "base64", "data": "JVBERi0=",
                                                "media_type": "application/pdf"}}]}]},
             "messages[0].content[0].source")):
        with pytest.raises(anthropic.BadRequestError) as e:
            c.messages.create(model="fake-cheap", max_tokens=10, **kwargs)
        assert e.value.body["type"] == "error"
        assert e.value.body["error"]["type"] == "invalid_request_error"
        assert where in e.value.body["error"]["message"]
    with pytest.raises(anthropic.RateLimitError) as e:  # the budget cannot pay max_tokens
        c.messages.create(model="fake-cheap", max_tokens=100,
                          messages=[{"role": "user", "content": "too dear"}])
    assert e.value.body["error"]["type"] == "rate_limit_error"
    assert "budget_exceeded" in e.value.body["error"]["message"]
    assert gw.settled(tenant_id)["spent_usd"] == 0
    with pytest.raises(anthropic.NotFoundError) as e:
        c.messages.create(model="nope", max_tokens=10,
                          messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "not_found_error"
    with pytest.raises(anthropic.AuthenticationError) as e:
        client(gw, "sk-wrong").messages.create(model="fake-cheap", max_tokens=10,
                                               messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    r = httpx.post(gw.base_url + "/v1/messages", headers={"x-api-key": key}, timeout=30,
                   json={"model": "fake-cheap", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 400 and "max_tokens" in r.json()["error"]["message"]


def test_an_upstream_failure_falls_back_and_a_last_failure_is_an_api_error(
    gw: Gateway, up: FakeUpstream
) -> None:
    key, _ = gw.tenant()
    c = client(gw, key)
    up.set_mode(CLAUDE, "error_500", times=1)
    raw = c.messages.with_raw_response.create(
        model=CLAUDE, max_tokens=20, messages=[{"role": "user", "content": "hello"}],
        extra_body={"fallbacks": ["fake-mid"]})
    assert raw.parse().model == "fake-mid"
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        (CLAUDE, 500), ("fake-mid", 200)]
    up.set_mode(CLAUDE, "error_500", times=1)
    with pytest.raises(anthropic.APIStatusError) as e:
        c.messages.create(model=CLAUDE, max_tokens=20,
                          messages=[{"role": "user", "content": "hello"}])
    assert e.value.status_code == 502 and e.value.body["error"]["type"] == "api_error"


def test_auto_streamed_is_routed_settled_and_logged(gw: Gateway) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    with client(gw, key).messages.stream(
            model="auto", max_tokens=200, system="Be rigorous.",
            messages=[{"role": "user", "content": "Prove that 2 is prime."}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
        rid = stream.response.headers["x-tollgate-request-id"]
    row = gw.log_row(rid)
    assert row["route"] == "auto" and row["stream"] is True and row["status"] == 200
    assert final.model == row["chosen_model"] and text == final.content[0].text
    assert row["completion_tokens"] == len(text.split())
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(row["cost_usd"], abs=2e-9)
    assert row["cost_usd"] == pytest.approx(
        cost(row["chosen_model"], row["prompt_tokens"], row["completion_tokens"]))


@pytest.mark.parametrize("model", [CLAUDE, "fake-cheap"])
def test_an_agent_turn_with_tools_and_results_is_served_and_bounded(
    gw: Gateway, up: FakeUpstream, model: str
) -> None:
    """What Claude Code sends: system blocks with cache_control, client tools, a tool_use /
    tool_result history, streamed; served on both wires and reserved over all of it."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    tools = [{"name": "read_file", "description": "Read a file",
              "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
    messages = [
        {"role": "user", "content": "What is in notes.txt?"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "read_file",
             "input": {"path": "notes.txt"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "buy milk"}]}]},
    ]
    system = [{"type": "text", "text": "You are a coding agent.",
               "cache_control": {"type": "ephemeral"}}]
    with client(gw, key).messages.stream(model=model, max_tokens=64, system=system,
                                         tools=tools, messages=messages,
                                         metadata={"user_id": "dev-1"}) as stream:
        final = stream.get_final_message()
        rid = stream.response.headers["x-tollgate-request-id"]
    assert final.model == model and final.content
    row = gw.log_row(rid)
    assert row["status"] == 200 and row["chosen_model"] == model
    assert row["cost_usd"] > 0 and row["cost_usd"] <= row["reserved_usd"]
    # the reservation bounds the tools' preamble and every block's bytes (pricing.py)
    assert row["reserved_usd"] >= cost(model, 530 + len(json.dumps(messages)), 64)
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(row["cost_usd"], abs=2e-9)
    if model == CLAUDE:  # Anthropic's wire: the blocks as the client sent them
        sent = up.requests_for(CLAUDE)[-1]
        assert sent["messages"][1]["content"][0]["type"] == "tool_use"
        assert sent["tools"][0]["name"] == "read_file"


def test_a_body_over_the_size_limit_is_anthropics_413(gw: Gateway) -> None:
    key, _ = gw.tenant()
    big = "x" * (gw.settings.reliability.max_body_bytes + 1)
    with pytest.raises(anthropic.APIStatusError) as e:
        client(gw, key).messages.create(model="fake-cheap", max_tokens=10,
                                        messages=[{"role": "user", "content": big}])
    assert e.value.status_code == 413
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "request_too_large"


@pytest.mark.parametrize("stream", [False, True])
def test_cache_reads_are_charged_at_the_cache_read_price(gw: Gateway, stream: bool) -> None:
    """Anthropic bills a cache read at 0.1x the input price: the tenant is charged that, not
    the full input price (the fake upstream reports a cached system block as cache reads)."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    system = [{"type": "text", "text": "one two three four five six seven eight nine ten",
               "cache_control": {"type": "ephemeral"}}]
    args = {"model": CLAUDE, "max_tokens": 50, "system": system,
            "messages": [{"role": "user", "content": "Say hello"}]}
    if stream:
        with client(gw, key).messages.stream(**args) as s:
            msg = s.get_final_message()
            rid = s.response.headers["x-tollgate-request-id"]
    else:
        raw = client(gw, key).messages.with_raw_response.create(**args)
        msg, rid = raw.parse(), raw.headers["x-tollgate-request-id"]
    assert msg.usage.cache_read_input_tokens == 10 and msg.usage.input_tokens == 2
    n_out = len(CLAUDE_REPLY.split())
    expected = (2 * CLAUDE_PRICE[0] / 1e6 + 10 * CACHE_READ + n_out * CLAUDE_PRICE[1] / 1e6)
    row = gw.log_row(rid)
    assert row["prompt_tokens"] == 3  # 2 + 10 reads at a tenth of the input price
    assert row["cost_usd"] == pytest.approx(expected)
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(expected, abs=2e-9)


def test_count_tokens_counts_without_calling_or_charging(gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=1e-9)
    calls = len(up.requests)
    c = client(gw, key)
    short = c.messages.count_tokens(model=CLAUDE, messages=[{"role": "user", "content": "hi"}])
    long = c.messages.count_tokens(model="auto", system="Be brief.", messages=[
        {"role": "user", "content": "Count the tokens of this longer question, please."}])
    assert 0 < short.input_tokens < long.input_tokens
    assert len(up.requests) == calls  # nothing sent upstream
    assert gw.settled(tenant_id)["spent_usd"] == 0
    with pytest.raises(anthropic.NotFoundError):
        c.messages.count_tokens(model="nope", messages=[{"role": "user", "content": "x"}])


def test_a_native_stream_split_inside_its_frames_is_relayed_whole(
    gw: Gateway, up: FakeUpstream
) -> None:
    """litellm relays Anthropic's bytes as the socket gives them: frames (and a character)
    split across chunks still reach the client as Anthropic's events, settled."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    b = up.backends[CLAUDE]
    b.split_frames, b.reply = True, "déjà vu, encore"
    try:
        with client(gw, key).messages.stream(
                model=CLAUDE, max_tokens=20,
                messages=[{"role": "user", "content": "again"}]) as stream:
            text = "".join(stream.text_stream)
            rid = stream.response.headers["x-tollgate-request-id"]
    finally:
        b.split_frames, b.reply = False, CLAUDE_REPLY
    assert text == "déjà vu, encore"
    row = gw.log_row(rid)
    assert row["status"] == 200 and row["completion_tokens"] == 3
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(cost(CLAUDE, 1, 3), abs=2e-9)


def test_the_tenants_rate_limit_holds_on_messages_in_anthropics_shape(gw: Gateway) -> None:
    key, _ = gw.tenant(policy={"requests_per_minute": 2})
    c = client(gw, key)
    args = {"model": "fake-cheap", "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}]}
    codes = []
    for _ in range(4):
        try:
            c.messages.create(**args)
            codes.append(200)
        except anthropic.RateLimitError as e:
            assert e.body["error"]["type"] == "rate_limit_error"
            assert e.response.headers.get("retry-after")
            codes.append(429)
    assert codes.count(200) >= 2 and codes[-1] == 429
