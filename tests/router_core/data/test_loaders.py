"""The loaders read the real shared benchmark files into consistent routing tables."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from router_core.data import load_dataset, shared_data_dir
from router_core.data.llmrouter import count_tokens, prices
from router_core.data.mmlu_pro import ACTIVE_PARAMS_B, price_per_char
from router_core.data.paths import dataset_dir
from router_core.data.routerbench import MODELS as RB_MODELS
from router_core.data.splits import MMLU_PRO_STEM


def _check_common(table) -> None:
    assert len(set(table.prompt_ids)) == len(table)  # one row per prompt
    assert set(np.unique(table.split)) == {"train", "val", "test"}
    observed = ~np.isnan(table.quality)
    assert (table.quality[observed] >= 0).all() and (table.quality[observed] <= 1).all()
    assert np.array_equal(observed, ~np.isnan(table.cost))
    assert (table.cost[observed] >= 0).all()


def test_shared_data_dir_env_override(tmp_path, monkeypatch):
    monkeypatch.setenv("TOLLGATE_DATA_DIR", str(tmp_path))
    assert shared_data_dir() == tmp_path
    with pytest.raises(FileNotFoundError, match="TOLLGATE_DATA_DIR"):
        dataset_dir("routerbench_subset")


def test_shared_data_dir_default_is_sibling_of_repo(monkeypatch):
    monkeypatch.delenv("TOLLGATE_DATA_DIR", raising=False)
    assert (shared_data_dir() / "routerbench_subset").is_dir()
    assert shared_data_dir().parent.name == "shared"


def test_routerbench_counts_costs_and_responses(routerbench):
    t = routerbench
    _check_common(t)
    assert t.models == RB_MODELS
    # 3178 rows, 28 with a missing score dropped (20 train, 8 test).
    assert len(t) == 3150
    assert int((t.split == "test").sum()) == 945
    assert int(np.isin(t.split, ["train", "val"]).sum()) == 2205
    assert not np.isnan(t.quality).any()
    assert set(np.unique(t.quality)) == {0.0, 1.0}
    # Real USD: gpt-4 is the dearest on average, mistral-7b the cheapest.
    mean = dict(zip(t.models, t.mean_cost()))
    assert max(mean, key=mean.get) == "gpt-4-1106-preview"
    assert min(mean, key=mean.get) == "mistralai/mistral-7b-chat"
    assert set(t.responses) == set(RB_MODELS)
    assert all(isinstance(r, str) for r in t.responses["claude-v2"][:50])
    assert set(np.unique(t.category)) == {"arc-challenge", "mbpp", "winogrande"}
    # Prompts are the joined turns, not the Python-list literal.
    assert not any(p.startswith("['") for p in t.prompts[:100])


def test_routerbench_matches_the_raw_csv(routerbench):
    raw = pd.read_csv(dataset_dir("routerbench_subset") / "mbpp_test.csv")
    row = raw.iloc[3]
    i = list(routerbench.prompt_ids).index(str(row["sample_id"]))
    j = routerbench.models.index("claude-v1")
    assert routerbench.quality[i, j] == row["claude-v1"]
    assert routerbench.cost[i, j] == pytest.approx(row["claude-v1|total_cost"])
    assert routerbench.responses["claude-v1"][i] == row["claude-v1|model_response"]
    assert routerbench.split[i] == "test"


def test_mmlu_pro_quality_and_cost_proxy(mmlu_pro):
    t = mmlu_pro
    _check_common(t)
    assert (len(t), t.n_models) == (12032, 29)
    assert int(np.isnan(t.quality).sum()) == 1713
    assert set(t.models) == set(ACTIVE_PARAMS_B)
    chars = pd.read_parquet(dataset_dir("mmlu_pro") / "mmlu_pro_output_chars_wide.parquet")
    j = t.models.index("Meta-Llama-3_1-70B-Instruct")
    expect = chars["Meta-Llama-3_1-70B-Instruct"].to_numpy() * price_per_char(t.models[j])
    # Rows are in file order; a 70B model costs $0.875 per 1M tokens of ~4 chars.
    assert np.allclose(t.cost[:, j], expect)
    assert price_per_char("Meta-Llama-3_1-70B-Instruct") * 4e6 == pytest.approx(0.875)
    # Standard split: a seeded 20% test share, then 10% of train carved to val.
    assert int((t.split == "test").sum()) == round(0.2 * 12032)
    assert "Options" not in t.prompts[0] and "\nA. " in t.prompts[0]


def test_mmlu_pro_ood_trains_on_stem_tests_on_the_rest():
    t = load_dataset("mmlu-pro", split="ood")
    assert t.split_name == "ood"
    train_cats = set(t.category[t.split != "test"])
    test_cats = set(t.category[t.split == "test"])
    assert train_cats == set(MMLU_PRO_STEM)
    assert test_cats.isdisjoint(MMLU_PRO_STEM)
    assert train_cats | test_cats == set(np.unique(t.category))
    assert {"law", "history", "philosophy"} <= test_cats


def test_unseen_models_split_holds_out_a_third_deterministically():
    a = load_dataset("mmlu-pro", split="unseen-models", seed=0)
    b = load_dataset("mmlu-pro", split="unseen-models", seed=0)
    c = load_dataset("mmlu-pro", split="unseen-models", seed=1)
    assert a.unseen_models == b.unseen_models
    assert a.unseen_models != c.unseen_models
    assert len(a.unseen_models) == round(29 / 3)
    assert set(a.seen_models) | set(a.unseen_models) == set(a.models)
    assert set(a.seen_models).isdisjoint(a.unseen_models)
    assert a.deployable_models == a.unseen_models
    # Rows keep the standard split.
    std = load_dataset("mmlu-pro")
    assert np.array_equal(a.split, std.split)
    # Restricting models keeps the role information consistent.
    sub = a.with_models(list(a.models[:10]))
    assert set(sub.unseen_models) == set(a.unseen_models) & set(a.models[:10])


def test_llmrouter_prices_tokens_and_tasks(llmrouter):
    t = llmrouter
    _check_common(t)
    assert int(np.isin(t.split, ["train", "val"]).sum()) == 5608
    # 119 of the 500 test questions are verbatim in train: left out (memorisation, not routing)
    assert int((t.split == "test").sum()) == 500 - 119
    train_text = set(t.prompts[t.split != "test"])
    assert not any(p in train_text for p in t.prompts[t.split == "test"])
    assert t.n_models == 9
    assert "unknown" not in set(t.category)  # every query joined to its task_name
    price = prices()
    items = json.loads((dataset_dir("llmrouter") / "test.json").read_text())
    i = list(t.prompt_ids).index("test.0")
    assert t.prompts[i] == items[0]["question"]
    n_in = count_tokens([items[0]["question"]])[0]
    assert n_in > 10
    for j, m in enumerate(t.models):
        assert t.quality[i, j] == pytest.approx(items[0]["scores"][m])
        # Same tokens for every model: cost ratios equal the price ratios.
        ratio = t.cost[i, j] / t.cost[i, 0]
        assert ratio == pytest.approx(price[m][1] / price[t.models[0]][1])
        assert t.cost[i, j] >= n_in * price[m][0] / 1e6


def test_val_is_carved_from_train_deterministically(routerbench):
    again = load_dataset("routerbench")
    assert np.array_equal(again.split, routerbench.split)
    other = load_dataset("routerbench", seed=3)
    assert not np.array_equal(other.split, routerbench.split)
    # Official test rows never move.
    assert np.array_equal(other.split == "test", routerbench.split == "test")
    n_train_val = int(np.isin(routerbench.split, ["train", "val"]).sum())
    assert int((routerbench.split == "val").sum()) == pytest.approx(0.1 * n_train_val, abs=1)


def test_unknown_names_and_splits_are_refused():
    with pytest.raises(ValueError, match="unknown dataset"):
        load_dataset("no-such-benchmark")
    with pytest.raises(ValueError, match="unknown split"):
        load_dataset("routerbench", split="weird")
    with pytest.raises(ValueError, match="ood"):
        load_dataset("routerbench", split="ood")
