"""End-to-end: train Tollgate and its ablations on a real slice, evaluate every router."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner
from matplotlib import image

from router_core.evaluation.runner import ROUTER_NAMES, run_evaluation

SMALL = {"epochs": 3, "n_probes": 32, "progress": False}


@pytest.fixture(scope="module")
def rb_result(rb_slice):
    table, X = rb_slice
    return run_evaluation(
        table, embeddings=X, n_boot=200, train_overrides=SMALL, log=lambda _m: None
    )


def test_every_router_evaluated_with_sane_numbers(rb_result, rb_slice):
    table, _ = rb_slice
    r = rb_result
    assert list(r.metrics) == list(ROUTER_NAMES)
    assert r.n_test == int((table.split == "test").sum())
    ref = r.reference
    for name, m in r.metrics.items():
        assert 0.0 <= m.overpay <= 1.0, name
        assert ref.q_cheapest - 1e-12 <= m.audc <= m.peak + 1e-12, name
        assert m.audc <= r.metrics["oracle"].audc + 1e-12, name
    # The cheapest router's curve is the flat line at the cheapest model's quality.
    assert r.metrics["cheapest"].audc == pytest.approx(ref.q_cheapest)
    assert r.metrics["cheapest"].qnc is None or ref.q_cheapest >= ref.q_best
    # Best single model reaches q* exactly at its own cost: QNC 1.
    assert r.metrics["best_single"].qnc == pytest.approx(1.0)
    assert r.metrics["oracle"].overpay == 0.0
    # the learned routers beat choosing at random
    for name in ("knn", "mlp", "umr", "tollgate"):
        assert r.metrics[name].audc > r.metrics["random"].audc, name
    lo, hi = r.delta_audc_ci
    assert lo <= hi
    assert r.best_baseline in (
        "random", "cheapest", "best_single", "single_frontier", "knn", "mlp", "umr"
    )
    # within-category AUDC for every router; the oracle stays on top inside categories too
    assert set(r.audc_within) == set(r.metrics)
    assert r.audc_within["oracle"] >= max(r.audc_within.values()) - 1e-12
    # the single-model frontier is at least as good as always taking the best single model
    assert r.metrics["single_frontier"].audc >= r.metrics["best_single"].audc - 1e-12
    # every P(correct) predictor is scored: better than chance, Brier in [0, 1]
    for name in ("knn", "mlp", "umr", "shared_trunk", "tollgate"):
        p = r.predictors[name]
        assert 0.5 < p["auc"] <= 1.0 and 0.0 <= p["brier"] <= 1.0, name
    assert r.notes["tollgate_train"]["n_probes"] == 32


def test_json_has_exactly_the_documented_shape(rb_result):
    doc = json.loads(json.dumps(rb_result.to_json()))
    assert set(doc) == {"dataset", "split", "n_test", "routers", "delta_audc_ci"}
    assert doc["dataset"] == "routerbench" and doc["split"] == "standard"
    assert list(doc["routers"]) == list(ROUTER_NAMES)
    for metrics in doc["routers"].values():
        assert set(metrics) == {
            "audc", "qnc", "peak", "overpay", "audc_within", "below", "auc", "brier"
        }
        assert isinstance(metrics["audc_within"], float)  # RouterBench has tasks
        assert isinstance(metrics["audc"], float)
        assert metrics["qnc"] is None or isinstance(metrics["qnc"], float)
    assert len(doc["delta_audc_ci"]) == 2


def test_baselines_are_deterministic(rb_slice):
    table, X = rb_slice
    names = ["random", "knn", "mlp", "umr"]
    a = run_evaluation(table, embeddings=X, routers=names, n_boot=10, log=lambda _m: None)
    b = run_evaluation(table, embeddings=X, routers=names, n_boot=10, log=lambda _m: None)
    assert a.to_json() == b.to_json()
    assert a.delta_audc_ci is None  # no tollgate in this run


def test_unseen_models_routes_among_held_out_models_with_probe_information(mmlu_unseen_slice):
    table, X = mmlu_unseen_slice
    r = run_evaluation(
        table,
        embeddings=X,
        routers=["oracle", "best_single", "knn", "umr", "mlp", "tollgate"],
        n_boot=50,
        train_overrides=SMALL,
        log=lambda _m: None,
    )
    assert r.notes["pool"] == list(table.unseen_models)
    # baselines learned from the unseen models' outcomes on Tollgate's 32 probe prompts only
    assert 0 < r.notes["probe_rows"] <= 32
    assert r.notes["knn_k"] == 10
    full = table.with_models(list(table.unseen_models))
    te = table.split == "test"
    complete = np.isfinite(full.quality[te]).all(axis=1)
    assert r.n_test == int(complete.sum())
    assert r.metrics["oracle"].audc >= max(m.audc for m in r.metrics.values()) - 1e-12


def test_eval_command_prints_table_and_writes_json_and_plot(tmp_path, rb_slice):
    from gateway.cli import main

    table, _ = rb_slice
    rows = []
    for i in range(len(table)):
        for j, m in enumerate(table.models):
            rows.append(
                {
                    "prompt_id": table.prompt_ids[i],
                    "prompt": table.prompts[i],
                    "model": m,
                    "quality": table.quality[i, j],
                    "cost": table.cost[i, j],
                    "split": table.split[i],
                }
            )
    import pandas as pd

    data = tmp_path / "slice.parquet"
    pd.DataFrame(rows).to_parquet(data)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    args = ["eval", "--dataset", str(data), "--json", str(out), "--plot", str(png), "--quiet"]
    args += ["--bootstrap", "100", "--set", "epochs=3", "--set", "n_probes=32"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    # a long-format file without categories has no category router and no within AUDC
    names = [r for r in ROUTER_NAMES if r != "category"]
    for name in names:
        assert name in res.output
    doc = json.loads(out.read_text())
    assert doc["dataset"] == "slice" and doc["n_test"] == 80
    assert list(doc["routers"]) == names
    assert doc["routers"]["tollgate"]["audc_within"] is None
    img = image.imread(png)
    assert img.shape[0] > 300 and img.shape[1] > 500
    assert img[..., :3].std() > 0.05  # something was drawn
    bad = CliRunner().invoke(main, ["eval", "--dataset", str(data), "--set", "nope=1"])
    assert bad.exit_code != 0


def test_eval_command_explains_sparse_logs_and_restricts_models(tmp_path, rb_slice):
    """Logs with one model per prompt cannot be scored offline: a clear error, exit 1."""
    import pandas as pd

    from gateway.cli import main

    table, _ = rb_slice
    rows = [
        {
            "prompt_id": table.prompt_ids[i],
            "prompt": table.prompts[i],
            "model": table.models[i % 3],
            "quality": table.quality[i, i % 3],
            "cost": table.cost[i, i % 3],
        }
        for i in range(len(table))
    ]
    data = tmp_path / "observed.csv"
    pd.DataFrame(rows).to_csv(data, index=False)
    res = CliRunner().invoke(main, ["eval", "--dataset", str(data), "--quiet"])
    assert res.exit_code == 1
    assert "no test prompt has an outcome for every model" in res.output
    res = CliRunner().invoke(main, ["eval", "--dataset", "routerbench", "--models", "nope"])
    assert res.exit_code == 2 and "unknown models" in res.output
    res = CliRunner().invoke(main, ["eval", "--dataset", "no-such-thing"])
    assert res.exit_code == 1 and "unknown dataset" in res.output
