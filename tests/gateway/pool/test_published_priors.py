"""Day one from published results (issue 46 item 3): every current model family has a sourced
figure; no model with a published score (or a vendor's claim against one) sits on "price
only"; a claim never outranks a published figure; the startup block says which backends carry
a route's saving on a claim alone.

Real parts: the packaged router artifact and capability table (router_core/identity), the
packaged config.yaml with litellm's prices and its reference prompts embedded by the packaged
encoder; the pool is built exactly as `tollgate serve` builds it.
"""

from __future__ import annotations

import pytest

from gateway.cli.startup import promise_lines
from gateway.config import DEFAULT_CONFIG_PATH, load_settings, settings_from_dict
from gateway.pool import build_pool
from gateway.pool.promise import CLAIM_HOW, claim_carried, reference_queries
from gateway.pricing import Price, resolve_prices
from router_core.artifact import load_router
from router_core.identity.capability import capability, capability_table

# one or more models of each family the issue names, by a name a LiteLLM config would use
FAMILIES = {
    "Claude 4.x": ["anthropic/claude-sonnet-4-6", "claude-sonnet-4-5", "claude-opus-4-1-20250805",
                   "claude-opus-4-5", "claude-sonnet-4-20250514", "anthropic/claude-opus-4-6"],
    "GPT-4.1": ["openai/gpt-4.1", "gpt-4.1-mini", "gpt-4.1-nano"],
    "GPT-5.x": ["openai/gpt-5", "openai/gpt-5-mini", "gpt-5.1", "openai/gpt-5.2", "gpt-5.4"],
    "Gemini 2.5": ["gemini/gemini-2.5-flash", "gemini-2.5-pro"],
    "Gemini 3.x": ["gemini-3.1-pro", "gemini/gemini-3-pro-preview", "gemini/gemini-3-flash-preview",
                   "gemini/gemini-3.1-flash-lite"],
    "Llama 3": ["llama-3-8b-instruct", "llama-3.3-70b-instruct", "llama-3.1-405b-instruct"],
    "Llama 4": ["llama-4-scout-17b-16e-instruct", "llama-4-maverick-17b-128e-instruct"],
    "Qwen 2.5": ["qwen2.5-72b-instruct"],
    "Qwen 3": ["qwen3-235b-a22b", "qwen3-32b", "qwen3-30b-a3b"],
    "DeepSeek V3": ["deepseek-v3", "deepseek-v3-0324", "deepseek-v3.1", "deepseek-v3.2"],
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_every_current_family_has_a_published_figure_with_its_source(family: str) -> None:
    for name in FAMILIES[family]:
        cap = capability(name)
        assert cap is not None and cap.claim is None, name  # a number, not a claim
        assert 0.0 < cap.value < 1.0
        assert cap.how in ("published mmlu_pro", "mapped from mmlu", "mapped from gpqa_diamond")
        assert all(s.source.url.startswith("https://") and s.row for s in cap.scores), name


@pytest.fixture(scope="module")
def every_published_pool():
    """A pool of every model the capability table places (a score, or a vendor's claim
    against a model with one), each priced alike, over the packaged router."""
    table = capability_table()
    names = [m for m in table.models if table.capability(m) is not None]
    entries = [{"model_name": m, "litellm_params": {"model": f"openai/{m}"}} for m in names]
    settings = settings_from_dict({"model_list": entries})
    prices = {m: Price(1e-6, 5e-6) for m in names}
    return build_pool(settings, prices, load_router(None)), names


def test_no_model_with_a_published_score_sits_on_price_only(every_published_pool) -> None:
    pool, names = every_published_pool
    how = {m: pool.how_known(m) for m in names}
    assert len(names) > 60
    assert not [m for m, h in how.items() if h is not None and "price only" in h]
    assert how["claude-haiku-4-5"].startswith("prior from a vendor claim: about "
                                              "claude-sonnet-4-20250514")


def test_a_vendor_claim_never_outranks_a_published_figure(every_published_pool) -> None:
    pool, names = every_published_pool
    level = {m: pool.qualities[pool.expert_of(m)].level for m in names if pool.how_known(m)}
    claimed = [m for m in level if pool.how_known(m).startswith(CLAIM_HOW)]
    published = [m for m in level if pool.how_known(m).startswith("prior from published")]
    assert {"gemini-3.5-flash", "claude-haiku-4-5"} <= set(claimed) and len(published) > 30
    lowest = min(level[m] for m in published)
    assert all(level[m] <= lowest + 1e-3 for m in claimed), {m: level[m] for m in claimed}
    assert all("capped at" in pool.how_known(m) for m in claimed)


def test_the_startup_block_says_which_backends_carry_a_saving_on_a_claim_alone() -> None:
    from gateway.app import reference_phi
    from router_core.encoders import encoder_for_router

    settings = load_settings(DEFAULT_CONFIG_PATH)
    router = load_router(None)
    phi_ref = reference_phi(settings, encoder_for_router(router.config, threads=1))
    pool = build_pool(settings, resolve_prices(settings), router, phi_ref)
    carried = claim_carried(pool.settings, pool.known, pool.qualities, pool.prices,
                            pool.promises, reference_queries(pool.router, phi_ref))
    # the packaged pool's claim-only backends: gemini-3.5-flash (Google), claude-haiku-4-5
    # (Anthropic); every promise route has them among its members
    assert set(carried) == {"auto", "auto-balanced", "auto-cheap"}
    lines = promise_lines(pool)
    for route, shares in carried.items():
        line = next(x for x in lines if x.startswith(f"{route}: saving on a vendor claim alone"))
        if shares:
            assert all(f"{b} (" in line for b in shares)
        else:
            assert line.endswith("none (its claim-only backends are not chosen)")
    for b in ("gemini-3.5-flash", "claude-haiku-4-5"):
        assert pool.how_known(b).startswith(CLAIM_HOW)


def test_a_figure_on_another_benchmark_states_its_fitted_conversion(every_published_pool) -> None:
    """gpt-4o-mini has only OpenAI's MMLU figure: it is put on the MMLU-Pro scale by the line
    fitted on the models with both (router_core/identity/capability.py ``benchmark_map``), and
    its "how" says which line and how far the models it was fitted on fall from it."""
    from router_core.identity.capability import benchmark_map

    pool, _ = every_published_pool
    line = benchmark_map()
    assert line is not None and len(line.models) >= 5 and line.residual_sd < 0.06
    how = pool.how_known("gpt-4o-mini")
    assert how.startswith("prior from published results: mapped from mmlu 0.650")
    assert f"fitted on {len(line.models)} models with both, residual ±" in how


def test_a_gpqa_figure_states_its_fitted_conversion(every_published_pool) -> None:
    """Gemini 3 Flash has Google's GPQA Diamond figure and no MMLU-Pro: it is placed by the
    GPQA line fitted on the table's models with both, and says so (no price, no claim)."""
    from router_core.identity.capability import benchmark_map

    pool, _ = every_published_pool
    line = benchmark_map("gpqa_diamond")
    how = pool.how_known("gemini-3-flash")
    assert how.startswith("prior from published results: mapped from gpqa_diamond 0.88")
    assert f"·GPQA-Diamond {line.intercept:+.2f}, fitted on {len(line.models)} models" in how
