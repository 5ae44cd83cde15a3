"""Training the combined router: each dataset's own router as teacher
(router_core.training.distillation) and each dataset's cells weighed by a power of their count (TrainConfig.balance)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from router_core.data import load_dataset
from router_core.data.combined import combine, row_datasets
from router_core.descriptors.base import ProbeSet
from router_core.evaluation.combined import train_combined
from router_core.training.config import TrainConfig
from router_core.training.distillation import teacher_quality
from router_core.training.objective import build_targets


@pytest.fixture(scope="module")
def small_combined(mbpp_table):
    """RouterBench's mbpp rows and 240 MMLU-Pro rows, combined, with real embeddings."""
    from router_core.encoders.minilm import Encoder

    mp = load_dataset("mmlu-pro")
    keep = np.isin(np.asarray(mp.split), ["train", "val"])
    mp = mp.rows(np.flatnonzero(keep)[:240])
    table = combine([mbpp_table.rows(np.asarray(mbpp_table.split) != "test"), mp])
    X = Encoder().encode(list(map(str, table.prompts)))
    return table, np.asarray(X)


CFG = TrainConfig(seed=0, epochs=25, n_probes=24, progress=False)


def test_teacher_covers_exactly_the_cells_its_dataset_observed(small_combined):
    table, X = small_combined
    T = teacher_quality(table, X, CFG)
    assert T.shape == table.quality.shape
    src = row_datasets(table)
    for name in dict.fromkeys(src):
        rows = src == name
        observed = np.isfinite(table.quality[rows]).any(axis=0)
        assert np.isfinite(T[rows][:, observed]).all()
        assert np.isnan(T[rows][:, ~observed]).all()  # another dataset's expert: no teacher
    finite = T[np.isfinite(T)]
    assert ((finite > 0) & (finite < 1)).all()
    # the teacher ranks outcomes: correct cells get a higher p̂ on average
    q = table.quality
    ok = np.isfinite(q) & np.isfinite(T)
    assert T[ok & (q > 0.5)].mean() > T[ok & (q <= 0.5)].mean()


def test_quality_target_mixes_gold_and_teacher():
    table = load_dataset("routerbench")
    train = table.rows(np.flatnonzero(np.asarray(table.split) == "train")[:50])
    models = train.models
    rng = np.random.default_rng(0)
    T = rng.uniform(0.1, 0.9, size=train.quality.shape)
    T[:, 0] = np.nan  # no teacher for the first model: its target stays gold
    probes = ProbeSet((), ())
    phi = np.zeros((len(train), 4), dtype=np.float32)
    tg = build_targets(train, phi, probes, models, models, replace(CFG, distill=0.25), T)
    U = train.quality
    np.testing.assert_allclose(tg.U_cal[:, 1:], 0.75 * U[:, 1:] + 0.25 * T[:, 1:])
    np.testing.assert_array_equal(tg.U_cal[:, 0], U[:, 0])
    off = build_targets(train, phi, probes, models, models, CFG, T)  # distill=0: gold only
    np.testing.assert_array_equal(off.U_cal, U)


def test_distilled_combined_router_knows_every_expert_and_differs(small_combined):
    table, X = small_combined
    plain = train_combined(table, CFG, embeddings=X)
    taught = train_combined(table, replace(CFG, distill=0.5), embeddings=X)
    assert taught.router.model_names == plain.router.model_names
    assert not np.allclose(taught.router.head.layers[0][0], plain.router.head.layers[0][0])


def test_balance_weighs_each_datasets_cells_by_a_power_of_their_count(small_combined):
    """TrainConfig.balance: a dataset's cells weigh ∝ n_cells^−b; the cells average 1."""
    from router_core.training.objective import balance_weights

    table, _ = small_combined
    rows = table.split_rows("train")
    U = rows.quality
    cells = np.isfinite(U).sum(axis=1)
    src = row_datasets(rows).astype(str)
    totals = {d: cells[src == d].sum() for d in np.unique(src)}
    for b in (0.0, 0.5, 1.0):
        w = balance_weights(rows, U, b)
        assert np.isclose((w * cells).sum(), cells.sum())  # mean cell weight 1
        share = {d: (w * cells)[src == d].sum() for d in totals}
        expect = {d: n ** (1 - b) for d, n in totals.items()}
        norm = sum(expect.values()) / sum(share.values())
        for d in totals:  # each dataset's total weight ∝ n_d^(1 − b)
            assert np.isclose(share[d] * norm, expect[d])
    one = table.rows(row_datasets(table) == "mmlu-pro")
    one = replace(one, name="mmlu-pro")  # a single-dataset table is never reweighed
    np.testing.assert_array_equal(balance_weights(one, one.quality, 0.5), np.ones(len(one)))
