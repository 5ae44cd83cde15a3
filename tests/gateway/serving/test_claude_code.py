"""Claude Code through the gateway, unedited (issue 47): its wire format, driven through the
official ``anthropic`` SDK and raw HTTP, against a fake upstream that records what it receives.

The config is a LiteLLM config as a team pastes it: ``anthropic/claude-sonnet-4-5`` with no
``model_info`` at all, so its limits (64000 output tokens) and price come from litellm's map;
``anthropic/claude-opus-4-1-20250805``, which litellm 1.110.2's map answers at 0/0 (no price);
an Anthropic-wire model the operator prices at 0 on purpose; and an OpenAI-wire backend that
litellm bridges to (``message_start`` must still carry the input tokens).

Checked, as Claude Code's gateway protocol asks (https://code.claude.com/docs/en/
llm-gateway-protocol): ``/v1/messages?beta=true``; ``anthropic-version`` and ``anthropic-beta``
reach the upstream; ``max_tokens: 32000``; ``context_management`` forwarded (a clearing edit)
or refused naming the edit (compaction); tools and tool results; ``cache_control`` blocks;
``GET /v1/models`` in Anthropic's shape; 403 ``permission_error`` for a model the key may not
use; 503 ``backend_unpriced`` for a backend litellm prices at 0/0.

Real parts: uvicorn, the anthropic SDK, httpx, litellm's anthropic_messages over HTTP to the
fake upstream's /v1/messages (and its bridge to /v1/responses), SQLite.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from gateway.cli.startup import unpriced_warnings
from gateway.config import settings_from_dict
from gateway.provider.deployments import attempt_timeout
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

SONNET = "claude-sonnet-4-5"  # litellm's map: $3 / $15 per 1M tokens, 64000 output tokens
OPUS_41 = "claude-opus-4-1-20250805"  # litellm 1.110.2's map: 0/0, i.e. no price
FREE = "claude-house"  # the operator's own model, priced at 0 in the config
SONNET_PRICE = (3e-6, 15e-6)
BETAS = "interleaved-thinking-2025-05-14,fine-grained-tool-streaming-2025-05-14"
VERSION = "2023-06-01"


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends += [FakeBackend(n, reply=f"an answer from {n} in a few words")
                 for n in (SONNET, OPUS_41, FREE)]
    with FakeUpstream(backends) as u:
        yield u


def _pasted(up: FakeUpstream, model: str, **model_info: Any) -> dict:
    """A LiteLLM model_list entry as pasted: the provider's model, its key, nothing else."""
    entry: dict[str, Any] = {"model_name": model, "litellm_params": {
        "model": f"anthropic/{model}", "api_base": up.base_url.removesuffix("/v1"),
        "api_key": "sk-ant-fake"}}
    if model_info:
        entry["model_info"] = model_info
    return entry


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('claude_code') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] += [_pasted(up, SONNET), _pasted(up, OPUS_41),
                          _pasted(up, FREE, input_cost_per_token=0, output_cost_per_token=0)]
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def client(gw: Gateway, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.base_url, api_key=key, max_retries=0)


def _sent(up: FakeUpstream, model: str) -> tuple[dict, dict]:
    """The last body and headers the upstream received for ``model``."""
    pairs = [(b, h) for b, h in zip(up.requests, up.headers, strict=True)
             if b.get("model") == model]
    assert pairs, f"nothing reached {model}"
    return pairs[-1]


def test_max_tokens_32000_on_a_pasted_config_with_no_model_info(
        gw: Gateway, up: FakeUpstream) -> None:
    """Claude Code's ``max_tokens: 32000`` is served on Sonnet with no limits in the config
    (litellm's map says 64000), reserved and settled at the map's price."""
    backend = gw.settings.backend(SONNET)
    assert backend is not None and backend.model_info.max_output_tokens == 64000
    assert backend.model_info.max_input_tokens == 200000
    key, tenant_id = gw.tenant(budget_usd=2.0)
    # a timeout of its own: the SDK refuses a non-streamed 32000 without one (Claude Code streams)
    raw = client(gw, key).with_options(timeout=120).messages.with_raw_response.create(
        model=SONNET, max_tokens=32000, messages=[{"role": "user", "content": "hello"}])
    msg = raw.parse()
    assert msg.model == SONNET and msg.content[0].text.startswith("an answer from")
    body, _ = _sent(up, SONNET)
    assert body["max_tokens"] == 32000
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    expected = (msg.usage.input_tokens * SONNET_PRICE[0]
                + msg.usage.output_tokens * SONNET_PRICE[1])
    assert row["cost_usd"] == pytest.approx(expected, rel=1e-6) and row["cost_usd"] > 0
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(expected, rel=1e-6)


def test_a_long_answer_gets_a_timeout_sized_for_it(gw: Gateway) -> None:
    """No timeout in the config: a non-streamed attempt waits 60 s plus the anthropic SDK's
    3600 s per 128000 tokens; a stream's timeout stays per chunk; a config's own is kept."""
    sonnet = gw.settings.backend(SONNET)
    mid = gw.settings.backend("fake-mid")  # sets timeout: 2.0 in its model_info
    assert sonnet is not None and mid is not None
    assert attempt_timeout(sonnet, sonnet.litellm_params, cap=32000) == pytest.approx(960.0)
    assert attempt_timeout(sonnet, sonnet.litellm_params, True, 32000) == 60.0
    assert attempt_timeout(mid, mid.litellm_params, cap=32000) == 2.0


def test_beta_query_and_anthropic_headers_reach_the_upstream(
        gw: Gateway, up: FakeUpstream) -> None:
    """Claude Code posts to ``/v1/messages?beta=true`` with ``anthropic-beta``: both headers
    reach the Anthropic upstream with every beta the client sent."""
    key, _ = gw.tenant(budget_usd=2.0)
    r = httpx.post(gw.base_url + "/v1/messages?beta=true", timeout=30, json={
        "model": SONNET, "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-api-key": key, "anthropic-version": VERSION, "anthropic-beta": BETAS})
    assert r.status_code == 200, r.text
    _, headers = _sent(up, SONNET)
    assert headers["anthropic-version"] == VERSION
    assert set(headers["anthropic-beta"].split(",")) == set(BETAS.split(","))
    # the SDK's beta client: betas as a header, the ?beta=true query
    c = client(gw, key)
    msg = c.beta.messages.create(model=SONNET, max_tokens=50, betas=["context-1m-2025-08-07"],
                                 messages=[{"role": "user", "content": "hi"}])
    assert msg.model == SONNET
    _, headers = _sent(up, SONNET)
    assert "context-1m-2025-08-07" in headers["anthropic-beta"].split(",")


def test_no_anthropic_header_reaches_a_bridged_backend_and_its_start_has_input_tokens(
        gw: Gateway, up: FakeUpstream) -> None:
    """An OpenAI-wire backend (litellm's bridge) gets no anthropic-* header; the stream's
    ``message_start`` still tells the input tokens, and the bill is the reported usage."""
    key, _ = gw.tenant(budget_usd=1.0)
    with client(gw, key).messages.stream(
            model="fake-cheap", max_tokens=50, extra_headers={"anthropic-beta": BETAS},
            messages=[{"role": "user", "content": "Stream me a reply"}]) as stream:
        events = list(stream)
        rid = stream.response.headers["x-tollgate-request-id"]
    start = next(e for e in events if e.type == "message_start")
    assert start.message.usage.input_tokens > 0
    _, headers = _sent(up, "fake-cheap")
    assert "anthropic-beta" not in headers and "anthropic-version" not in headers
    row = gw.log_row(rid)
    assert row["status"] == 200 and row["completion_tokens"] == len(REPLIES["fake-cheap"].split())


def test_context_management_clearing_is_forwarded_and_compaction_refused_by_name(
        gw: Gateway, up: FakeUpstream) -> None:
    key, tenant_id = gw.tenant(budget_usd=2.0)
    edits = {"edits": [{"type": "clear_tool_uses_20250919",
                        "trigger": {"type": "input_tokens", "value": 100000},
                        "keep": {"type": "tool_uses", "value": 3}}]}
    msg = client(gw, key).beta.messages.create(
        model=SONNET, max_tokens=50, betas=["context-management-2025-06-27"],
        context_management=edits, messages=[{"role": "user", "content": "hi"}])
    assert msg.model == SONNET
    body, headers = _sent(up, SONNET)
    assert body["context_management"] == edits
    assert "context-management-2025-06-27" in headers["anthropic-beta"]
    spent = gw.settled(tenant_id)["spent_usd"]
    with pytest.raises(anthropic.BadRequestError) as e:
        client(gw, key).messages.create(
            model=SONNET, max_tokens=50, messages=[{"role": "user", "content": "hi"}],
            extra_body={"context_management": {"edits": [{"type": "compact_20260112"}]}})
    message = e.value.body["error"]["message"]
    assert "context_management.edits[0].type" in message and "compact_20260112" in message
    assert gw.settled(tenant_id)["spent_usd"] == spent  # refused before anything was held


def test_an_agent_turn_with_tools_tool_results_and_cache_control_as_claude_code_sends_it(
        gw: Gateway, up: FakeUpstream) -> None:
    """A Claude Code turn: system blocks with ``cache_control``, tools, a tool_use and its
    tool_result (nested content), metadata.user_id, streamed; the upstream gets it as sent."""
    key, _ = gw.tenant(budget_usd=2.0)
    system = [{"type": "text", "text": "You are Claude Code."},
              {"type": "text", "text": "Project rules: be brief.",
               "cache_control": {"type": "ephemeral"}}]
    tools = [{"name": "Bash", "description": "Run a shell command",
              "input_schema": {"type": "object",
                               "properties": {"command": {"type": "string"}},
                               "required": ["command"]}}]
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "List the files"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01", "name": "Bash",
                                           "input": {"command": "ls"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01",
             "content": [{"type": "text", "text": "README.md\nsrc"}]},
            {"type": "text", "text": "Which is the docs?",
             "cache_control": {"type": "ephemeral"}}]},
    ]
    with client(gw, key).messages.stream(
            model=SONNET, max_tokens=32000, system=system, tools=tools, messages=messages,
            metadata={"user_id": "dev-alice"},
            extra_headers={"anthropic-beta": BETAS, "x-claude-code-session-id": "s-1"}
    ) as stream:
        final = stream.get_final_message()
        rid = stream.response.headers["x-tollgate-request-id"]
    assert final.model == SONNET and final.stop_reason == "end_turn"
    body, headers = _sent(up, SONNET)
    assert body["system"] == system and body["tools"] == tools
    assert body["messages"] == messages and body["metadata"] == {"user_id": "dev-alice"}
    assert body["max_tokens"] == 32000 and body["stream"] is True
    assert set(headers["anthropic-beta"].split(",")) >= set(BETAS.split(","))
    row = gw.log_row(rid)
    assert row["status"] == 200 and row["cost_usd"] > 0


def test_a_model_litellm_prices_at_zero_is_refused_not_billed_at_zero(
        gw: Gateway, up: FakeUpstream) -> None:
    """0/0 from litellm's map is no price: 503 backend_unpriced naming the fixes, nothing sent
    upstream; a model the config prices at 0 is served at $0 (the operator said so)."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    calls = len(up.requests_for(OPUS_41))
    with pytest.raises(anthropic.APIStatusError) as e:
        client(gw, key).messages.create(model=OPUS_41, max_tokens=50,
                                        messages=[{"role": "user", "content": "hi"}])
    assert e.value.status_code == 503
    message = e.value.body["error"]["message"]
    assert "backend_unpriced" in message and "price_like" in message and "model_info" in message
    assert len(up.requests_for(OPUS_41)) == calls
    raw = client(gw, key).messages.with_raw_response.create(
        model=FREE, max_tokens=50, messages=[{"role": "user", "content": "hi"}])
    assert raw.parse().model == FREE and float(raw.headers["x-tollgate-cost-usd"]) == 0.0
    assert gw.settled(tenant_id)["spent_usd"] == 0.0
    warned = unpriced_warnings(gw.app.state.ctx.pool.current)  # the startup block's warning
    assert len(warned) == 1 and repr(OPUS_41) in warned[0] and "price_like" in warned[0]


def test_models_in_anthropics_shape_when_anthropic_version_is_sent(gw: Gateway) -> None:
    """Claude Code's discovery: ``GET /v1/models?limit=1000`` with ``anthropic-version``."""
    key, _ = gw.tenant()
    headers = {"x-api-key": key, "anthropic-version": VERSION}
    r = httpx.get(gw.base_url + "/v1/models?limit=1000", headers=headers, timeout=30)
    assert r.status_code == 200, r.text
    page = r.json()
    ids = [m["id"] for m in page["data"]]
    assert {SONNET, "auto", "fake-cheap"} <= set(ids)
    assert all(m["type"] == "model" and m["display_name"] and m["created_at"].endswith("Z")
               for m in page["data"])
    assert page["has_more"] is False and page["first_id"] == ids[0]
    assert page["last_id"] == ids[-1]
    two = httpx.get(gw.base_url + "/v1/models?limit=2", headers=headers, timeout=30).json()
    assert [m["id"] for m in two["data"]] == ids[:2] and two["has_more"] is True
    after = httpx.get(gw.base_url + "/v1/models", params={"limit": 2, "after_id": ids[1]},
                      headers=headers, timeout=30).json()
    assert [m["id"] for m in after["data"]] == ids[2:4]
    listed = [m.id for m in client(gw, key).models.list(limit=1000)]  # the SDK reads it
    assert listed == ids
    one = client(gw, key).models.retrieve(SONNET)  # Anthropic's models.retrieve
    assert one.id == SONNET and one.type == "model"
    with pytest.raises(anthropic.NotFoundError):
        client(gw, key).models.retrieve("claude-nope")
    bad = httpx.get(gw.base_url + "/v1/models?limit=0", headers=headers, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    # without anthropic-version: OpenAI's shape, as before
    openai_shape = httpx.get(gw.base_url + "/v1/models", timeout=30,
                             headers={"authorization": f"Bearer {key}"}).json()
    assert openai_shape["object"] == "list" and "has_more" not in openai_shape


def test_a_model_the_key_may_not_use_is_403_permission_error(gw: Gateway) -> None:
    """403 (Claude Code takes a 401 as a bad key and asks the developer to log in again)."""
    _, tid = gw.tenant()
    made = gw.admin("POST", "/key/generate", json={"team_id": tid, "models": ["fake-cheap"]})
    assert made.status_code == 200, made.text
    key = made.json()["key"]
    with pytest.raises(anthropic.PermissionDeniedError) as e:
        client(gw, key).messages.create(model=SONNET, max_tokens=10,
                                        messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "permission_error"
    with pytest.raises(anthropic.AuthenticationError) as e:  # a bad key is still a 401
        client(gw, "sk-not-a-key").messages.create(
            model=SONNET, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    with pytest.raises(openai.PermissionDeniedError) as oe:  # OpenAI's wire: 403 too
        gw.client(key).chat.completions.create(
            model=SONNET, max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert oe.value.body["type"] == "permission_denied"  # type: ignore[index]


def _nested_result(depth: int) -> dict:
    """A tool_result whose content holds a tool_result ... ``depth`` levels deep."""
    block: dict = {"type": "text", "text": "x"}
    for _ in range(depth):
        block = {"type": "tool_result", "tool_use_id": "toolu_01", "content": [block]}
    return block


def test_messages_obey_the_content_part_limit_nested_results_and_system_included(
        gw: Gateway, up: FakeUpstream) -> None:
    """Issue 48.12: /v1/messages counts content parts as chat does (``max_content_parts``,
    4096), each block a tool_result nests and each system block included; refused with
    Anthropic's 400 before anything is sent; a real agent turn still passes."""
    key, _ = gw.tenant(budget_usd=2.0)
    c = client(gw, key)
    calls = len(up.requests_for(SONNET))
    nested = [{"role": "user", "content": [_nested_result(12) for _ in range(400)]}]  # 5,200
    system = [{"type": "text", "text": "s"} for _ in range(5000)]
    for body in ({"messages": nested}, {"system": system,
                                        "messages": [{"role": "user", "content": "hi"}]}):
        with pytest.raises(anthropic.BadRequestError) as e:
            c.messages.create(model=SONNET, max_tokens=10, **body)
        assert "content parts in all" in e.value.body["error"]["message"]
    assert len(up.requests_for(SONNET)) == calls  # nothing reached the upstream
    ok = c.messages.create(model=SONNET, max_tokens=10, system=system[:100],
                           messages=[{"role": "user", "content": [_nested_result(3)]}])
    assert ok.model == SONNET


def _readme_bodies() -> list[tuple[str, dict]]:
    """The (path, JSON body) of each ``curl`` in the README's Claude Code section."""
    text = (Path(__file__).resolve().parents[3] / "README.md").read_text()
    section = text.split("## Use it from Claude Code", 1)[1].split("\n## ", 1)[0]
    return [(m.group(1), json.loads(m.group(2))) for m in re.finditer(
        r"curl -s \$TG(/\S+) .*?-d '(\{.*?\})'", section, re.DOTALL)]


def test_the_readmes_claude_code_steps_run_as_written(gw: Gateway, up: FakeUpstream) -> None:
    """The README's section: a team with a budget, a key per developer with its own budget,
    then Claude Code's requests with that key as ``ANTHROPIC_AUTH_TOKEN`` (Bearer), on a
    backend name and on ``auto``; the developer's key stops at its own budget."""
    steps = _readme_bodies()
    assert [p for p, _ in steps] == ["/team/new", "/key/generate"]
    team = dict(steps[0][1], team_id=f"platform-{len(up.requests)}")  # unique per run
    made = gw.admin("POST", "/team/new", json=team)
    assert made.status_code == 200, made.text
    r = gw.admin("POST", "/key/generate", json=dict(steps[1][1], team_id=team["team_id"]))
    assert r.status_code == 200, r.text
    key = r.json()["key"]
    assert r.json()["max_budget"] == steps[1][1]["max_budget"]
    claude = anthropic.Anthropic(base_url=gw.base_url, auth_token=key, max_retries=0)
    # auto's candidates here are the fake backends (4096 output tokens at most): a smaller cap
    for model, cap in ((SONNET, 32000), ("auto", 1024)):
        with claude.messages.stream(model=model, max_tokens=cap,
                                    messages=[{"role": "user", "content": "hello"}]) as s:
            assert s.get_final_message().content
    info = gw.admin("GET", "/key/info", params={"key": key}).json()
    assert info["info"]["spend"] > 0 and info["info"]["user_id"] == "alice"
