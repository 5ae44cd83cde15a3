"""A gateway whose provider calls go to a ``MockTransport`` (gateway/provider/transport.py), as
httpx's MockTransport stands in for the network: no litellm call and no socket to a provider.
The HTTP side is real (the openai SDK against the gateway under uvicorn, a real database)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletion

from gateway.config import settings_from_dict
from gateway.provider.failures import UpstreamFailure
from gateway.provider.transport import MockTransport, ProviderRequest, ReplyBody, TokenUsage
from gateway.serving.forwarding.deployments import over_deployments
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, gateway_config, run_gateway


def _answer(request: ProviderRequest) -> ChatCompletion:
    return ChatCompletion.model_validate({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": int(time.time()),
        "model": "whatever-the-provider-says",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "from the mock transport"}}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16},
    })


class FirstTimesOut:
    """The first request sent times out after it was sent (billable); the rest are answered."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, request: ProviderRequest) -> ReplyBody:
        self.calls += 1
        if self.calls == 1:
            raise UpstreamFailure(504, "timeout", "mock: no answer in time", True, billable=True)
        return _answer(request)


@pytest.fixture
def mocked(db_url: str, upstream: FakeUpstream, test_router: Router, encoder: Encoder,
           tmp_path: Path) -> Iterator[tuple[Gateway, MockTransport]]:
    transport = MockTransport(FirstTimesOut())
    settings = settings_from_dict(gateway_config(upstream, tmp_path, database_url=db_url))
    for gw in run_gateway(settings, test_router, encoder, transport=transport):
        yield gw, transport


def test_a_mock_transport_answers_and_a_billable_timeout_is_charged(
        mocked: tuple[Gateway, MockTransport], upstream: FakeUpstream) -> None:
    gw, transport = mocked
    key, tenant_id = gw.tenant(budget_usd=10.0)
    hits_before = len(upstream.requests)
    raw = gw.client(key).chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": "hello"}], max_tokens=20)
    resp = raw.parse()

    # the seam was sent one typed request per attempt, and nothing went over the network
    assert [r.operation for r in transport.requests] == ["chat", "chat"]
    first, second = transport.requests
    assert first.backend.model_name != second.backend.model_name  # the next candidate
    assert first.params["messages"] == [{"role": "user", "content": "hello"}]
    assert first.params["max_tokens"] == 20 and not first.stream
    assert len(upstream.requests) == hits_before

    # the client has the second backend's answer under that backend's name
    assert resp.choices[0].message.content == "from the mock transport"
    assert resp.model == second.backend.model_name
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["chosen_model"] == second.backend.model_name
    assert (row["prompt_tokens"], row["completion_tokens"]) == (11, 5)
    # the timed-out attempt is in the log with what it cost the tenant: billed by the
    # attempt loop from the failure the transport raised, not through a callback
    timed_out, answered = row["attempts"]
    assert (timed_out["model"], timed_out["status"]) == (first.backend.model_name, 504)
    assert timed_out["charged_usd"] > 0
    assert answered["status"] == 200
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(row["cost_usd"])
    assert row["cost_usd"] > timed_out["charged_usd"]


def test_a_groups_next_deployment_answers_and_the_billable_failure_is_in_the_reply() -> None:
    """``over_deployments`` over a two-deployment group: the deployment that timed out after
    sending is handed back as a billable failure, not reported through a hook."""
    settings = settings_from_dict({"model_list": [
        {"model_name": "pair", "litellm_params": {"model": f"openai/m{i}", "api_key": "sk-x",
                                                  "api_base": "http://127.0.0.1:9/v1"}}
        for i in range(2)]})
    backend = next(b for b in settings.model_list if b.model_name == "pair")
    assert len(backend.deployment_params()) == 2
    transport = MockTransport(FirstTimesOut())
    group = asyncio.run(over_deployments(
        transport, ProviderRequest("chat", backend, {"messages": [], "max_tokens": 5})))
    tried = [r.deployment for r in transport.requests]
    assert sorted(tried) == [0, 1]  # one each, in the weighted random order
    assert group.reply.deployment == tried[1]
    assert [f.kind for f in group.billable_failures] == ["timeout"]
    assert group.reply.usage == TokenUsage(11, 5)
    with pytest.raises(FrozenInstanceError):
        group.reply.deployment = 0  # type: ignore[misc]


def test_the_architecture_page_quotes_the_seam_as_the_code_has_it() -> None:
    """docs/architecture.md's upstream seam section: each quoted line is transport.py's."""
    root = Path(__file__).resolve().parents[3]
    page = (root / "docs/architecture.md").read_text()
    section = page[page.index("## The upstream seam"):]
    start = section.index("```python\n") + len("```python\n")
    quoted = section[start:section.index("\n```", start)].splitlines()
    code = {line.rstrip() for line in
            (root / "gateway/provider/transport.py").read_text().splitlines()}
    assert len(quoted) > 10
    assert [line for line in quoted if line and line not in code] == []
