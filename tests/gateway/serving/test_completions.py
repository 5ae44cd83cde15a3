"""Non-streaming chat completions through the gateway with the official openai SDK."""

from __future__ import annotations

import openai

from tests.fakes.upstream import count_prompt_tokens
from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import PRICES, REPLIES, VERSION

HELLO = [{"role": "user", "content": "Say hello to the gateway"}]


def expected_cost(model: str, prompt_tokens: int, completion_tokens: int) -> float:
    pin, pout = PRICES[model]
    return prompt_tokens * pin / 1e6 + completion_tokens * pout / 1e6


def test_routed_request_answers_openai_shaped_with_headers_and_log_row(
    gateway: Gateway, client: openai.OpenAI, tenant: tuple[str, str]
) -> None:
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=HELLO)
    resp = raw.parse()
    # λ = 0.5 picks fake-mid (see router_fixture); the response names the backend
    assert resp.model == "fake-mid"
    assert resp.choices[0].message.content == REPLIES["fake-mid"]
    assert resp.object == "chat.completion"
    assert resp.usage.prompt_tokens == count_prompt_tokens({"messages": HELLO})
    h = raw.headers
    rid = h["x-tollgate-request-id"]
    assert rid.startswith("tg-")
    assert h["x-tollgate-model"] == "fake-mid"
    assert h["x-tollgate-router-version"] == VERSION
    cost = expected_cost("fake-mid", resp.usage.prompt_tokens, resp.usage.completion_tokens)
    assert abs(float(h["x-tollgate-cost-usd"]) - cost) < 1e-12

    row = gateway.log_row(rid)
    assert row["tenant_id"] == tenant[1]
    assert row["route"] == "auto" and row["lam"] == 0.5
    assert row["router_version"] == VERSION
    assert row["chosen_model"] == "fake-mid"
    assert [c["backend"] for c in row["candidates"]] == ["fake-mid", "fake-cheap", "fake-strong"]
    for c in row["candidates"]:
        assert {"similarity", "quality", "cost", "cost_usd", "score"} <= set(c)
    assert row["candidates"][0]["score"] >= max(c["score"] for c in row["candidates"]) - 0.02
    assert row["equivalent"] == ["fake-mid"]
    assert row["reason"]
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [("fake-mid", 200)]
    assert row["prompt_tokens"] == resp.usage.prompt_tokens
    assert row["completion_tokens"] == resp.usage.completion_tokens
    assert abs(row["cost_usd"] - cost) < 1e-12
    # reserved: prompt tokens (litellm's count) x input price + max_output_tokens x output price
    assert row["reserved_usd"] >= 4096 * PRICES["fake-mid"][1] / 1e6
    assert row["stream"] is False and row["status"] == 200 and row["error"] is None
    assert row["ttft_ms"] is None and row["latency_ms"] > 0
    assert row["prompt_text"] is None  # log_prompts is off
