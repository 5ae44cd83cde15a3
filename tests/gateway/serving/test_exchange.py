"""One attempt loop serves streamed and non-streamed requests alike: the same candidates in the
same order, the same skips for the budget, the same attempt records."""

from __future__ import annotations

import openai
import pytest

from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import REPLIES, VERSION

MSG = [{"role": "user", "content": "Tell me something useful"}]


def _answer(client: openai.OpenAI, stream: bool, **kwargs: object) -> tuple[str, str, str]:
    """(request id, answering model header, the text received)."""
    raw = client.chat.completions.with_raw_response.create(messages=MSG, stream=stream, **kwargs)
    parsed = raw.parse()
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    else:
        text = parsed.choices[0].message.content
    return raw.headers["x-tollgate-request-id"], raw.headers["x-tollgate-model"], text


@pytest.mark.parametrize("stream", [False, True])
def test_failures_fall_back_in_rank_order(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream, stream: bool
) -> None:
    upstream.set_mode("fake-mid", "error_500")
    upstream.set_mode("fake-cheap", "error_429")
    rid, model, text = _answer(client, stream, model="auto")
    assert model == "fake-strong" and text == REPLIES["fake-strong"]
    row = gateway.log_row(rid)
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-mid", 500), ("fake-cheap", 429), ("fake-strong", 200)]
    assert row["stream"] is stream and row["status"] == 200
    assert [r["model"] for r in upstream.requests] == ["fake-mid", "fake-cheap", "fake-strong"]


@pytest.mark.parametrize("stream", [False, True])
def test_unaffordable_candidates_are_skipped_unforwarded(
    gateway: Gateway, upstream: FakeUpstream, stream: bool
) -> None:
    key, tid = gateway.tenant(budget_usd=0.001)  # strong and mid at 1000 tokens do not fit
    rid, model, _ = _answer(gateway.client(key), stream, model="best", max_tokens=1000)
    assert model == "fake-cheap"
    row = gateway.log_row(rid)
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-strong", 429), ("fake-mid", 429), ("fake-cheap", 200)]
    assert [r["model"] for r in upstream.requests] == ["fake-cheap"]
    assert gateway.settled(tid)["spent_usd"] <= 0.001


def test_a_request_no_candidate_can_take_logs_what_was_planned(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError) as exc:  # more than any backend's output cap
        client.chat.completions.create(model="auto", messages=MSG, max_tokens=10**6)
    assert exc.value.response.json()["error"]["param"] == "max_tokens"
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert row["status"] == 400 and row["attempts"] == [] and upstream.requests == []
    assert row["route"] == "auto" and row["lam"] == 0.5 and row["router_version"] == VERSION
    assert row["prompt_tokens"] > 0 and row["chosen_model"] == row["candidates"][0]["backend"]
