"""Single-shot versus distribution-aware (DARS) supervision on repeated noisy observations.

RouterBench records one 0/1 outcome per (prompt, model). Feedback and judges are noisy: we
model each observation of a (prompt, model) pair as the recorded outcome flipped with
probability ρ (a judge or user that disagrees with the reference ρ of the time), draw K
observations per pair on the training prompts, and train the same router (train_router,
default TrainConfig) on:

    clean        the recorded outcomes themselves (the reference, not available in practice)
    single       one observation per pair (a new draw per seed)
    mean         positives from q̄ over the K observations (DARS without risk, β = 0)
    dars         positives from q̄ − β·σ (β = 0.2), graded q̄ − β·σ for the rest
    dars graded  q̄ − β·σ as the label throughout (no positives step)

Each cell is the mean ± std of the test AUDC over ``--seeds`` trainings (seed s: training
seed s, and for single-shot also draw s), scored on the clean test split.

    python -m bench.routing.dars_single_vs_aggregated [--rho 0.1 0.2 0.3] [--k 5]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import pandas as pd

from router_core.data import load_dataset
from router_core.data.table import RoutingTable
from router_core.encoders.minilm import Encoder
from router_core.evaluation.promotion import evaluate_on_holdout
from router_core.training import TrainConfig, train_router
from router_core.training import supervision as sv


def noisy_observations(
    table: RoutingTable, rho: float, k: int, rng: np.random.Generator
) -> pd.DataFrame:
    """K observations per observed (train/val prompt, model) cell: y XOR Bernoulli(ρ)."""
    base = sv.table_observations(table)
    reps = pd.concat([base.assign(sample=s) for s in range(k)], ignore_index=True)
    flip = rng.random(len(reps)) < rho
    reps["quality"] = np.where(flip, 1.0 - reps["quality"], reps["quality"])
    return reps


def supervised_table(
    obs: pd.DataFrame, table: RoutingTable, beta: float, labels: str = "positives"
) -> RoutingTable:
    """Aggregate observations back into a one-row-per-prompt table with table's splits."""
    agg = sv.aggregate(obs, models=table.models)
    pos = {k: i for i, k in enumerate(map(str, table.prompt_ids))}
    order = np.array([pos[k] for k in agg.prompt_keys])
    return sv.to_table(
        agg,
        table.prompts[order].tolist(),
        beta=beta,
        split=table.split[order],
        name=table.name,
        labels=labels,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="routerbench")
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--rho", type=float, nargs="+", default=[0.1, 0.2, 0.3])
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--beta", type=float, default=sv.BETA)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    t0 = time.time()
    full = load_dataset(args.dataset, data_dir=args.data_dir)
    phi_all = Encoder().encode(list(map(str, full.prompts)))
    fit = np.isin(full.split, ["train", "val"])
    train, test = full.rows(fit), full.rows(full.split == "test")
    phi_by_id = dict(zip(map(str, full.prompt_ids[fit]), phi_all[fit]))
    phi_test = phi_all[full.split == "test"]

    def score(t: RoutingTable, seed: int) -> dict:
        phi = np.stack([phi_by_id[str(k)] for k in t.prompt_ids])
        cfg = TrainConfig(progress=False, seed=seed)
        router = train_router(t, cfg, embeddings=phi).router
        s = evaluate_on_holdout(router, phi_test, test)
        return {"audc": s.audc, "qnc": s.qnc}

    def seeds(make) -> dict:
        runs = [score(make(s), s) for s in range(args.seeds)]
        a = np.array([r["audc"] for r in runs])
        return {"audc": float(a.mean()), "std": float(a.std()), "runs": runs}

    results: dict = {"dataset": args.dataset, "k": args.k, "beta": args.beta, "rows": []}
    clean = seeds(lambda s: train)
    results["clean"] = clean
    print(f"clean labels: AUDC {clean['audc']:.4f} ± {clean['std']:.4f}  ({args.seeds} seeds)")
    print(f"{'rho':>5} {'single':>16} {'mean K (β=0)':>16} {'DARS (β)':>16} {'DARS graded':>16}")
    for rho in args.rho:
        rng = np.random.default_rng(int(rho * 1000))
        obs = noisy_observations(train, rho, args.k, rng)
        row = {
            "rho": rho,
            # draw s of one observation per pair, trained with seed s
            "single": seeds(
                lambda s, o=obs: supervised_table(sv.single_shot(o, seed=s), train, 0.0)
            ),
            "mean": seeds(lambda s, o=obs: supervised_table(o, train, 0.0)),
            "dars": seeds(lambda s, o=obs: supervised_table(o, train, args.beta)),
            "dars_graded": seeds(lambda s, o=obs: supervised_table(o, train, args.beta, "risk")),
        }
        results["rows"].append(row)
        cells = [
            f"{row[k]['audc']:.4f} ± {row[k]['std']:.4f}"
            for k in ("single", "mean", "dars", "dars_graded")
        ]
        print(f"{rho:5.2f} " + " ".join(f"{c:>16}" for c in cells), flush=True)
    print(f"({time.time() - t0:.0f}s; test split, {len(test)} prompts, K={args.k})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
