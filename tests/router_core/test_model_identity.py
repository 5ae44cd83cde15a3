"""The identity table: every model in the data has one id; real LiteLLM names resolve exactly."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from router_core.data.mmlu_pro import ACTIVE_PARAMS_B
from router_core.data.paths import shared_data_dir
from router_core.data.routerbench import MODELS as ROUTERBENCH_MODELS
from router_core.identity.table import identity_table, load_identity_table, model_key

# (LiteLLM model string as a user writes it in model_list, expected expert id)
MATCHES = [
    ("together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo", "llama-3.1-70b-instruct"),
    ("together_ai/meta-llama/Meta-Llama-3.1-8B-Instruct-Turbo", "llama-3.1-8b-instruct"),
    ("groq/llama-3.1-70b-versatile", "llama-3.1-70b-instruct"),
    ("groq/llama-3.1-8b-instant", "llama-3.1-8b-instruct"),
    ("bedrock/meta.llama3-1-70b-instruct-v1:0", "llama-3.1-70b-instruct"),
    ("bedrock/us.meta.llama3-1-8b-instruct-v1:0", "llama-3.1-8b-instruct"),
    ("bedrock/converse/us.meta.llama3-1-70b-instruct-v1:0", "llama-3.1-70b-instruct"),
    ("fireworks_ai/accounts/fireworks/models/llama-v3p1-70b-instruct", "llama-3.1-70b-instruct"),
    ("cerebras/llama3.1-8b", "llama-3.1-8b-instruct"),
    ("nvidia_nim/meta/llama-3.1-8b-instruct", "llama-3.1-8b-instruct"),
    ("openrouter/meta-llama/llama-3.1-70b-instruct", "llama-3.1-70b-instruct"),
    ("groq/llama3-70b-8192", "llama-3-70b-instruct"),
    ("vertex_ai/gemini-1.5-flash-002", "gemini-1.5-flash-002"),
    ("gemini/gemini-1.5-pro-002", "gemini-1.5-pro-002"),
    ("groq/mixtral-8x7b-32768", "mixtral-8x7b-instruct-v0.1"),
    ("mistral/open-mixtral-8x7b", "mixtral-8x7b-instruct-v0.1"),
    ("together_ai/mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b-instruct-v0.1"),
    ("bedrock/mistral.mixtral-8x7b-instruct-v0:1", "mixtral-8x7b-instruct-v0.1"),
    ("mistral/open-mixtral-8x22b", "mixtral-8x22b-instruct-v0.1"),
    ("together_ai/mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b-instruct-v0.2"),
    ("together_ai/mistralai/Mistral-7B-Instruct-v0.3", "mistral-7b-instruct-v0.3"),
    ("bedrock/mistral.mistral-7b-instruct-v0:2", "mistral-7b-instruct-v0.2"),
    ("together_ai/Qwen/Qwen2.5-7B-Instruct-Turbo", "qwen2.5-7b-instruct"),
    ("groq/gemma2-9b-it", "gemma-2-9b-it"),
    ("gpt-4-1106-preview", "gpt-4-1106-preview"),
    ("openai/gpt-3.5-turbo-1106", "gpt-3.5-turbo-1106"),
    ("bedrock/anthropic.claude-v2", "claude-2.0"),
    ("bedrock/anthropic.claude-instant-v1", "claude-instant-1.2"),
    ("together_ai/meta-llama/Llama-2-70b-chat-hf", "llama-2-70b-chat"),
    ("together_ai/codellama/CodeLlama-34b-Instruct-hf", "codellama-34b-instruct"),
    ("together_ai/zero-one-ai/Yi-34B-Chat", "yi-34b-chat"),
    ("vertex_ai/jamba-1.5-large@001", "jamba-1.5-large"),
    ("nvidia_nim/nvidia/llama-3.3-nemotron-super-49b-v1", "llama-3.3-nemotron-super-49b-v1"),
    ("huggingface/microsoft/Phi-3-mini-4k-instruct", "phi-3-mini-4k-instruct"),
    ("mistral/open-mistral-nemo-2407", "mistral-nemo-12b-instruct"),
]

# Near misses that must resolve to nothing: a sibling size, a newer or moving name, a
# fine-tune, a different Bedrock revision, a base model for its instruct sibling.
NO_MATCH = [
    "gpt-4o-mini",
    "gpt-4o",
    "openai/gpt-4",
    "gpt-4-turbo",
    "gpt-4-0613",
    "gpt-3.5-turbo",
    "gpt-3.5-turbo-0125",
    "ft:gpt-3.5-turbo-1106:acme::abc123",
    "anthropic/claude-3-5-sonnet-20240620",
    "anthropic/claude-3-haiku-20240307",
    "claude-2",
    "claude-2.1",
    "bedrock/anthropic.claude-v2:1",
    "vertex_ai/gemini-1.5-flash",
    "gemini/gemini-1.5-flash-001",
    "gemini/gemini-2.0-flash",
    "together_ai/meta-llama/Meta-Llama-3.1-405B-Instruct-Turbo",
    "together_ai/meta-llama/Llama-3.2-3B-Instruct-Turbo",
    "groq/llama-3.3-70b-versatile",
    "together_ai/meta-llama/Llama-2-13b-chat-hf",
    "together_ai/mistralai/Mistral-7B-Instruct-v0.1-fake",
    "ollama/llama3.1",
    "mistral/mistral-large-latest",
    "deepseek/deepseek-chat",
    "azure/my-prod-deployment",
    "",
]


@pytest.mark.parametrize("model,expected", MATCHES)
def test_real_litellm_names_resolve_to_their_expert(model, expected):
    match = identity_table().resolve(model)
    assert match is not None, model
    assert match.id == expected


@pytest.mark.parametrize("model", NO_MATCH)
def test_near_misses_resolve_to_nothing(model):
    assert identity_table().resolve(model) is None


def test_sizes_and_tuning_are_never_conflated():
    t = identity_table()
    assert t.resolve("groq/llama-3.1-8b-instant").id != t.resolve("groq/llama-3.1-70b-versatile").id
    assert t.resolve("Meta-Llama-3_1-8B").id == "llama-3.1-8b"  # base, not the instruct model
    assert t.resolve("Meta-Llama-3_1-8B-Instruct").id == "llama-3.1-8b-instruct"
    assert t.resolve("Mixtral-8x7B-v0.1").id != t.resolve("Mixtral-8x7B-Instruct-v0.1").id


def test_a_model_in_several_datasets_is_one_expert():
    t = identity_table()
    assert t.canonical("routerbench", "mistralai/mixtral-8x7b-chat") == "mixtral-8x7b-instruct-v0.1"
    assert t.canonical("mmlu-pro", "Mixtral-8x7B-Instruct-v0.1") == "mixtral-8x7b-instruct-v0.1"
    assert t.canonical("llmrouter", "mixtral-8x7b-instruct-v0.1") == "mixtral-8x7b-instruct-v0.1"
    assert t.canonical("mmlu-pro", "Meta-Llama-3_1-8B-Instruct") == t.canonical(
        "llmrouter", "llama-3.1-8b-instruct"
    )


def test_every_dataset_model_has_exactly_one_id():
    t = identity_table()
    assert set(t.columns_of("routerbench")) == set(ROUTERBENCH_MODELS)
    assert set(t.columns_of("mmlu-pro")) == set(ACTIVE_PARAMS_B)
    llm = shared_data_dir() / "llmrouter" / "default_llm.json"
    if llm.exists():  # the loader prices every model of this file
        assert set(t.columns_of("llmrouter")) == set(json.loads(llm.read_text()))
    wide = shared_data_dir() / "mmlu_pro" / "mmlu_pro_correct_wide.parquet"
    if wide.exists():
        assert set(t.columns_of("mmlu-pro")) == set(pd.read_parquet(wide).columns)
    n = len(ROUTERBENCH_MODELS) + len(ACTIVE_PARAMS_B) + len(t.columns_of("llmrouter"))
    shared = sum(len(e.columns) - 1 for e in t.experts)
    assert len(t.experts) == n - shared


def test_model_key_drops_provider_organisation_and_region():
    assert model_key("together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo") == (
        "meta-llama-3.1-70b-instruct-turbo"
    )
    assert model_key("bedrock/eu.anthropic.claude-v2") == "anthropic.claude-v2"
    assert model_key("gpt-4o-mini") == "gpt-4o-mini"


def test_an_alias_naming_two_models_is_refused(tmp_path):
    path = tmp_path / "ids.yaml"
    path.write_text(
        "experts:\n"
        "  - {id: a-7b, aliases: [shared-name]}\n"
        "  - {id: a-70b, aliases: [org/shared-name]}\n"
    )
    with pytest.raises(ValueError, match="names both"):
        load_identity_table(path)
