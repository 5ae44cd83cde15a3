"""``bench.routing.promise --dataset table.csv`` on long tables it has never seen (issue 46):
a 2-model table and a many-model one, with categories and splits, each printing the curve,
both ceilings and the last line; and the per-category yardstick on a table built to have a
known answer."""

import numpy as np
import pandas as pd

from bench.routing.promise import category_ceiling, judged_stream, main
from tests.router_core.promise.test_bench_quick import HashEncoder


def long_table(path, models: int, n: int = 240, seed: int = 0) -> None:
    """A long table (prompt_id, prompt, model, quality, cost, category, split): in category
    "easy" every model is as good as the strongest, in "hard" skill falls with price."""
    rng = np.random.default_rng(seed)
    skill = np.linspace(0.9, 0.5, models)
    rows = []
    for i in range(n):
        cat = "easy" if i % 2 else "hard"
        split = "train" if i % 10 < 6 else ("val" if i % 10 < 8 else "test")
        for m in range(models):
            p = 0.9 if cat == "easy" else skill[m]
            rows.append({"prompt_id": f"p{i}", "prompt": f"{cat} question {i}", "model": f"m{m}",
                         "quality": float(rng.random() < p), "cost": 2.0 ** (-m),
                         "category": cat, "split": split})  # fmt: skip
    pd.DataFrame(rows).to_csv(path, index=False)


def _last(capsys) -> tuple[dict, str]:
    out = capsys.readouterr().out
    last = out.strip().splitlines()[-1]
    return {kv.split("=")[0]: float(kv.split("=")[1]) for kv in last.split()}, out


def test_two_model_table(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TOLLGATE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "two.csv"
    long_table(path, models=2)
    saved = tmp_path / "two.pkl"
    main(["--quick", "--dataset", str(path), "--hold-out", "1", "--save", str(saved)],
         encoder=HashEncoder())  # fmt: skip
    values, out = _last(capsys)
    assert "category_ceiling" in out and "all known" in out and "n=5000" in out
    # the saved results print the same report again (runs in parallel, merged)
    main(["--merge", str(saved)])
    assert _last(capsys)[0] == values
    assert all(np.isfinite(v) for v in values.values())
    # no judged outcome, no evidence: at cold start the route keeps its reference here
    assert values["auto_drop"] == 0.0 and values["auto_saving"] == 0.0
    assert values["worst_drop_excess"] < 0.1


def test_many_model_table(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("TOLLGATE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "many.csv"
    long_table(path, models=12)
    main(["--quick", "--dataset", str(path), "--hold-out", "2"], encoder=HashEncoder())
    values, _ = _last(capsys)
    assert all(np.isfinite(v) for v in values.values())
    # "easy" is half the prompts and every model matches the reference there: the
    # yardstick sends it to the cheapest, so it saves about half the reference's cost
    assert values["cheap_category_ceiling"] > 0.4
    # 5000 judged pairs on 72 distinct train prompts per category (a prompt judged again
    # counts once) bound "easy" loosely, yet certify a share of it for cheaper backends
    assert values["cheap_saving_after_5000"] > 0.02


def test_category_ceiling_is_the_cheapest_within_the_promise_on_train() -> None:
    q = np.array([[0.90, 0.89, 0.85, 0.50], [0.90, 0.70, 0.60, 0.95]])
    c = np.array([[1.0, 0.5, 0.1, 0.01], [1.0, 0.5, 0.1, 0.01]])
    assert category_ceiling(q, c, 0, 0.01).tolist() == [1, 3]
    assert category_ceiling(q, c, 0, 0.06).tolist() == [2, 3]
    assert category_ceiling(q[:, :1], c[:, :1], 0, 0.06).tolist() == [0, 0]


def test_judged_stream_follows_the_served_mix_of_regions() -> None:
    """Live, a route judges a sample of its own traffic: the bench's stand-in draws train rows
    region by region in the served traffic's shares, whatever the train split's own mix."""
    region = np.array([0] * 90 + [1] * 10 + [2] * 5)  # train rows: 90% in region 0
    train = np.arange(100)  # rows 100-104 (region 2) are not train rows
    shares = np.array([0.2, 0.8, 0.0])
    draws = judged_stream(region, train, shares, 5000, np.random.default_rng(0))
    assert set(draws) <= set(train.tolist())
    got = np.bincount(region[draws], minlength=3) / len(draws)
    assert abs(got[0] - 0.2) < 0.03 and abs(got[1] - 0.8) < 0.03 and got[2] == 0
    # every train row of the scarce region is drawn: its distinct prompts are all judged
    assert set(draws[region[draws] == 1].tolist()) == set(range(90, 100))
    # a served region without train rows gives its draws to the train split as a whole
    only_missing = judged_stream(region, train, np.array([0.0, 0.0, 1.0]), 200,
                                 np.random.default_rng(1))  # fmt: skip
    assert set(only_missing) <= set(train.tolist()) and len(only_missing) == 200


def test_the_refined_rule_runs_and_agrees_at_cold_start(tmp_path, monkeypatch,
                                                        capsys) -> None:
    """``--refined-rule`` (the rule careful replaced) runs on the same table and prints its
    last line; before any outcome nothing is refined, so both rules decide alike."""
    monkeypatch.setenv("TOLLGATE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "many.csv"
    long_table(path, models=12)
    main(["--quick", "--dataset", str(path), "--hold-out", "2"], encoder=HashEncoder())
    careful, _ = _last(capsys)
    main(["--quick", "--dataset", str(path), "--hold-out", "2", "--refined-rule"],
         encoder=HashEncoder())  # fmt: skip
    refined, _ = _last(capsys)
    assert careful["auto_saving"] == refined["auto_saving"]  # n = 0: nothing refined yet
    assert careful["cheap_saving"] == refined["cheap_saving"]
    assert all(np.isfinite(v) for v in refined.values())
