"""The published-capability table: every number has a source, the identities resolve, the
MMLU→MMLU-Pro line is monotone, and the packaged config's frontier backends are placed by a
sourced number or by nothing."""

from __future__ import annotations

import dataclasses
import itertools

import pandas as pd
import pytest
import yaml

from router_core.data.paths import REPO_ROOT, shared_data_dir
from router_core.identity.capability import (
    CAPABILITY_FILE,
    PRIMARY,
    aggregate,
    benchmark_map,
    capability,
    capability_table,
    load_capability_table,
    published,
)
from router_core.identity.table import identity_table

FRONTIER_PREFIXES = ("gpt-4o", "claude-", "gemini-")


def test_the_yaml_parses_and_every_value_has_a_source_in_range():
    raw = yaml.safe_load(CAPABILITY_FILE.read_text(encoding="utf-8"))
    assert raw["primary"] == PRIMARY
    table = capability_table()
    assert sum(len(s) for s in table.scores.values()) > 60
    for model, scores in table.scores.items():
        for s in scores:
            assert s.source.key in table.sources, (model, s)
            assert s.source.url.startswith("https://") and s.source.where and s.row
            assert 0.0 <= s.value <= 1.0
            assert s.raw == pytest.approx(s.value * (100 if s.source.unit == "percent" else 1))
            assert s.benchmark in table.benchmarks
    for rels in table.relations.values():
        for r in rels:
            assert r.source.key in table.sources and r.claim


def test_every_model_in_the_table_is_an_identity():
    table = capability_table()
    for model in table.models:
        assert table.resolve(model) == model


def test_every_router_expert_is_covered_or_says_why_not():
    table = capability_table()
    for expert in identity_table().ids:
        assert published(expert) or expert in table.unsourced, expert
    # every expert with outcomes in MMLU-Pro (TIGER-Lab's outputs) has its MMLU-Pro score
    for expert in identity_table().columns_of("mmlu-pro").values():
        assert aggregate(expert) is not None, expert


def test_values_from_the_shared_outputs_are_the_outputs_mean():
    wide = shared_data_dir() / "mmlu_pro" / "mmlu_pro_correct_wide.parquet"
    if not wide.exists():
        pytest.skip("no shared MMLU-Pro outputs")
    means = pd.read_parquet(wide).mean()
    columns = identity_table().columns_of("mmlu-pro")
    checked = 0
    for scores in capability_table().scores.values():
        for s in scores:
            if s.source.key == "tiger_outputs":
                assert columns[s.row] == s.model
                assert s.value == pytest.approx(float(means[s.row]), abs=6e-5), s.row
                checked += 1
    assert checked == len(columns)


def test_the_mapping_between_benchmarks_is_monotone_with_a_residual():
    line = benchmark_map("mmlu", "mmlu_pro")
    assert line is not None and len(line.models) >= 10
    assert line.slope > 0 and line.residual_sd > 0
    mapped = [line(x / 100)[0] for x in range(50, 100)]
    assert all(b >= a for a, b in itertools.pairwise(mapped))
    # the residual is the fit's: the models it was fitted on sit about that far from the line
    table = capability_table()
    off = [
        table.aggregate(m, "mmlu_pro") - line(table.aggregate(m, "mmlu"))[0] for m in line.models
    ]
    assert max(abs(o) for o in off) < 4 * line.residual_sd


def test_the_packaged_frontier_backends_resolve_and_are_placed_by_a_source_or_nothing():
    config = yaml.safe_load((REPO_ROOT / "config.yaml").read_text(encoding="utf-8"))
    table = capability_table()
    seen = 0
    for entry in config["model_list"]:
        if not entry["model_name"].startswith(FRONTIER_PREFIXES):
            continue
        seen += 1
        model_id = table.resolve(entry["litellm_params"]["model"])
        assert model_id is not None, entry["model_name"]
        assert table.resolve(entry["model_name"]) == model_id
        value = aggregate(model_id)
        sourced = [s.value for s in published(model_id) if s.benchmark == PRIMARY]
        if value is None:  # no MMLU-Pro number: mapped from a sourced MMLU number, or nothing
            assert not sourced
            cap = capability(model_id)  # or another model's number, by a vendor's claim
            assert cap is None or cap.claim is not None or any(
                s.benchmark == "mmlu" for s in cap.scores)
        else:
            assert value == pytest.approx(sum(sourced) / len(sourced))
    assert seen == 5


def test_a_frontier_model_with_only_mmlu_is_mapped_with_the_fit_uncertainty():
    cap = capability("openai/gpt-4o-mini")
    assert cap is not None and cap.how == "mapped from mmlu"
    assert cap.sd == pytest.approx(benchmark_map().residual_sd)
    # published results place GPT-4o above GPT-4o-mini and above Llama-3.1-70B-Instruct
    assert capability("openai/gpt-4o").value > cap.value
    assert capability("gpt-4o").value > capability("Meta-Llama-3.1-70B-Instruct").value


def test_unknown_and_unsourced_models_have_no_number():
    assert published("openai/gpt-9") == () and aggregate("openai/gpt-9") is None
    assert capability("openai/gpt-9") is None
    table = capability_table()
    assert table.relations["gemini-3.5-flash"][0].other == "gemini-3.1-pro"
    assert table.capability("gemini/gemini-3.5-flash", claims=False) is None  # no number


def test_a_vendor_claim_lends_the_other_models_number_marked_as_a_claim():
    """Google claims gemini-3.5-flash outperforms gemini-3.1-pro, which has a number: the
    flash is placed at that number, marked as a claim (its prior holds fewer pseudo-outcomes,
    and the pool never ranks it above a published figure, gateway/pool/promise.py). Anthropic's
    claim that claude-haiku-4-5 matches Claude Sonnet 4 now resolves too: Sonnet 4's MMLU-Pro
    was sourced since (this test asserted None for it before); without claims, nothing."""
    cap = capability("gemini/gemini-3.5-flash")
    pro = capability("gemini-3.1-pro")
    assert cap is not None and cap.claim is not None and pro.claim is None
    assert cap.value == pro.value and cap.how == "vendor claim: at least gemini-3.1-pro"
    assert cap.source_title == cap.claim.source.title != pro.source_title
    haiku = capability("anthropic/claude-haiku-4-5")
    assert haiku.claim is not None and haiku.how == "vendor claim: about claude-sonnet-4-20250514"
    assert haiku.value == capability("claude-sonnet-4-20250514").value
    assert capability_table().capability("claude-haiku-4-5", claims=False) is None


def test_records_are_frozen():
    score = published("gpt-4o")[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        score.value = 1.0  # type: ignore[misc]


@pytest.mark.parametrize(
    "entry,match",
    [
        ("{benchmark: mmlu_pro, value: 50, source: nowhere, row: x}", "known source"),
        ("{benchmark: mmlu_pro, value: 150, source: s, row: x}", "out of range"),
        ("{benchmark: mmlu_pro, value: 50, source: s, row: x, extra: 1}", "known source"),
    ],
)
def test_a_bad_score_is_refused(tmp_path, entry, match):
    path = tmp_path / "capability.yaml"
    path.write_text(
        "primary: mmlu_pro\nbenchmarks: {mmlu_pro: x}\n"
        "sources: {s: {title: t, url: 'https://x', where: w, unit: percent}}\n"
        f"models:\n  gpt-4o:\n    scores:\n      - {entry}\n"
    )
    with pytest.raises(ValueError, match=match):
        load_capability_table(path)


def test_a_model_without_a_number_must_say_why(tmp_path):
    path = tmp_path / "capability.yaml"
    path.write_text(
        "primary: mmlu_pro\nbenchmarks: {mmlu_pro: x}\n"
        "sources: {s: {title: t, url: 'https://x', where: w, unit: percent}}\n"
        "models:\n  gpt-4o: {}\n"
    )
    with pytest.raises(ValueError, match="unsourced"):
        load_capability_table(path)


# Models added with their sourced MMLU-Pro mean (percent, as capability.yaml's sources write them),
# each reached through a LiteLLM model string a deployment would configure.
NEW_MMLU_PRO = {
    "openai/gpt-4.1": 81.8,
    "openai/gpt-4.1-nano-2025-04-14": 62.8,
    "openai/gpt-5": 87.1,
    "openai/o3-2025-04-16": 85.9,
    "openai/o4-mini": 81.9,
    "anthropic/claude-3-5-haiku-20241022": 65.0,
    "anthropic/claude-sonnet-4-20250514": 83.7,
    "anthropic/claude-sonnet-4-5-20250929": 87.5,
    "bedrock/us.anthropic.claude-opus-4-20250514-v1:0": (86.6 + 86.9) / 2,
    "anthropic/claude-opus-4-1-20250805": 87.9,
    "vertex_ai/claude-opus-4-5@20251101": (89.3 + 89.5) / 2,
    "gemini/gemini-1.5-flash-001": 59.12,
    "gemini/gemini-2.5-flash": (81.1 + 81.9) / 2,
    "gemini/gemini-2.5-pro": 85.6,
    "together_ai/Qwen/Qwen3-235B-A22B-FP8": (82.8 + 75.2 + 77.3) / 3,
    "Qwen/Qwen3-235B-A22B-Instruct-2507": 83.0,
    "Qwen/Qwen3-235B-A22B-Thinking-2507": 84.4,
    "Qwen/Qwen3-32B": (79.1 + 71.9) / 2,
    "mistral/mistral-small-2501": 66.3,
    "gemini/gemini-gemma-2-27b-it": (56.9 + 53.6) / 2,
    "deepinfra/google/gemma-3-27b-it": 67.5,
    "deepinfra/google/gemma-3-12b-it": 60.6,
    "fireworks_ai/accounts/fireworks/models/gemma2-9b-it": 46.8,
    "deepinfra/deepseek-ai/DeepSeek-V3.1": (83.7 + 84.8) / 2,
    "together_ai/deepseek-ai/DeepSeek-R1-0528": 85.0,
    "deepinfra/meta-llama/Llama-4-Scout-17B-16E-Instruct": 74.3,
    "deepinfra/meta-llama/Llama-4-Maverick-17B-128E-Instruct-FP8": 80.5,
}


@pytest.mark.parametrize("name,percent", sorted(NEW_MMLU_PRO.items()))
def test_new_models_resolve_and_carry_their_sourced_mmlu_pro(name, percent):
    assert aggregate(name) == pytest.approx(percent / 100, abs=1e-9), name
    cap = capability(name)
    assert cap is not None and cap.how == "published mmlu_pro"
    assert cap.value == pytest.approx(percent / 100, abs=1e-9)
    # every score names a row, and a mode/shot note where the source distinguishes them
    for s in cap.scores:
        assert s.row and s.source.url.startswith("https://")


def test_mode_dependent_models_keep_both_modes_apart_in_the_notes():
    notes = {s.note for s in published("qwen3-32b")}
    assert notes == {"thinking mode", "non-thinking mode"}
    modes = [s.note for s in published("deepseek-v3.1")]
    assert any("non-thinking" in n for n in modes) and "thinking mode" in modes
    # two modes: the spread between them is reported, not hidden
    assert capability("gemini/gemini-2.5-flash").sd > 0


def test_new_models_with_only_mmlu_are_mapped_and_the_rest_say_why():
    cap = capability("openai/gpt-4.1-mini")
    assert cap is not None and cap.how == "mapped from mmlu"
    assert [s.raw for s in cap.scores] == [87.5]
    table = capability_table()
    for model in (
        "gpt-5-nano", "o3-mini", "claude-3-7-sonnet-20250219", "qwen3-8b",
        "mistral-large-instruct-2407",
    ):  # fmt: skip
        assert model in table.unsourced and capability(model) is None, model
    assert table.resolve("anthropic/claude-3-7-sonnet-20250219") == "claude-3-7-sonnet-20250219"
    assert table.resolve("bedrock/mistral.mistral-large-2407-v1:0") == "mistral-large-instruct-2407"


def test_published_results_order_the_new_frontier_models():
    # sourced numbers, not prices: the 2025 frontier sits above GPT-4o, the small models below
    assert capability("anthropic/claude-opus-4-5").value > capability("openai/gpt-4o").value
    assert (
        capability("gemini/gemini-2.5-pro").value > capability("gemini/gemini-2.0-flash-001").value
    )
    assert capability("openai/gpt-4.1").value > capability("openai/gpt-4.1-nano").value
    assert (
        capability("Llama-4-Maverick-17B-128E-Instruct-FP8").value
        > capability("meta-llama/Llama-4-Scout-17B-16E-Instruct-FP8").value
    )
