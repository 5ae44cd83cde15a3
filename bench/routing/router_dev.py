"""Tune the router on dev folds carved from the *training* rows; the test rows are dropped.

Every Tollgate setting in ``router_core.training.TrainConfig`` was chosen with this script,
never on a test split. A dev fold takes the benchmark's train rows, moves a seeded share of
their prompts (``standard``, ``unseen-models``) or a seeded pair of their categories (``ood``,
which trains on some STEM categories and tests on the rest) to ``test``, keeps ``val`` as
it is, and runs ``router_core.evaluation.run_evaluation`` on it: the same baselines, the
same protocol, the same metrics as ``tollgate eval``.

    python -m bench.routing.router_dev --dataset routerbench --folds 3 \\
        --variant 'wide:{"hidden": 512}' --variant 'no-delta:{"delta": 0}'

prints each router's and each variant's dev AUDC, overpayment rate and QNC per fold and
their means.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

from router_core.data import load_dataset
from router_core.data.splits import random_split
from router_core.data.table import RoutingTable
from router_core.evaluation.runner import run_evaluation

BASELINES = ("best_single", "knn", "mlp", "umr")
DEV_TEST_FRACTION = 0.2
METRICS = (("audc", "AUDC"), ("overpay", "overpayment"), ("qnc", "QNC (nan: never)"))


def dev_fold(table: RoutingTable, fold: int) -> tuple[RoutingTable, np.ndarray]:
    """The table without its test rows, a seeded part of train relabelled ``test``.

    Returns the fold's table and the indices of its rows in ``table``.
    """
    split = np.asarray(table.split, dtype=object)
    keep = np.flatnonzero(split != "test")
    sub = table.rows(keep)
    s = np.asarray(sub.split, dtype=object).copy()
    train = np.flatnonzero(s == "train")
    if table.split_name == "ood":
        cats = np.asarray(sub.category, dtype=str)
        seen = sorted(set(cats[train]))
        rng = np.random.default_rng(1000 + fold)
        held = set(rng.permutation(seen)[:2].tolist())
        s[train[np.isin(cats[train], sorted(held))]] = "test"
    else:
        inner = random_split(sub.prompt_ids[train], DEV_TEST_FRACTION, 1000 + fold)
        s[train[inner == "test"]] = "test"
    return replace(sub.with_split(s), split_name=table.split_name), keep


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="standard")
    ap.add_argument("--folds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--baselines", default=",".join(BASELINES))
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        help="NAME:JSON of TrainConfig overrides for Tollgate (repeatable); "
        "'tollgate' (the defaults) always runs",
    )
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here")
    ap.add_argument(
        "--descriptor",
        default="probe-outcome",
        help="Tollgate's descriptor kind (as tollgate eval --descriptor): probe-outcome, "
        "perplexity, logit",
    )
    args = ap.parse_args(argv)

    from router_core.encoders.minilm import Encoder

    descriptor = None
    if args.descriptor != "probe-outcome":
        from router_core.fingerprints import make_descriptor

        descriptor = make_descriptor(args.descriptor)

    table = load_dataset(args.dataset, split=args.split, seed=args.seed)
    X = Encoder().encode(list(map(str, table.prompts)))
    variants = {"tollgate": {}}
    for item in args.variant:
        name, _, raw = item.partition(":")
        variants[name] = json.loads(raw)
    base = [b for b in args.baselines.split(",") if b]
    # metric → router → one value per fold
    scores: dict[str, dict[str, list[float]]] = {key: {} for key, _ in METRICS}

    def keep(name: str, m) -> None:
        for key, _ in METRICS:
            value = getattr(m, key)
            scores[key].setdefault(name, []).append(np.nan if value is None else value)

    for fold in range(args.folds):
        dev, idx = dev_fold(table, fold)
        Xd = X[idx]
        res = run_evaluation(dev, embeddings=Xd, routers=base, seed=args.seed, n_boot=0,
                             log=lambda _m: None)
        for name in base:
            keep(name, res.metrics[name])
        for name, over in variants.items():
            r = run_evaluation(dev, embeddings=Xd, routers=["tollgate"], seed=args.seed,
                               n_boot=0, train_overrides=over, log=lambda _m: None,
                               descriptor=descriptor)
            keep(name, r.metrics["tollgate"])
        print(f"fold {fold}: {res.n_test} dev-test prompts", file=sys.stderr, flush=True)
    for key, label in METRICS:
        print(f"{args.dataset} / {args.split}: dev {label} over {args.folds} folds of train")
        print(f"{'router':<24}" + "".join(f"{'fold ' + str(f):>9}" for f in range(args.folds))
              + f"{'mean':>9}")
        for name, vals in scores[key].items():
            print(f"{name:<24}" + "".join(f"{v:9.4f}" for v in vals) + f"{np.mean(vals):9.4f}")
    if args.json:
        args.json.write_text(json.dumps({"dataset": args.dataset, "split": args.split,
                                         "variants": variants, **scores}, indent=2))


if __name__ == "__main__":
    main()
