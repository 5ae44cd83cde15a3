"""POST /v1/completions (legacy text completions) through a real gateway with the OpenAI SDK:
a passthrough to the named backend over HTTP (litellm's atext_completion to the fake
upstream's /v1/completions), reserved at max_tokens × max(n, best_of) × prompts, settled at the
reported usage, logged; streamed (``stream=True``) as OpenAI streams it, settled from the usage
chunk before ``data: [DONE]``; a route name is a 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest

from gateway.config import settings_from_dict
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeBackend, FakeUpstream
from tests.gateway.conftest import TIMEOUTS, Gateway, run_gateway
from tests.gateway.learning.conftest import learning_config
from tests.gateway.router_fixture import PRICES, REPLIES

INSTRUCT = "fake-instruct"


@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    backends = [FakeBackend(n, reply=REPLIES[n], input_per_m=PRICES[n][0],
                            output_per_m=PRICES[n][1]) for n in PRICES]
    backends.append(FakeBackend(INSTRUCT, reply="once upon a time", input_per_m=1.5,
                                output_per_m=2.0))
    with FakeUpstream(backends) as u:
        yield u


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, up: FakeUpstream, test_router: Router,
       encoder) -> Iterator[Gateway]:
    url = f"sqlite:///{tmp_path_factory.mktemp('textcompl') / 'tollgate.db'}"
    cfg = learning_config(up, database_url=url)
    cfg["model_list"] = [up.model_entry(n, timeout=TIMEOUTS[n]) for n in PRICES]
    cfg["model_list"].append(up.model_entry(INSTRUCT, mode="completion"))
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def test_a_text_completion_is_forwarded_budgeted_settled_and_logged(
    gw: Gateway, up: FakeUpstream
) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    raw = gw.client(key).completions.with_raw_response.create(
        model=INSTRUCT, prompt="Tell me a story", max_tokens=10, n=2)
    resp = raw.parse()
    assert resp.object == "text_completion" and resp.model == INSTRUCT
    assert [c.text for c in resp.choices] == ["once upon a time"] * 2
    sent = up.requests_for(INSTRUCT)[-1]
    assert sent["prompt"] == "Tell me a story" and sent["max_tokens"] == 10 and sent["n"] == 2
    assert resp.usage.prompt_tokens == 4 and resp.usage.completion_tokens == 8
    charged = float(raw.headers["x-tollgate-cost-usd"])
    assert charged == pytest.approx((4 * 1.5 + 8 * 2.0) / 1e6)
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["chosen_model"] == INSTRUCT and row["reason"] == "passthrough"
    assert row["prompt_tokens"] == 4 and row["completion_tokens"] == 8
    assert row["reserved_usd"] >= 2 * 10 * 2.0 / 1e6  # n × max_tokens at the output price
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(charged, abs=2e-9)


def test_a_chat_backend_serves_token_id_prompts_too(gw: Gateway, up: FakeUpstream) -> None:
    key, _ = gw.tenant()
    resp = gw.client(key).completions.create(model="fake-cheap", prompt=[[1, 2, 3]],
                                             max_tokens=5)
    assert resp.choices[0].text == REPLIES["fake-cheap"]
    assert up.requests_for("fake-cheap")[-1]["prompt"] == [[1, 2, 3]]


def test_routes_streams_bad_bodies_and_budgets_are_refused(gw: Gateway) -> None:
    key, tenant_id = gw.tenant(budget_usd=1e-9)
    client = gw.client(key)
    for kwargs, param in (({"model": "auto", "prompt": "x"}, "model"),
                          ({"model": INSTRUCT, "prompt": "x", "stream": "yes"}, "stream"),
                          ({"model": INSTRUCT, "prompt": "x",
                            "stream_options": {"include_usage": True}}, "stream_options"),
                          ({"model": INSTRUCT, "prompt": []}, "prompt"),
                          ({"model": INSTRUCT, "prompt": "x", "logprobs": 9}, "logprobs"),
                          ({"model": INSTRUCT, "prompt": "x", "extra_body": {"nope": 1}},
                           "nope")):
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(**kwargs)
        assert e.value.body["param"] == param
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(model=INSTRUCT, prompt="the budget cannot pay for this")
    assert e.value.body["code"] == "budget_exceeded"
    assert gw.settled(tenant_id)["spent_usd"] == 0
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="x")


def test_a_streamed_text_completion_is_relayed_settled_and_logged(
    gw: Gateway, up: FakeUpstream
) -> None:
    key, tenant_id = gw.tenant(budget_usd=1.0)
    raw = gw.client(key).completions.with_raw_response.create(
        model=INSTRUCT, prompt="Tell me a story", max_tokens=10, n=2, stream=True,
        stream_options={"include_usage": True})
    chunks = list(raw.parse())
    assert {c.model for c in chunks} == {INSTRUCT}
    assert {c.object for c in chunks} == {"text_completion"}
    texts = {0: "", 1: ""}
    for c in chunks:
        for choice in c.choices:
            texts[choice.index] += choice.text
    assert texts == {0: "once upon a time", 1: "once upon a time"}
    assert chunks[-1].choices == [] and chunks[-1].usage.prompt_tokens == 4
    assert chunks[-1].usage.completion_tokens == 8
    sent = up.requests_for(INSTRUCT)[-1]
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert sent["max_tokens"] == 10 and sent["n"] == 2
    row = gw.log_row(raw.headers["x-tollgate-request-id"])
    assert row["status"] == 200 and row["stream"] and row["chosen_model"] == INSTRUCT
    assert row["prompt_tokens"] == 4 and row["completion_tokens"] == 8
    assert row["reserved_usd"] >= 2 * 10 * 2.0 / 1e6
    expected = (4 * 1.5 + 8 * 2.0) / 1e6
    assert row["cost_usd"] == pytest.approx(expected)
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx(expected, abs=2e-9)


def test_a_stream_ends_with_done_and_is_settled_without_a_usage_chunk_asked(
    gw: Gateway, up: FakeUpstream
) -> None:
    """The client does not ask for usage: it gets none, the gateway still settles from it."""
    key, tenant_id = gw.tenant(budget_usd=1.0)
    with httpx.stream("POST", gw.base_url + "/v1/completions", timeout=30,
                      headers={"authorization": f"Bearer {key}"},
                      json={"model": INSTRUCT, "prompt": "Tell me a story", "max_tokens": 3,
                            "stream": True}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith(
            "text/event-stream")
        events = [line[len("data: "):] for line in r.iter_lines() if line.startswith("data: ")]
        rid = r.headers["x-tollgate-request-id"]
    assert events[-1] == "[DONE]"
    bodies = [json.loads(e) for e in events[:-1]]
    assert all("usage" not in b for b in bodies)
    assert "".join(b["choices"][0]["text"] for b in bodies) == "once upon a"
    assert bodies[-1]["choices"][0]["finish_reason"] == "length"
    assert all(set(b["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
               for b in bodies)
    assert up.requests_for(INSTRUCT)[-1]["stream_options"] == {"include_usage": True}
    row = gw.log_row(rid)
    assert row["prompt_tokens"] == 4 and row["completion_tokens"] == 3
    assert gw.settled(tenant_id)["spent_usd"] == pytest.approx((4 * 1.5 + 3 * 2.0) / 1e6,
                                                               abs=2e-9)
