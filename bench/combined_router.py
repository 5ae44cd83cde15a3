"""The router that knows every model in the data, beside each dataset's own router.

Trains one router on the train rows of RouterBench, MMLU-Pro and LLMRouter together
(``tollgate train --dataset all``: one head, one embedding space, experts by canonical id
from router_core/model_identity.yaml) and each single-dataset router (what
``tollgate eval --dataset D`` trains), then scores both on each dataset's standard test
rows, routing among that dataset's models at its own costs (router_core.evaluation.combined).

    python bench/combined_router.py [--seed 0] [--encoder minilm] [--set epochs=50]

prints per dataset the single router's and the combined router's test AUDC, QNC and their
difference; the last line is ``max_loss=…`` (the largest AUDC the combined router gives up
on any dataset; the bar is 0.005).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from router_core.encoders import DEFAULT_KIND, known_kinds, make_encoder
from router_core.evaluation.combined import COMBINED, evaluate_combined

BAR = 0.005


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    ap.add_argument("--encoder", default=DEFAULT_KIND, choices=known_kinds())
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    overrides = {k: json.loads(v) for k, _, v in (s.partition("=") for s in args.overrides)}
    ev = evaluate_combined(
        routers=("tollgate",),
        seed=args.seed,
        train_overrides=overrides,
        n_boot=0,
        encoder=make_encoder(args.encoder, cache=True),
        log=(lambda _m: None) if args.quiet else None,
    )
    m = ev.train.metrics
    print(
        f"encoder {args.encoder}; combined router: {len(ev.train.router.experts)} experts, {m['n_train']} train / "
        f"{m['n_val']} val prompts, {m['n_probes']} probes, best epoch {m['best_epoch']}"
    )
    head = f"{'dataset':<12} {'n_test':>6} {'single':>8} {'combined':>9} {'delta':>8}"
    print(head + f" {'QNC single':>10} {'QNC comb.':>10}  verdict")
    worst = 0.0
    for name, res in ev.results.items():
        single, comb = res.metrics["tollgate"], res.metrics[COMBINED]
        delta = comb.audc - single.audc
        worst = max(worst, -delta)

        def qnc(x) -> str:
            return "never" if x.qnc is None else f"{x.qnc:.3f}"

        verdict = "ok" if delta >= -BAR else f"loses more than {BAR}"
        print(
            f"{name:<12} {res.n_test:>6} {single.audc:8.4f} {comb.audc:9.4f} {delta:+8.4f} "
            f"{qnc(single):>10} {qnc(comb):>10}  {verdict}"
        )
    print(f"max_loss={worst:.4f}")


if __name__ == "__main__":
    main()
