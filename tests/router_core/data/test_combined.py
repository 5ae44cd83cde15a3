"""The three benchmarks as one table over canonical expert ids (router_core.data.combined)."""

from __future__ import annotations

import numpy as np

from router_core.data import load_dataset
from router_core.data.combined import (
    combine,
    row_datasets,
    train_cost_scale,
)
from router_core.evaluation.combined import probes_per_dataset
from router_core.identity.table import identity_table


def test_shared_models_are_one_column_and_cells_are_only_where_observed():
    rb, mp = load_dataset("routerbench"), load_dataset("mmlu-pro")
    table = combine([rb, mp])
    ids = identity_table()
    mixtral = "mixtral-8x7b-instruct-v0.1"
    assert table.models.count(mixtral) == 1
    assert len(table.models) == len(rb.models) + len(mp.models) - 1
    src = row_datasets(table)
    q = table.quality[:, table.models.index(mixtral)]
    assert np.isfinite(q[src == "routerbench"]).all() and np.isfinite(q[src == "mmlu-pro"]).all()
    gpt4 = table.quality[:, table.models.index("gpt-4-1106-preview")]
    assert np.isnan(gpt4[src == "mmlu-pro"]).all()  # not observed, never counted as wrong
    # rows, splits and outcomes are each dataset's own
    assert (np.asarray(table.split)[src == "routerbench"] == np.asarray(rb.split)).all()
    col = rb.models.index("mistralai/mixtral-8x7b-chat")
    np.testing.assert_array_equal(q[src == "routerbench"], rb.quality[:, col])
    assert set(table.models) <= set(ids.ids)


def test_costs_are_on_each_datasets_own_scale():
    rb, mp = load_dataset("routerbench"), load_dataset("mmlu-pro")
    table = combine([rb, mp])
    src = row_datasets(table)
    for part in (rb, mp):
        train = (src == part.name) & (np.asarray(table.split) == "train")
        top = np.nanmax(np.nanmean(table.cost[train], axis=0))
        assert abs(top - 1.0) < 1e-9  # the priciest model's mean training cost is 1
    col = rb.models.index("gpt-3.5-turbo-1106")
    rows = src == "routerbench"
    np.testing.assert_allclose(
        table.cost[rows, table.models.index("gpt-3.5-turbo-1106")],
        rb.cost[:, col] / train_cost_scale(rb),
    )


def test_probes_come_from_each_datasets_training_prompts():
    table = combine([load_dataset("routerbench"), load_dataset("mmlu-pro")])
    probes = probes_per_dataset(table, 20, seed=0)
    assert len(probes) == 40 and len(set(probes.ids)) == 40
    train_ids = set(np.asarray(table.prompt_ids)[np.asarray(table.split) == "train"])
    assert set(probes.ids) <= train_ids
    assert sum(p.startswith("routerbench:") for p in probes.ids) == 20


def test_the_dev_split_holds_out_training_rows_and_never_reads_the_test_rows():
    from router_core.evaluation.combined import dev_split

    rb = load_dataset("routerbench")
    dev = dev_split(rb, seed=0)
    split = np.asarray(dev.split)
    test_ids = set(map(str, np.asarray(rb.prompt_ids)[np.asarray(rb.split) == "test"]))
    assert not test_ids & set(map(str, dev.prompt_ids))  # the real test rows are gone
    held = set(map(str, np.asarray(dev.prompt_ids)[split == "test"]))
    fit = set(map(str, np.asarray(dev.prompt_ids)[split != "test"]))
    assert held and not held & fit  # a held-out tenth, disjoint from what trains
    assert (split == "val").any() and (split == "train").any()
    assert 0.05 < len(held) / (len(held) + len(fit)) < 0.15
