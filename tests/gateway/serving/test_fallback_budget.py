"""Fallback across ranked candidates, budget refusal, capping and settlement."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from gateway.prompt_tokens import count_prompt_tokens
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway
from tests.gateway.router_fixture import PRICES, REPLIES

MSG = [{"role": "user", "content": "Tell me something useful"}]


@pytest.mark.parametrize(
    ("mode", "status"),
    [("error_500", 500), ("error_429", 429), ("reset", 502), ("malformed_json", 502),
     ("hang", 504)],
)
def test_routed_request_falls_back_to_the_next_candidate(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream, mode: str, status: int
) -> None:
    upstream.set_mode("fake-mid", mode)
    raw = client.chat.completions.with_raw_response.create(model="auto", messages=MSG)
    resp = raw.parse()
    assert resp.model == "fake-cheap"  # the router's second choice at λ = 0.5
    assert resp.choices[0].message.content == REPLIES["fake-cheap"]
    row = gateway.log_row(raw.headers["x-tollgate-request-id"])
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-mid", status), ("fake-cheap", 200)]
    assert row["attempts"][0]["error"] and row["attempts"][1]["error"] is None
    assert row["chosen_model"] == "fake-cheap" and row["status"] == 200
    assert row["candidates"][0]["backend"] == "fake-mid"  # the decision stays on record


def test_all_candidates_failing_is_a_502_with_every_attempt(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    for name in PRICES:
        upstream.set_mode(name, "error_500")
    with pytest.raises(openai.APIStatusError) as exc:
        client.chat.completions.create(model="auto", messages=MSG)
    assert exc.value.status_code == 502
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert [a["model"] for a in row["attempts"]] == ["fake-mid", "fake-cheap", "fake-strong"]
    assert all(a["status"] == 500 for a in row["attempts"])


def test_attempts_stop_at_max_attempts(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    for name in PRICES:
        upstream.set_mode(name, "error_500")
    ctx = gateway.app.state.ctx
    saved = ctx.settings  # frozen: the app reads ctx.settings per request, so swap a copy in
    ctx.settings = saved.model_copy(update={"max_attempts": 2})
    try:
        with pytest.raises(openai.APIStatusError) as exc:
            client.chat.completions.create(model="auto", messages=MSG)
    finally:
        ctx.settings = saved
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert [a["model"] for a in row["attempts"]] == ["fake-mid", "fake-cheap"]
    assert len(upstream.requests) == 2


def test_upstream_400_is_not_retried(
    gateway: Gateway, client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    # a 400 from the upstream is about the request: the next backend would refuse it too
    upstream.set_mode("fake-mid", "error_400")
    with pytest.raises(openai.BadRequestError) as exc:
        client.chat.completions.create(model="auto", messages=MSG)
    assert "refuses this request" in exc.value.response.json()["error"]["message"]
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [("fake-mid", 400)]
    assert [r["model"] for r in upstream.requests] == ["fake-mid"]


def test_gateway_400_never_reaches_an_upstream(
    client: openai.OpenAI, upstream: FakeUpstream
) -> None:
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="auto", messages=MSG,
                                       extra_body={"tollgate": {"allowed_models": ["bogus"]}})
    assert upstream.requests == []


def test_settlement_charges_the_actual_cost_and_releases_the_rest(gateway: Gateway) -> None:
    key, tid = gateway.tenant(budget_usd=1.0)
    c = gateway.client(key)
    total = 0.0
    for model in ("auto", "best", "fake-cheap"):
        raw = c.chat.completions.with_raw_response.create(model=model, messages=MSG)
        total += float(raw.headers["x-tollgate-cost-usd"])
    info = gateway.settled(tid)
    assert info["reserved_usd"] == 0
    assert info["spent_usd"] == pytest.approx(total, abs=3e-9)  # nano-dollar rounding


def test_fallback_to_a_dearer_backend_tops_up_and_settles(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    key, tid = gateway.tenant(budget_usd=1.0)
    upstream.set_mode("fake-cheap", "error_500")
    raw = gateway.client(key).chat.completions.with_raw_response.create(
        model="cheap", messages=MSG, max_tokens=100)
    assert raw.parse().model == "fake-mid"
    row = gateway.log_row(raw.headers["x-tollgate-request-id"])
    n_prompt = row["prompt_tokens"]
    assert row["reserved_usd"] >= 100 * PRICES["fake-mid"][1] / 1e6  # topped up for fake-mid
    info = gateway.settled(tid)
    assert info["reserved_usd"] == 0
    assert info["spent_usd"] == pytest.approx(float(raw.headers["x-tollgate-cost-usd"]), abs=3e-9)
    assert n_prompt > 0


def test_budget_refusal_skips_unaffordable_candidates(gateway: Gateway) -> None:
    # max_tokens=1000: strong would reserve ~$0.03, mid ~$0.002, cheap ~$0.0002
    key, tid = gateway.tenant(budget_usd=0.001)
    raw = gateway.client(key).chat.completions.with_raw_response.create(
        model="best", messages=MSG, max_tokens=1000)
    assert raw.parse().model == "fake-cheap"
    row = gateway.log_row(raw.headers["x-tollgate-request-id"])
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-strong", 429), ("fake-mid", 429), ("fake-cheap", 200)]
    assert row["attempts"][0]["error"].startswith("budget")
    assert gateway.settled(tid)["spent_usd"] <= 0.001


def test_without_max_tokens_the_output_is_capped_to_the_budget(
    gateway: Gateway, upstream: FakeUpstream
) -> None:
    budget = 0.003  # fake-strong's 4096 default output tokens would cost $0.12
    key, tid = gateway.tenant(budget_usd=budget)
    raw = gateway.client(key).chat.completions.with_raw_response.create(
        model="fake-strong", messages=MSG)
    assert raw.parse().model == "fake-strong"
    sent = upstream.requests_for("fake-strong")[-1]
    pin, pout = (p / 1e6 for p in PRICES["fake-strong"])
    row = gateway.log_row(raw.headers["x-tollgate-request-id"])
    # the cap is what the remaining budget pays after the prompt: (B - n·p_in) / p_out
    assert 16 <= sent["max_tokens"] <= int((budget - row["prompt_tokens"] * pin) / pout)
    assert row["reserved_usd"] <= budget + 1e-9
    assert gateway.settled(tid)["spent_usd"] <= budget


def test_spend_never_exceeds_the_budget(gateway: Gateway) -> None:
    # each request reserves ~$0.00008 (40 tokens x $2/1M) and spends ~$0.000014
    budget = 0.00015
    key, tid = gateway.tenant(budget_usd=budget)
    c = gateway.client(key)
    refused = 0
    for _ in range(12):
        try:
            c.chat.completions.create(model="fake-mid", messages=MSG, max_tokens=40)
        except openai.RateLimitError as e:
            assert e.response.json()["error"]["type"] == "budget_exceeded"
            refused += 1
    info = gateway.settled(tid)
    assert refused > 0
    assert info["spent_usd"] <= budget and info["reserved_usd"] == 0


def _timeout_charges(gateway: Gateway, model: str) -> float:
    text = gateway.admin("GET", "/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f'tollgate_timeout_charges_total{{model="{model}"}}'))


@pytest.fixture
def quick_cheap_timeout(gateway: Gateway) -> Iterator[None]:
    """fake-cheap times out after 1.5 s instead of 20 (the app reads settings per request)."""
    info = gateway.settings.backend("fake-cheap").model_info
    saved, info.timeout = info.timeout, 1.5
    yield
    info.timeout = saved


@pytest.mark.parametrize("stream", [False, True])
def test_a_timed_out_attempt_costs_what_the_provider_bills(
    gateway: Gateway, upstream: FakeUpstream, stream: bool
) -> None:
    """fake-mid hangs past its 2 s timeout after receiving the prompt. Not streamed, its
    provider generates and bills the answer: the tenant pays that attempt's whole
    reservation (before: only the prompt); streamed, closing the stream stops generation:
    the prompt's input cost. Plus fake-cheap's answer."""
    key, tid = gateway.tenant(budget_usd=1.0)
    before = _timeout_charges(gateway, "fake-mid")
    upstream.set_mode("fake-mid", "hang", times=1)
    with gateway.client(key).chat.completions.with_streaming_response.create(
            model="auto", messages=MSG, stream=stream) as raw:
        rid = raw.headers["x-tollgate-request-id"]
        raw.read()
    row = gateway.log_row(rid)
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-mid", 504), ("fake-cheap", 200)]
    estimate = count_prompt_tokens(gateway.settings.backend("fake-mid"), MSG)
    owed = row["attempts"][0]["charged_usd"]
    if stream:  # the prompt's input cost, at the planner's estimate of its tokens (no
        # tokenizer loaded for it): of the order of the tokenizer's count
        tokens = owed / (PRICES["fake-mid"][0] / 1e6)
        assert estimate / 2 <= tokens <= 2 * estimate
    else:  # the reservation: the prompt bound and fake-mid's 4096 output tokens
        max_out = gateway.settings.backend("fake-mid").model_info.max_output_tokens
        assert owed >= estimate * PRICES["fake-mid"][0] / 1e6 + (
            max_out * PRICES["fake-mid"][1] / 1e6)
        assert row["reserved_usd"] >= owed
    assert "charged_usd" not in row["attempts"][1]
    answer = PRICES["fake-cheap"][0] / 1e6 * row["prompt_tokens"] + (
        PRICES["fake-cheap"][1] / 1e6 * row["completion_tokens"])
    assert row["cost_usd"] == pytest.approx(owed + answer)
    info = gateway.settled(tid)
    assert info["reserved_usd"] == 0
    assert info["spent_usd"] == pytest.approx(row["cost_usd"], abs=3e-9)
    assert _timeout_charges(gateway, "fake-mid") == before + 1


def test_a_timeout_charge_keeps_the_budget_hard(
    gateway: Gateway, upstream: FakeUpstream, quick_cheap_timeout: None
) -> None:
    """Route "cheap" tries fake-cheap, then the dearer fake-mid. With a budget that pays
    fake-mid's reservation but not that plus fake-cheap's timed-out prompt, the fallback is
    not tried: the tenant pays the timed-out prompt and never more than its budget."""
    probe_key, _ = gateway.tenant(budget_usd=1.0)
    upstream.set_mode("fake-cheap", "error_500", times=1)
    probe = gateway.client(probe_key).chat.completions.with_raw_response.create(
        model="cheap", messages=MSG, max_tokens=100)
    held_for_mid = gateway.log_row(probe.headers["x-tollgate-request-id"])["reserved_usd"]
    prompt_in = count_prompt_tokens(gateway.settings.backend("fake-cheap"), MSG) * (
        PRICES["fake-cheap"][0] / 1e6)
    budget = held_for_mid + prompt_in / 2

    key, tid = gateway.tenant(budget_usd=budget)
    upstream.set_mode("fake-cheap", "hang", times=1)
    with pytest.raises(openai.APIStatusError) as exc:
        gateway.client(key).chat.completions.create(model="cheap", messages=MSG,
                                                    max_tokens=100)
    assert exc.value.status_code == 504
    row = gateway.log_row(exc.value.response.headers["x-tollgate-request-id"])
    assert [(a["model"], a["status"]) for a in row["attempts"]] == [
        ("fake-cheap", 504), ("fake-mid", 429), ("fake-strong", 429)]
    # not streamed: fake-cheap's whole reservation (its prompt bound and 100 output tokens)
    owed = row["attempts"][0]["charged_usd"]
    assert owed >= prompt_in + 100 * PRICES["fake-cheap"][1] / 1e6
    assert row["cost_usd"] == pytest.approx(owed)
    info = gateway.settled(tid)
    assert info["reserved_usd"] == 0
    assert info["spent_usd"] == pytest.approx(owed, abs=3e-9)
    assert info["spent_usd"] <= budget
