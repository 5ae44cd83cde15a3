"""The promise, measured: each route's realized drop against a held-out frontier reference,
and its saving, at cold start and after judged shadow outcomes (issue 23, item 5).

For each dataset and seed: the K strongest models by the train split's mean quality are held
out as frontier; the router is trained without them (the product's ``train_router``); they
join on priors built only from their train-split mean (standing in for a published score;
router_core.promise.priors). The reference is the strongest of them; the pool is the
held-out models plus the trained ones, at their mean train-split cost (their prices). On the
test prompts each route (auto 0.01, balanced 0.03, cheap 0.06) is scored by the true outcome
of the backend it chose minus the reference's, and its saving 1 − Σ cost / Σ reference cost
(the rows' real costs); then again after 50, 200 and 1000 judged shadow comparisons on
traffic drawn from train rows (the reference beside another held-out model, a judge right
80% of the time per comparison; router_core.promise.judge), which refine the priors.

The rule's confidence z is chosen once per route, to hold at every stage of learning, on the
same experiment one level down (router_core.promise.confidence); its per-prompt tolerance τ
follows the pool's own bounds at each stage: a second router trained without
the frontier, the K next strongest models and those within the reference's lead of them (so
the pseudo-reference leads its pool as the reference leads the real one); the K on priors (all
K, and each alone as the reference; two judge draws each), scored on validation prompts
against their known outcomes.
Test prompts never enter a choice.

Training: ``TrainConfig(seed=seed)`` unchanged (``--quick``: one seed, a seeded sample of at
most 1500 prompts, 30 epochs, for a smoke test); tables too small for 192 probes take a
quarter of their training prompts as probes;
routers are cached per (dataset, seed, models) under $TOLLGATE_CACHE_DIR/promise.

    python -m bench.routing.promise                       # RouterBench, MMLU-Pro, LLMRouter
    python -m bench.routing.promise --dataset table.csv --seeds 0 --hold-out 1
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from router_core.artifact import load_router
from router_core.data import load_dataset
from router_core.encoders import DEFAULT_KIND, bulk_encoder
from router_core.encoders.base import default_cache_dir
from router_core.promise import (
    JUDGE_ACCURACY,
    PROMISES,
    Case,
    TrainedBelief,
    aggregate_prior_pseudo_count,
    choose_confidence,
    prior_from_aggregate,
    realized,
    refine_from_verdicts,
    router_weights,
    simulate_verdicts,
    stack_estimates,
    tolerance_for,
    trained_pseudo_count,
)
from router_core.training import TrainConfig, train_router

DATASETS = ("routerbench", "mmlu-pro", "llmrouter")
COUNTS = (0, 50, 200, 1000)
REF_PROMPTS = 1000  # reference prompts a prior's level is matched on (train rows)
MIRROR_JUDGES = 2  # independent judge draws per case of the rung below
QUICK_ROWS = 1500
KNOWN = "known"  # the ceiling: the frontier's every train outcome, graded without noise
RETRAINED = "retrained"  # beyond it: the head trained with the frontier (z as for KNOWN)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def cached_router(table, X, models, cfg: TrainConfig, encoder):
    """``train_router`` on ``models`` only, cached by (table, models, settings)."""
    key = json.dumps([table.name, len(table), float(np.nansum(table.quality)), sorted(models),
                      cfg.to_dict(), getattr(encoder, "kind", "?")], sort_keys=True, default=str)
    path = default_cache_dir() / "promise" / hashlib.sha256(key.encode()).hexdigest()[:16]
    if (path / "router.json").exists():
        return load_router(path)
    res = train_router(table, cfg, embeddings=X, models=models, train_models=models,
                       encoder=encoder)  # fmt: skip
    res.save(path)
    return load_router(path)


@dataclass
class Level:
    """One rung of the experiment: a router trained on ``trained``; ``frontier`` (strongest
    first, the first the reference) on aggregate priors among them."""

    table: object
    Q: np.ndarray  # query vectors of every row, in this router's space
    trained: tuple[str, ...]
    frontier: tuple[str, ...]
    priors: dict
    trained_beliefs: list
    n0: float
    price: np.ndarray  # (m,) mean train-split cost per backend, in ``names`` order

    @property
    def names(self) -> tuple[str, ...]:
        return self.frontier + self.trained

    @classmethod
    def build(cls, table, X, router, trained, frontier, agg, rows, rng) -> Level:
        Q = router.project(X).astype(float)
        W, b = router_weights(router, trained)
        cols = [table.models.index(m) for m in trained]
        va = rows["val"]
        P_val = _sigmoid(Q[va] @ W.T + b)
        Y_val = table.quality[np.ix_(va, cols)]
        n_tr = [trained_pseudo_count(P_val[:, j], Y_val[:, j]) for j in range(len(cols))]
        tr = rows["train"]
        Q_ref = Q[rng.choice(tr, size=min(REF_PROMPTS, len(tr)), replace=False)]
        a_tr = np.array([agg[m] for m in trained])
        n0 = aggregate_prior_pseudo_count(W, b, a_tr, Q_ref, Q[va])
        # a readout is worth at most what the trained experts' are (their median)
        cap = float(np.median(n_tr))
        # the figure's precision: the train outcomes its mean was taken over
        n_agg = {m: int(np.isfinite(table.quality[tr, table.models.index(m)]).sum())
                 for m in frontier}  # fmt: skip
        priors = {m: replace(prior_from_aggregate(agg[m], W, b, a_tr, Q_ref, n0, n_agg[m]),
                             n_cap=cap) for m in frontier}  # fmt: skip
        beliefs = [TrainedBelief(W[j], b[j], n_tr[j]) for j in range(len(cols))]
        all_cols = [table.models.index(m) for m in frontier + trained]
        price = np.nanmean(table.cost[np.ix_(tr, all_cols)], axis=0)
        return cls(table, Q, trained, frontier, priors, beliefs, n0, price)

    def refined(self, traffic: np.ndarray, rng, accuracy: float = JUDGE_ACCURACY) -> dict:
        """The frontier's priors after judged comparisons on the ``traffic`` rows."""
        if len(traffic) == 0:
            return dict(self.priors)
        t = self.table
        truth = {m: t.quality[traffic, t.models.index(m)] for m in self.frontier}
        verdicts = simulate_verdicts([str(r) for r in traffic], truth, self.frontier[0],
                                     list(self.frontier[1:]), rng, accuracy)  # fmt: skip
        query_of = {str(r): self.Q[r] for r in np.unique(traffic)}
        return refine_from_verdicts(self.priors, verdicts, query_of, accuracy)

    def case(self, priors: dict, rows: np.ndarray) -> Case:
        beliefs = [priors[m] for m in self.frontier] + self.trained_beliefs
        P, N = stack_estimates(beliefs, self.Q[rows])
        cols = [self.table.models.index(m) for m in self.names]
        return Case(P, N, self.table.quality[np.ix_(rows, cols)], self.price, 0,
                    self.table.cost[np.ix_(rows, cols)])  # fmt: skip


def split_rows(table, models) -> dict[str, np.ndarray]:
    """Row indices per split; val and test rows only where every pool model is observed."""
    cols = [table.models.index(m) for m in models]
    complete = np.isfinite(table.quality[:, cols]).all(1) & np.isfinite(table.cost[:, cols]).all(1)
    split = np.asarray(table.split)
    return {
        "train": np.flatnonzero(split == "train"),
        "val": np.flatnonzero((split == "val") & complete),
        "test": np.flatnonzero((split == "test") & complete),
    }


def rung_below(trained, agg, lead: float, k: int) -> tuple[tuple, tuple]:
    """(pseudo-frontier, rest): the k strongest trained models, and the trained models at
    least ``lead`` below the strongest of them (the reference's lead over the trained pool,
    so the rung below is as hard), at least two (the weakest, when the lead leaves fewer)."""
    if len(trained) < k + 2:
        k = max(1, len(trained) - 2)
    pseudo = tuple(trained[:k])
    rest = tuple(m for m in trained[k:] if agg[m] <= agg[pseudo[0]] - lead)
    if len(rest) < 2:
        rest = tuple(trained[k:])[-2:]
    return pseudo, rest


def run(table, X, seed: int, k: int, cfg: TrainConfig, encoder, counts=COUNTS,
        retrained: bool = True) -> dict:
    """{n: {route: (drop, saving, z)}} on one dataset and seed (module docstring)."""
    rows = split_rows(table, table.models)
    agg_arr = np.nanmean(table.quality[rows["train"]], axis=0)
    agg = dict(zip(table.models, agg_arr))
    order = [table.models[i] for i in np.argsort(-agg_arr, kind="stable")]
    frontier, trained = tuple(order[:k]), tuple(order[k:])
    pseudo, rest = rung_below(trained, agg, agg[frontier[0]] - agg[trained[0]], k)
    rng = np.random.default_rng(seed)
    router = cached_router(table, X, trained, replace(cfg, seed=seed), encoder)
    top = Level.build(table, X, router, trained, frontier, agg, rows, rng)
    below_router = cached_router(table, X, rest, replace(cfg, seed=seed), encoder)
    # the rung below, several ways: each pseudo-frontier subset with its strongest as the
    # reference, each refined by two draws of the judge
    subsets = dict.fromkeys([pseudo, pseudo[:1], pseudo[1:2]] if len(pseudo) > 1 else [pseudo])
    belows = [Level.build(table, X, below_router, rest, f, agg, rows, np.random.default_rng(seed))
              for f in subsets]  # fmt: skip
    traffic = np.random.default_rng(1000 + seed).choice(rows["train"], size=max(counts))
    stages = {}  # n -> (groups of the rung below, own val case, test case)
    for n in (*counts, KNOWN):
        # KNOWN: every train row of the frontier, graded exactly (the ceiling of learning)
        seen = rows["train"] if n == KNOWN else traffic[:n]
        acc = 1.0 if n == KNOWN else JUDGE_ACCURACY
        groups = [[b.case(b.refined(seen, np.random.default_rng(seed + 100 * j), acc),
                          rows["val"]) for j in range(MIRROR_JUDGES)] for b in belows]
        priors = top.refined(seen, np.random.default_rng(seed + 7), acc)
        stages[n] = (groups, top.case(priors, rows["val"]), top.case(priors, rows["test"]))
    if retrained:  # the frontier trained into the head, as the periodic retrain would
        full = cached_router(table, X, order, replace(cfg, seed=seed), encoder)
        lvl = Level.build(table, X, full, tuple(order), (), agg, rows, np.random.default_rng(seed))
        stages[RETRAINED] = (stages[KNOWN][0], lvl.case({}, rows["val"]),
                             lvl.case({}, rows["test"]))  # fmt: skip
    out = {n: {} for n in stages}
    for route, drop in PROMISES.items():
        # one z for the route's life: kept at every stage of learning (the ceiling apart)
        z = choose_confidence([g for n in counts for g in stages[n][0]],
                              [stages[n][1] for n in counts], drop)
        z_known = choose_confidence(stages[KNOWN][0], [stages[KNOWN][1]], drop)
        for n, (_, own, test) in stages.items():
            zn = z_known if n in (KNOWN, RETRAINED) else z
            tau = tolerance_for(own.P, own.N, own.cost, own.ref, drop, zn)
            d, _, s = realized(test, tau, zn)
            out[n][route] = (d, s, zn, tau)
    out["meta"] = {"frontier": frontier, "n0": round(top.n0, 2), "pseudo": pseudo,
                   "n_test": len(rows["test"]), "n_val": len(rows["val"])}  # fmt: skip
    return out


def report(results: dict, counts=COUNTS) -> str:
    """The per-dataset table, the saving-vs-outcomes curve and the last line."""
    lines = [f"{'dataset':<14}{'route':<15}" + "".join(f"{'n=' + str(n):>28}" for n in counts)]
    lines.append(" " * 29 + "".join(f"{'drop  saving    z     τ':>28}" for _ in counts))
    worst: dict = {}
    mean_saving: dict = {}
    for ds, per_seed in results.items():
        for route in PROMISES:
            cells = []
            for n in counts:
                d = float(np.mean([r[n][route][0] for r in per_seed]))
                s = float(np.mean([r[n][route][1] for r in per_seed]))
                z = float(np.median([r[n][route][2] for r in per_seed]))
                m = float(np.median([r[n][route][3] for r in per_seed]))
                worst[(route, n)] = max(worst.get((route, n), -np.inf), d)
                mean_saving.setdefault((route, n), []).append(s)
                cells.append(f"{d:+7.4f} {s:7.3f} {z:4.2f} {m:5.3f}")
            lines.append(f"{ds:<14}{route:<15}" + "".join(f"{c:>28}" for c in cells))
        metas = [r["meta"] for r in per_seed]
        lines.append(f"{'':<14}frontier {metas[0]['frontier']} (reference first); priors' "
                     f"n0 {[m['n0'] for m in metas]}; test prompts {metas[0]['n_test']}")
    lines.append("(drop: reference minus route quality, seed mean; saving: 1 − cost / reference "
                 "cost; z, τ: the rule's confidence and per-prompt tolerance, seed median)")
    lines.append("")
    lines.append("saving vs judged outcomes (mean over datasets; worst dataset's drop):")
    for route, promise in PROMISES.items():
        pts = "  ".join(
            f"n={n}: {np.mean(mean_saving[(route, n)]):.3f} ({worst[(route, n)]:+.4f})"
            for n in counts
        )
        kept = all(worst[(route, n)] <= promise for n in counts)
        lines.append(f"  {route:<14} {pts}  promise {promise} {'kept' if kept else 'MISSED'}")
    beyond = {KNOWN: "every train outcome of the frontier graded exactly (its readout)",
              RETRAINED: "the head retrained with the frontier (trained experts)"}
    for stage, what in beyond.items():
        runs = [ps for ps in results.values() if stage in ps[0]]
        if not runs:
            continue
        cells = "  ".join(
            f"{route} {np.mean([np.mean([r[stage][route][1] for r in ps]) for ps in runs]):.3f}"
            f" ({max(np.mean([r[stage][route][0] for r in ps]) for ps in runs):+.4f})"
            for route in PROMISES
        )
        lines.append(f"beyond the curve, {what}: {cells}")
    last = counts[-1]

    def s(route, n):
        return float(np.mean(mean_saving[(route, n)]))

    lines.append(
        f"auto_drop={worst[('auto', 0)]:.4f} auto_saving={s('auto', 0):.4f} "
        f"balanced_drop={worst[('auto-balanced', 0)]:.4f} "
        f"cheap_drop={worst[('auto-cheap', 0)]:.4f} cheap_saving={s('auto-cheap', 0):.4f} "
        f"auto_drop_after_{last}={worst[('auto', last)]:.4f} "
        f"auto_saving_after_{last}={s('auto', last):.4f}"
    )
    return "\n".join(lines)


def main(argv=None, encoder=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--dataset", type=Path, help="a long-format table (replaces --datasets)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--hold-out", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help=f"one seed, at most {QUICK_ROWS} prompts, 30 epochs: a smoke test")
    ap.add_argument("--encoder", default=DEFAULT_KIND)
    args = ap.parse_args(argv)
    names = [str(args.dataset)] if args.dataset else args.datasets
    seeds = args.seeds[:1] if args.quick else args.seeds
    cfg = TrainConfig(progress=False)
    if args.quick:
        cfg = replace(cfg, epochs=30)
    encoder = encoder or bulk_encoder(args.encoder)
    results = {}
    for name in names:
        results[Path(name).stem if args.dataset else name] = per_seed = []
        for seed in seeds:
            table = load_dataset(name, "standard", seed=seed)
            if args.quick and len(table) > QUICK_ROWS:  # fewer prompts, every split kept
                keep = np.random.default_rng(seed).permutation(len(table))[:QUICK_ROWS]
                table = table.rows(np.sort(keep))
            n_train = int((np.asarray(table.split) == "train").sum())
            # tiny tables: at most a quarter of the training prompts as probes
            cfg_t = replace(cfg, n_probes=min(cfg.n_probes, max(8, n_train // 4)))
            X = encoder.encode(list(map(str, table.prompts)))
            per_seed.append(run(table, X, seed, args.hold_out, cfg_t, encoder))
            print(f"{name} seed {seed}: done", flush=True)
    print(report(results))


if __name__ == "__main__":
    main()
