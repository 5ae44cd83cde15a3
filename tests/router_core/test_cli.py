"""`tollgate train` end to end on a long-format file cut from real RouterBench rows."""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner

from gateway.cli import main
from router_core.artifact import load_meta, load_router


def test_tollgate_train_writes_a_loadable_artifact(mbpp_table, mbpp_csv, tmp_path):
    t = mbpp_table
    data = mbpp_csv
    out = tmp_path / "router"
    result = CliRunner().invoke(
        main,
        [
            "train",
            "--dataset",
            str(data),
            "--out",
            str(out),
            "--quiet",
            "--no-caro",
            "--set",
            "n_probes=32",
            "--set",
            "epochs=3",
            "--set",
            "hidden=32",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output
    router = load_router(out)
    meta = load_meta(out)
    assert set(router.model_names) == set(t.models) and router.head.out_dim == 32
    assert meta["config"]["train"]["use_caro"] is False
    assert np.isfinite(meta["metrics"]["val_criterion"])


def test_tollgate_train_rejects_unknown_settings(tmp_path):
    result = CliRunner().invoke(
        main,
        ["train", "--dataset", "routerbench", "--out", str(tmp_path / "r"), "--set", "nonsense=1"],
    )
    assert result.exit_code != 0
    assert "unknown TrainConfig field" in result.output
