"""Combine ``tollgate eval --json`` files into one table: every router on every run.

python -m router_core.evaluation.summary results/*.json

Files of the same dataset and split (other seeds: ``SEED=1 scripts/eval_all.sh DIR``) are
also summarised together: mean AUDC over seeds, and on how many seeds Tollgate beat the
best non-oracle baseline of that seed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path


def _fmt(x: float | None, digits: int = 3) -> str:
    return "never" if x is None else f"{x:.{digits}f}"


def combined_table(docs: Sequence[dict]) -> str:
    """AUDC / QNC / overpayment per router (rows) and run (columns), then the CIs."""
    runs = [f"{d['dataset']}/{d['split']}" for d in docs]
    routers: list[str] = []
    for d in docs:
        routers += [r for r in d["routers"] if r not in routers]
    width = max(22, *(len(r) + 2 for r in runs))
    out = []
    metrics = (("audc", 4), ("audc_within", 4), ("qnc", 3), ("peak", 4), ("overpay", 3))
    for metric, digits in metrics:
        out.append(f"{metric.upper()}".ljust(12) + "".join(r.rjust(width) for r in runs))
        for name in routers:
            cells = []
            for d in docs:
                m = d["routers"].get(name)
                absent = m is None or (metric == "audc_within" and m.get(metric) is None)
                cells.append("-" if absent else _fmt(m[metric], digits))
            out.append(name.ljust(12) + "".join(c.rjust(width) for c in cells))
        out.append("")
    out.append("n_test".ljust(12) + "".join(str(d["n_test"]).rjust(width) for d in docs))
    ci = []
    for d in docs:
        lo_hi = d.get("delta_audc_ci")
        ci.append("-" if lo_hi is None else f"[{lo_hi[0]:+.4f}, {lo_hi[1]:+.4f}]")
    out.append("ΔAUDC 95% CI".ljust(12) + "".join(c.rjust(width) for c in ci))
    out.append("(ΔAUDC = tollgate − the best non-oracle baseline of that run, paired bootstrap)")
    return "\n".join(out)


def over_seeds_table(docs: Sequence[dict]) -> str:
    """Mean AUDC per router and run over the files of that run, and Tollgate's wins."""
    from router_core.evaluation.runner import BASELINES  # the non-oracle routers
    groups: dict[str, list[dict]] = {}
    for d in docs:
        groups.setdefault(f"{d['dataset']}/{d['split']}", []).append(d)
    runs = list(groups)
    routers: list[str] = []
    for d in docs:
        routers += [r for r in d["routers"] if r not in routers]
    width = max(22, *(len(r) + 2 for r in runs))
    out = ["AUDC, mean over seeds".ljust(24) + "".join(r.rjust(width) for r in runs)]
    for name in routers:
        cells = []
        for run in runs:
            vals = [d["routers"][name]["audc"] for d in groups[run] if name in d["routers"]]
            cells.append("-" if not vals else f"{sum(vals) / len(vals):.4f}")
        out.append(name.ljust(24) + "".join(c.rjust(width) for c in cells))
    wins = []
    for run in runs:
        won = n = 0
        for d in groups[run]:
            r = d["routers"]
            base = [r[b]["audc"] for b in BASELINES if b in r]
            if "tollgate" in r and base:
                n += 1
                won += r["tollgate"]["audc"] > max(base)
        wins.append(f"{won}/{n}")
    out.append("tollgate > best baseline".ljust(24) + "".join(w.rjust(width) for w in wins))
    out.append("seeds".ljust(24) + "".join(str(len(groups[r])).rjust(width) for r in runs))
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    paths = [Path(p) for p in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        print("usage: python -m router_core.evaluation.summary RESULT.json ...", file=sys.stderr)
        return 2
    docs = [json.loads(p.read_text()) for p in paths]
    print(combined_table(docs))
    if len({(d["dataset"], d["split"]) for d in docs}) < len(docs):
        print()
        print(over_seeds_table(docs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
