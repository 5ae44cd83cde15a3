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


def test_seeds_of_one_run_are_averaged_and_wins_counted():
    from router_core.evaluation.summary import over_seeds_table

    docs = []
    for tollgate, mlp in ((0.86, 0.85), (0.84, 0.85), (0.88, 0.87)):
        d = _doc("routerbench", "standard", tollgate, None)
        d["routers"]["mlp"] = {"audc": mlp, "qnc": 0.7, "peak": 0.88, "overpay": 0.52}
        docs.append(d)
    lines = over_seeds_table(docs).splitlines()
    row = {ln.split()[0]: ln.split()[1:] for ln in lines[1:-2]}
    assert row["tollgate"] == ["0.8600"] and row["mlp"] == ["0.8567"]
    assert lines[-2].split()[-1] == "2/3"  # beat mlp on two of three seeds
    assert lines[-1].split()[-1] == "3"
