"""Parameters that carry fees outside token prices (issue 24): priced into the reservation and
the settled cost where litellm's map gives the price, else refused with a 400 naming them
(gateway/serving/budget/fee_params.py says which and why). Through the OpenAI SDK, a real gateway
and the fake upstream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from gateway.config import settings_from_dict
from router_core.encoders.minilm import Encoder
from router_core.env.litellm_env import litellm
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import TIMEOUTS, Gateway, gateway_config, run_gateway
from tests.gateway.router_fixture import PRICES

MSG = [{"role": "user", "content": "What is new today?"}]


def _refused(client: openai.OpenAI, upstream: FakeUpstream, param: str, **extra: object
             ) -> str:
    before = len(upstream.requests)
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="fake-cheap", messages=MSG, max_tokens=16,
                                       **extra)  # type: ignore[call-overload]
    body = exc.value.body
    assert isinstance(body, dict) and body["param"] == param, body
    assert len(upstream.requests) == before  # nothing reached the provider
    return str(body["message"])


def test_web_search_server_tools_and_audio_are_refused(gateway: Gateway,
                                                       upstream: FakeUpstream) -> None:
    """Before: web_search_options was forwarded (litellm makes it Anthropic's web_search tool
    or Gemini's googleSearch) and booked at token prices."""
    client = gateway.client(gateway.tenant(budget_usd=1.0)[0])
    message = _refused(client, upstream, "web_search_options",
                       web_search_options={"search_context_size": "high"})
    assert "billed per query" in message
    message = _refused(client, upstream, "tools[0].type",
                       tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert "billed per use" in message
    _refused(client, upstream, "modalities", modalities=["text", "audio"])
    _refused(client, upstream, "audio", audio={"voice": "alloy", "format": "wav"})


def test_a_service_tier_without_a_known_price_is_refused(gateway: Gateway,
                                                         upstream: FakeUpstream) -> None:
    """fake-cheap is priced in config: no price at the priority tier (before: forwarded and
    booked at the standard price); 'auto' and 'default' are the standard tier."""
    client = gateway.client(gateway.tenant(budget_usd=1.0)[0])
    message = _refused(client, upstream, "service_tier", service_tier="priority")
    assert "no known price" in message and "fake-cheap" in message
    for tier in ("auto", "default"):
        r = client.chat.completions.with_raw_response.create(
            model="fake-cheap", messages=MSG, max_tokens=16, service_tier=tier)
        assert r.status_code == 200
        assert upstream.requests_for("fake-cheap")[-1]["service_tier"] == tier
    with pytest.raises(openai.BadRequestError) as exc:  # a route with no tier price either
        client.chat.completions.create(model="auto", messages=MSG, max_tokens=16,
                                       service_tier="flex")
    assert exc.value.body["param"] == "service_tier"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as exc:  # the Responses API alike
        client.responses.create(model="fake-cheap", input="What is new today?",
                                max_output_tokens=16, service_tier="priority")
    assert exc.value.body["param"] == "service_tier"  # type: ignore[index]


@pytest.fixture(scope="module")
def map_priced(upstream: FakeUpstream, test_router: Router, encoder: Encoder,
               tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    """A gateway with a backend priced from litellm's map (gpt-4o, as its base_model), which
    gives its priority rates; served by the fake upstream's fake-mid."""
    tmp: Path = tmp_path_factory.mktemp("fees")
    entry = {"model_name": "mapped-4o",
             "litellm_params": {"model": "openai/fake-mid", "api_base": upstream.base_url,
                                "api_key": "sk-fake-upstream"},
             "model_info": {"base_model": "gpt-4o", "timeout": 20.0}}
    cfg = gateway_config(upstream, tmp, database_url=f"sqlite:///{tmp / 'fees.db'}")
    cfg["model_list"] = [upstream.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES] + [entry]
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def test_priority_is_reserved_and_settled_at_the_priority_price(
        map_priced: Gateway, upstream: FakeUpstream) -> None:
    client = map_priced.client(map_priced.tenant(budget_usd=1.0)[0])
    r = client.chat.completions.with_raw_response.create(
        model="mapped-4o", messages=MSG, max_tokens=40, service_tier="priority")
    usage = r.parse().usage
    assert usage is not None
    assert upstream.requests_for("fake-mid")[-1]["service_tier"] == "priority"
    priority = sum(litellm.cost_per_token(
        model="gpt-4o", prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens, service_tier="priority"))
    standard = sum(litellm.cost_per_token(
        model="gpt-4o", prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens))
    charged = float(r.headers["x-tollgate-cost-usd"])
    assert charged == pytest.approx(priority, rel=1e-6) and charged > standard * 1.5
    plain = client.chat.completions.with_raw_response.create(
        model="mapped-4o", messages=MSG, max_tokens=40)
    reserved = [map_priced.log_row(x.headers["x-tollgate-request-id"])["reserved_usd"]
                for x in (r, plain)]
    # the same bound at gpt-4o's priority rates: 1.7x the standard ones (4.25e-6 / 2.5e-6
    # in, 1.7e-5 / 1e-5 out; the message differs by the service_tier parameter's bytes)
    assert reserved[0] >= 1.65 * reserved[1], reserved
    with pytest.raises(openai.BadRequestError) as exc:  # gpt-4o has no flex price
        client.chat.completions.create(model="mapped-4o", messages=MSG, max_tokens=40,
                                       service_tier="flex")
    assert exc.value.body["param"] == "service_tier"  # type: ignore[index]
