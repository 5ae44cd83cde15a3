"""Serving with litellm's own token counting off, as ``tollgate serve`` runs
(gateway/cli/serve.py ``no_litellm_token_counting``): the upstream's usage still reaches the
client and the log row unchanged, and a stream whose upstream sends no usage is settled on
Tollgate's own count of what was answered, not on the zeros litellm stands in with."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.cli.serve import no_litellm_token_counting
from gateway.prompt_tokens import count_text_tokens
from router_core.env.litellm_env import litellm
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import PRICES, REPLIES

HELLO = [{"role": "user", "content": "Stream a greeting please"}]


@pytest.fixture
def counting_off() -> Iterator[None]:
    """litellm's process-wide switch, set as serve sets it, restored for the other tests."""
    before = litellm.disable_token_counter
    no_litellm_token_counting()
    try:
        yield
    finally:
        litellm.disable_token_counter = before


def _stream(client: openai.OpenAI, model: str) -> tuple[str, list]:
    with client.chat.completions.with_streaming_response.create(
        model=model, messages=HELLO, stream=True, stream_options={"include_usage": True}
    ) as raw:
        return raw.headers["x-tollgate-request-id"], list(raw.parse())


def test_the_upstreams_usage_passes_through(counting_off: None, gateway: Gateway,
                                            client: openai.OpenAI) -> None:
    assert litellm.disable_token_counter is True
    rid, chunks = _stream(client, "fake-mid")
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == len(REPLIES["fake-mid"].split())
    assert usage.prompt_tokens > 0
    row = gateway.log_row(rid)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (usage.prompt_tokens,
                                                                usage.completion_tokens)


def test_a_stream_without_usage_is_settled_on_the_answer_counted(
    counting_off: None, gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    upstream.set_mode("fake-cheap", "no_usage")
    rid, chunks = _stream(client, "fake-cheap")
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLIES["fake-cheap"]
    row = gateway.log_row(rid)
    counted = count_text_tokens(gateway.settings.backend("fake-cheap"), text)
    assert counted > 0 and row["completion_tokens"] == counted
    pin, pout = PRICES["fake-cheap"]
    assert row["cost_usd"] == pytest.approx(
        (row["prompt_tokens"] * pin + counted * pout) / 1e6)
