"""The expected prompt-token count planning takes (gateway/pricing.py): estimated from the
prompt's size, with no tokenizer, when the size's bound fits every context window the request
could reach; counted with the backend's tokenizer only when a window is in question."""

from __future__ import annotations

import anyio
import pytest

from gateway.config import Settings, settings_from_dict
from gateway.pool import build_pool
from gateway.pricing import resolve_prices
from gateway.prompt_tokens import (
    BYTES_PER_TOKEN_ESTIMATE,
    PROMPT_MARGIN_TOKENS,
    REPLY_PRIMING_TOKENS,
    count_prompt_tokens,
    expected_prompt_tokens,
    prompt_size,
)
from gateway.serving.plan.planning import measure
from gateway.serving.request.chat_request import parse_chat_request
from tests.gateway.router_fixture import PRICES, build_router

TEXT = "Summarise the history of the river harbour and its bridges for a tourist guide. " * 4
MSG = [{"role": "user", "content": TEXT}]


def _settings(mid_window: int | None) -> Settings:
    info = {"fake-mid": {"max_input_tokens": mid_window} if mid_window else {}}
    return settings_from_dict({"model_list": [
        {"model_name": n, "litellm_params": {"model": f"openai/{n}",
                                             "api_base": "http://127.0.0.1:9"},
         "model_info": {"input_cost_per_million": pin, "output_cost_per_million": pout,
                        **info.get(n, {})}}
        for n, (pin, pout) in PRICES.items()], "routes": {"auto": {"cost_weight": 0.5}}})


def test_a_prompt_whose_bound_fits_every_window_is_estimated_from_its_size() -> None:
    settings = _settings(mid_window=None)
    strong = settings.backend("fake-strong")
    n, size = expected_prompt_tokens(strong, MSG, {}, settings.model_list)
    assert size == prompt_size(MSG, {})
    assert n == size.estimate(strong) == -(-(size.text_bytes - PROMPT_MARGIN_TOKENS)
                                           // BYTES_PER_TOKEN_ESTIMATE) + REPLY_PRIMING_TOKENS
    # an estimate of the same order as the tokenizer's count, never above the bound
    counted = count_prompt_tokens(strong, MSG)
    assert counted / 2 < n < 2 * counted and n <= size.bound(strong)


def test_a_prompt_past_a_reachable_window_is_counted_by_the_tokenizer() -> None:
    settings = _settings(mid_window=100)  # fake-mid's window: below the bound, above the count
    strong = settings.backend("fake-strong")
    assert prompt_size(MSG, {}).bound(strong) > 100
    n, _ = expected_prompt_tokens(strong, MSG, {}, settings.model_list)
    assert n == count_prompt_tokens(strong, MSG) < 100


@pytest.mark.parametrize("mid_window", [None, 100])
def test_planning_measures_against_the_pools_windows(mid_window: int | None) -> None:
    settings = _settings(mid_window)
    pool = build_pool(settings, resolve_prices(settings), build_router())
    req = parse_chat_request({"model": "fake-strong", "messages": MSG})
    strong = settings.backend("fake-strong")
    n, size = anyio.run(measure, req, strong, pool)
    expected = size.estimate(strong) if mid_window is None else count_prompt_tokens(strong, MSG)
    assert n == expected


def test_a_prompt_measured_on_the_loop_or_in_a_thread_gets_the_same_figures() -> None:
    settings = _settings(mid_window=None)
    pool = build_pool(settings, resolve_prices(settings), build_router())
    strong = settings.backend("fake-strong")
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    for body in ({}, {"tools": [tool]}, {"user": "u-1"}):  # the tools go to the thread
        req = parse_chat_request({"model": "fake-strong", "messages": MSG, **body})
        assert anyio.run(measure, req, strong, pool) == expected_prompt_tokens(
            strong, req.messages, req.params, settings.model_list)


def test_a_request_with_tools_bounds_the_providers_tool_preamble() -> None:
    """Anthropic bills a tool-use system prompt of up to 530 tokens on top of the tools'
    own tokens (https://docs.anthropic.com/en/docs/tool-use-pricing-and-tokens): one small
    tool's bound must cover it, or the reservation is below what the provider bills."""
    strong = _settings(mid_window=None).backend("fake-strong")
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}}
    msg = [{"role": "user", "content": "hi"}]
    with_tool = prompt_size(msg, {"tools": [tool]})
    plain = prompt_size(msg, {})
    anthropic_preamble = 530
    billed_at_least = anthropic_preamble + 1  # the preamble and one token of "hi"
    assert with_tool.bound(strong) >= billed_at_least
    assert plain.bound(strong) < billed_at_least  # no tools: no preamble reserved
    # the estimate stays an estimate of the text (the margin is the bound's)
    assert with_tool.estimate(strong) < with_tool.bound(strong) - anthropic_preamble
