"""The router that knows every model in the data, beside each dataset's own router.

Trains one router on the train rows of RouterBench, MMLU-Pro and LLMRouter together
(``tollgate train --dataset all``: one head, one embedding space, experts by canonical id
from router_core/identity/model_identity.yaml) and each single-dataset router (what
``tollgate eval --dataset D`` trains), then scores both on each dataset's standard test
rows, routing among that dataset's models at its own costs (router_core.evaluation.combined).

    python -m bench.routing.combined_router [--seed 0] [--encoder minilm] [--set epochs=50] [--on val]

prints per dataset the single router's and the combined router's test AUDC, QNC and their
difference; the last line is ``max_loss=…`` (the largest AUDC the combined router gives up
on any dataset; the bar is 0.005). ``--on val`` scores every router on a held-out tenth of
each dataset's training rows instead (all train on the other nine tenths): what training
settings are chosen on, before their test figures are read.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from router_core.artifact import load_meta, load_router
from router_core.descriptors.base import ProbeSet
from router_core.encoders import DEFAULT_KIND, encoder_for_router, known_kinds, make_encoder
from router_core.evaluation.combined import COMBINED, evaluate_combined
from router_core.training import TrainResult

BAR = 0.005


def _value(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text  # a bare word: stop_on=per-dataset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="K=V")
    ap.add_argument("--encoder", default=DEFAULT_KIND, choices=known_kinds())
    ap.add_argument("--on", choices=("test", "val"), default="test")
    ap.add_argument("--variant", action="append", default=[], metavar="K=V[,K=V]",
                    help="also train the combined router with these settings (a column each)")
    ap.add_argument("--router", type=Path, default=None,
                    help="score this saved combined router (e.g. router_core/default_router) "
                         "instead of training one; its own encoder is used")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    def parse(items: list[str]) -> dict:
        return {k: _value(v) for k, _, v in (s.partition("=") for s in items)}

    overrides = parse(args.overrides)
    variants = {v: parse(v.split(",")) for v in args.variant}
    artifact, encoder = None, make_encoder(args.encoder, cache=True, threads=0)
    if args.router is not None:
        router = load_router(args.router)
        meta = load_meta(args.router)
        if meta["config"].get("dataset") != "all":
            raise SystemExit(f"{args.router} was trained on {meta['config'].get('dataset')!r}")
        artifact = TrainResult(router=router, metrics=meta["metrics"], probes=ProbeSet((), ()),
                               data_hash=meta["data_hash"])
        encoder = encoder_for_router(router.config, cache=True, threads=0)
        args.encoder = encoder.kind
        print(f"router {args.router}: version {router.version}")
    ev = evaluate_combined(
        routers=("tollgate",),
        on=args.on,
        seed=args.seed,
        train_overrides=overrides,
        variants=variants,
        n_boot=0,
        encoder=encoder,
        artifact=artifact,
        log=(lambda _m: None) if args.quiet else None,
    )
    m = ev.train.metrics
    print(
        f"encoder {args.encoder}, scored on {args.on} rows; combined router: {len(ev.train.router.experts)} experts, {m['n_train']} train / "
        f"{m['n_val']} val prompts, {m['n_probes']} probes, best epoch {m['best_epoch']}"
    )
    for label, v in ev.variants.items():
        print(f"variant [{label}]: best epoch {v.metrics['best_epoch']}")
    head = f"{'dataset':<12} {'n_test':>6} {'single':>8} {'combined':>9} {'delta':>8}"
    print(head + f" {'QNC single':>10} {'QNC comb.':>10}  verdict"
          + "".join(f"  [{label}] delta" for label in variants))
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
            + "".join(f"  {res.metrics[f'{COMBINED}[{label}]'].audc:.4f} "
                      f"{res.metrics[f'{COMBINED}[{label}]'].audc - single.audc:+.4f}"
                      for label in variants)
        )
    print(f"max_loss={worst:.4f}")


if __name__ == "__main__":
    main()
