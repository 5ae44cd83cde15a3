"""The combined table lists every router of every run, with the CI row."""

from __future__ import annotations

from router_core.evaluation.summary import combined_table, main


def _doc(dataset: str, split: str, audc: float, ci: list[float] | None) -> dict:
    routers = {
        "oracle": {"audc": 0.97, "qnc": 0.02, "peak": 0.98, "overpay": 0.0},
        "tollgate": {"audc": audc, "qnc": None, "peak": 0.88, "overpay": 0.51},
    }
    return {
        "dataset": dataset,
        "split": split,
        "n_test": 945,
        "routers": routers,
        "delta_audc_ci": ci,
    }


def test_combined_table_has_every_router_and_run(tmp_path, capsys):
    docs = [
        _doc("routerbench", "standard", 0.861, [0.001, 0.02]),
        _doc("mmlu-pro", "ood", 0.5, None),
    ]
    text = combined_table(docs)
    assert "routerbench/standard" in text and "mmlu-pro/ood" in text
    audc_block = text.split("\n\n")[0].splitlines()
    assert audc_block[2].split() == ["tollgate", "0.8610", "0.5000"]
    assert "never" in text  # QNC None
    assert "[+0.0010, +0.0200]" in text
    path = tmp_path / "a.json"
    import json

    path.write_text(json.dumps(docs[0]))
    assert main([str(path)]) == 0
    assert "0.8610" in capsys.readouterr().out
