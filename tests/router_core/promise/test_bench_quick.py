"""bench/routing/promise.py --quick on a tiny generated long-format table prints its last line."""

import hashlib

import numpy as np
import pandas as pd

from bench.routing.promise import main


class HashEncoder:
    """Deterministic unit vectors from the text (no model): enough for a smoke test."""

    kind = "test-hash"

    def settings(self) -> dict:
        return {"kind": self.kind}

    def encode(self, texts, progress: bool = False) -> np.ndarray:
        out = []
        for t in texts:
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).normal(size=384)
            out.append(v / np.linalg.norm(v))
        return np.asarray(out, dtype=np.float32)


def _table(path, n=160, models=5, seed=0):
    rng = np.random.default_rng(seed)
    skill = np.linspace(0.9, 0.4, models)
    rows = []
    for i in range(n):
        hard = rng.random()
        for m in range(models):
            p = np.clip(skill[m] - 0.3 * hard + 0.1, 0.02, 0.98)
            rows.append({"prompt_id": f"p{i}", "prompt": f"question {i} difficulty {hard:.2f}",
                         "model": f"m{m}", "quality": float(rng.random() < p),
                         "cost": 10.0 ** (-m)})
    pd.DataFrame(rows).to_csv(path, index=False)


def test_quick_run_prints_the_last_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TOLLGATE_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "tiny.csv"
    _table(path)
    main(["--quick", "--dataset", str(path), "--hold-out", "1"], encoder=HashEncoder())
    last = capsys.readouterr().out.strip().splitlines()[-1]
    keys = [kv.split("=")[0] for kv in last.split()]
    # the issue-46 fields follow the cold-start ones (the curve now runs to 5000 outcomes)
    assert keys == ["auto_drop", "auto_saving", "balanced_drop", "cheap_drop", "cheap_saving",
                    "auto_drop_after_5000", "auto_saving_after_5000",
                    "balanced_saving_after_5000", "cheap_saving_after_5000",
                    "auto_category_ceiling", "balanced_category_ceiling",
                    "cheap_category_ceiling", "worst_drop_excess"]
    assert all(np.isfinite(float(kv.split("=")[1])) for kv in last.split())


def test_rung_below_keeps_the_reference_lead():
    from bench.routing.promise import rung_below

    agg = {"a": 0.80, "b": 0.78, "c": 0.75, "d": 0.70, "e": 0.60, "f": 0.55}
    pseudo, rest = rung_below(tuple(agg), agg, lead=0.1, k=2)
    assert pseudo == ("a", "b") and rest == ("d", "e", "f")  # 0.80 − 0.1 = 0.70 or below
    pseudo, rest = rung_below(tuple(agg), agg, lead=0.5, k=2)
    assert rest == ("e", "f")  # the lead leaves none: the two weakest
