"""Day one from published results for every current model family (issue 46 item 3).

Every chat model of the families the issue names (Claude 4.x, GPT-4.1 and 5.x, Gemini 2.5 and
3.x, Llama 3 and 4, Qwen 2.5 and 3, DeepSeek V3) that litellm's own price map lists as current
under a first-party or first-cloud provider resolves, through the identity table, to a model
with a sourced figure (published MMLU-Pro, or a secondary benchmark mapped by its fitted line)
or to a written reason why it has none. A model with any sourced score is never left without a
place (it would fall to "price only"), and a vendor's sentence never stands in for a number.
"""

from __future__ import annotations

import datetime as dt
import itertools
import re

import litellm
import pytest

from router_core.identity.capability import (
    SECONDARY,
    aggregate,
    benchmark_map,
    capability,
    capability_table,
)

# the map's entries as of the day this list was checked: a model deprecated before it is gone
AS_OF = dt.date(2026, 12, 6)
FAMILY = re.compile(
    r"claude-(haiku|sonnet|opus)-4|claude-4|gpt-4\.1|gpt-5|gemini-2\.5|gemini-3|llama-?3|"
    r"llama-?4|qwen-?2\.5|qwen-?3|deepseek-v3|deepseek-chat", re.IGNORECASE)
# providers that serve the vendor's own model ids (resellers rename and requantize)
FIRST_PARTY = {"openai", "anthropic", "gemini", "deepseek", "vertex_ai",
               "vertex_ai-language-models", "vertex_ai-anthropic_models", "vertex_ai-llama_models",
               "vertex_ai-qwen_models", "vertex_ai-deepseek_models"}
# map entries that are not one general chat model: each with why it is left out
NOT_ONE_MODEL = {
    r"^ft:": "a fine-tune's base, not a deployable model id",
    r"-latest$": "a moving pointer (OpenAI re-points *-chat-latest), not one model",
    r"^deepseek(/deepseek)?-chat$": "a moving pointer to DeepSeek's current V3.x",
    r"search-api": "a search product wrapped around a model",
    r"-tts$|computer-use|-image|customtools": "a task-specific variant (speech, GUI, images)",
    r"-cyber(-preview)?$": "a security-restricted variant",
    r"llama3-(8b|70b|405b)-instruct-maas$": "Vertex's un-versioned id does not say which Llama 3",
    r"llama-4-maverick-17b-16e|llama-4-scout-17b-128e": "an expert count no Llama 4 model has",
}


def current_family_models() -> list[str]:
    out = []
    for name, entry in litellm.model_cost.items():
        if entry.get("mode") != "chat" or entry.get("litellm_provider") not in FIRST_PARTY:
            continue
        if not FAMILY.search(name) or any(re.search(p, name) for p in NOT_ONE_MODEL):
            continue
        gone = entry.get("deprecation_date")
        if gone and dt.date.fromisoformat(gone) < AS_OF:
            continue
        out.append(name)
    return sorted(out)


def test_every_current_family_model_has_a_sourced_figure_or_says_why() -> None:
    table = capability_table()
    names = current_family_models()
    assert len(names) >= 80
    placed, unsourced = set(), set()
    for name in names:
        model = table.resolve(name)
        assert model is not None, f"{name}: no identity"
        cap = capability(model)
        if cap is not None and cap.claim is None:
            assert all(s.source.url.startswith("https://") and s.row for s in cap.scores)
            placed.add(model)
        else:
            assert table.unsourced.get(model), f"{name} ({model}): no figure and no reason"
            unsourced.add(model)
    # the figures cover every family; the rest is listed, each with its reason
    assert {"gpt-4.1", "gpt-5", "gpt-5-mini", "gpt-5.2", "gpt-5.4", "claude-sonnet-4-6",
            "claude-opus-4-5", "claude-opus-4-6", "gemini-3-pro", "gemini-3-flash",
            "gemini-3.1-pro", "deepseek-v3.2", "llama-3.1-405b-instruct",
            "llama-4-maverick-17b-128e-instruct"} <= placed
    assert len(placed) >= len(unsourced)


def test_every_known_model_of_the_families_has_a_figure_or_says_why() -> None:
    """The identity table's own models of these families (Qwen 2.5 and 3 and the older
    snapshots litellm no longer lists among them): the same rule, by canonical id."""
    table = capability_table()
    ids = [m for m in table.identities.ids if FAMILY.search(m)]
    assert len(ids) > 60
    for model in ids:
        cap = table.capability(model)
        assert (cap is not None and cap.claim is None) or table.unsourced.get(model), model
    assert capability("qwen3-235b-a22b-instruct-2507").how == "published mmlu_pro"
    assert capability("Qwen/Qwen2.5-72B-Instruct").how == "published mmlu_pro"


def test_a_model_with_any_sourced_score_is_placed_by_it() -> None:
    """No model with a published score falls to "price only": every model with a score on a
    listed benchmark has a capability, and it is that number's, not a vendor's claim."""
    table = capability_table()
    for model, scores in table.scores.items():
        cap = table.capability(model)
        assert cap is not None and cap.claim is None, (model, [s.benchmark for s in scores])


def test_a_vendor_claim_never_stands_in_for_a_number() -> None:
    """A claim places a model only when no score of its own does; a model with both is
    placed by its score (here: every claimed model of the table)."""
    table = capability_table()
    for model in table.relations:
        cap = table.capability(model)
        if table.published(model):
            assert cap.claim is None, model
        else:
            assert cap is None or cap.claim is not None, model
            assert table.capability(model, claims=False) is None, model


def test_the_gpqa_line_is_fitted_on_sourced_pairs_and_states_its_residual() -> None:
    assert SECONDARY == ("mmlu", "gpqa_diamond")
    line = benchmark_map("gpqa_diamond")
    assert line is not None and len(line.models) >= 10 and line.slope > 0
    assert 0 < line.residual_sd < 0.03
    mapped = [line(x / 100)[0] for x in range(70, 100)]
    assert all(b >= a for a, b in itertools.pairwise(mapped))
    table = capability_table()
    for m in line.models:  # both values sourced, from the same or different tables
        assert table.aggregate(m, "gpqa_diamond") and table.aggregate(m, "mmlu_pro")
    for name in ("gemini/gemini-3-flash-preview", "openai/gpt-5.4", "anthropic/claude-opus-4-6",
                 "gemini/gemini-3.1-flash-lite", "openai/gpt-5.1-2025-11-13"):
        cap = capability(name)
        assert cap.how == "mapped from gpqa_diamond" and cap.sd == pytest.approx(line.residual_sd)
        assert aggregate(name) is None  # no MMLU-Pro of its own: the mapping is stated


# sourced MMLU-Pro means (percent, as the sources write them) of the models added here
NEW_MMLU_PRO = {
    "openai/gpt-5-mini-2025-08-07": 83.7,
    "openai/gpt-5.2": (87.4 + 86.7) / 2,
    "gemini/gemini-3-pro-preview": (89.8 + 90.1) / 2,
    "vertex_ai/deepseek-ai/deepseek-v3.2-maas": 85.0,
    "deepinfra/deepseek-ai/DeepSeek-V3.1-Terminus": 85.0,
    "Qwen/Qwen3.5-397B-A17B": 87.8,
    "Qwen/Qwen3.5-27B": 86.1,
}


@pytest.mark.parametrize("name,percent", sorted(NEW_MMLU_PRO.items()))
def test_new_frontier_models_carry_their_sourced_mmlu_pro(name: str, percent: float) -> None:
    cap = capability(name)
    assert cap is not None and cap.how == "published mmlu_pro"
    assert cap.value == pytest.approx(percent / 100, abs=1e-9)


def test_published_results_order_the_frontier_against_its_small_models() -> None:
    assert capability("gemini-3-pro").value > capability("gemini-3-flash").value
    assert capability("gemini-3-flash").value > capability("gemini-3.1-flash-lite").value
    assert capability("gpt-5.2").value > capability("gpt-5-mini").value
    assert capability("claude-opus-4-5").value > capability("claude-sonnet-4-20250514").value
