"""Cold start, measured: leave one model out, then bring it back on a prior and on outcomes.

For held-out models drawn by a seed from RouterBench and MMLU-Pro (always the strongest
model of one and the cheapest of the other, plus random others), on each dataset's
standard split, the pool's test AUDC when the held-out model is

  (a) excluded:   a router trained without it, routing among the others;
  (b) prior:      the same router with the model added on its cold-start prior
                  (router_core.cold_start.placement: placed among its size and family peers from the
                  identity table, at its own mean training cost), no outcome seen;
  (c) refined:    the prior refined by the readout from n = 25, 100, 400 outcomes of the
                  model on training prompts picked by the exploration policy (the gateway's
                  shadow exploration samples requests uniformly, so: a seeded uniform
                  sample of training prompts);
  (d) fingerprint: as ``tollgate models add --fingerprint perplexity`` places a model: a
                  router trained without it in the perplexity space (every other model's
                  recorded answers to the router's probes scored by SmolLM2-135M, CSCR
                  Eq. 4-5), then the model's own fingerprint from its recorded answers added
                  as an expert on the pooled calibration, no retraining of the head and no
                  outcome of the model seen. Only where the table records every model's
                  answers (RouterBench; MMLU-Pro records none: '-'). Few probes and a short
                  scored prefix (``--fingerprint-probes``, ``--fingerprint-tokens``) keep the
                  scoring small on a shared CPU; ``fp_excl`` is that router without the model;
  (e) trained:    the router trained with the model.

Every variant is scored on the same test rows against the full pool's reference (C_min,
C_max), so the AUDCs compare directly. Writes a plot (``--plot``) and prints a table; the
last line is ``prior_minus_excluded=… gap_at_100=… gap_at_400=… fingerprint_minus_excluded=…``
(means over the held-out models; gaps are (e) minus (c); the last is (d) minus (a) over the
held-out models that have (d)).

    python -m bench.routing.cold_start --seed 0 --models 5 --plot cold_start.png
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from router_core.baselines import DEFAULT_LAMBDAS
from router_core.cold_start.placement import identity_traits, place_prior, refine
from router_core.data import load_dataset
from router_core.data.combined import canonical_table
from router_core.encoders import DEFAULT_KIND, known_kinds, make_encoder
from router_core.evaluation.fitting import complete_rows, trained_choices
from router_core.evaluation.metrics import Reference, evaluate_choices
from router_core.fingerprints.perplexity import PerplexityFingerprint, recorded_answers
from router_core.fingerprints.scorer import Scorer
from router_core.identity.table import identity_table
from router_core.runtime.router import Expert
from router_core.training import TrainConfig, train_router

DATASETS = ("routerbench", "mmlu-pro")
COUNTS = (25, 100, 400)
FINGERPRINT_PROBES = 32  # the perplexity router's probes (its space's dimension)
FINGERPRINT_TOKENS = 64  # scored tokens per answer (the scorer's max_tokens)


def pick_models(tables: dict, n: int, seed: int) -> list[tuple[str, str]]:
    """(dataset, model): the strongest of one dataset, the cheapest of the other, and
    random others, all drawn by ``seed``."""
    rng = np.random.default_rng(seed)
    strong_ds, cheap_ds = rng.permutation(list(tables))[:2]
    out = []
    t = tables[strong_ds]
    out.append((strong_ds, t.models[int(np.nanargmax(t.mean_quality()))]))
    t = tables[cheap_ds]
    out.append((cheap_ds, t.models[int(np.nanargmin(t.mean_cost()))]))
    rest = [(d, m) for d, t in tables.items() for m in t.models if (d, m) not in out]
    for i in rng.permutation(len(rest))[: max(0, n - 2)]:
        out.append(rest[int(i)])
    return out


class Pool:
    """One dataset: its table over canonical ids, embeddings, test rows and reference."""

    def __init__(self, table, seed: int, encoder) -> None:
        self.table = table
        self.encoder = encoder
        self.X = encoder.encode(list(map(str, self.table.prompts)))
        split = np.asarray(self.table.split)
        self.train_rows = np.flatnonzero(split == "train")
        self.test = complete_rows(self.table, np.flatnonzero(split == "test"))
        self.ref = Reference.from_matrices(
            self.table.quality[self.test], self.table.cost[self.test]
        )
        self.seed = seed
        self.full = None

    @classmethod
    def load(cls, name: str, seed: int, encoder) -> Pool:
        return cls(canonical_table(load_dataset(name, "standard", seed=seed)), seed, encoder)

    def train(self, models: tuple[str, ...], descriptor=None, **cfg):
        config = replace(TrainConfig(seed=self.seed, progress=False), **cfg)
        return train_router(
            self.table,
            config,
            descriptor,
            embeddings=self.X,
            models=models,
            train_models=models,
            encoder=self.encoder,
        )

    def answers_recorded(self) -> bool:
        """Every model's answers are in the table: what a perplexity router needs."""
        return all(m in self.table.responses for m in self.table.models)

    def audc(self, router) -> float:
        pool = self.table.models
        ch = trained_choices(router, self.X[self.test], pool, DEFAULT_LAMBDAS)
        q, c = self.table.quality[self.test], self.table.cost[self.test]
        return float(evaluate_choices(ch, q, c, self.ref).audc)


def run_model(pool: Pool, model: str, rng: np.random.Generator) -> dict[str, float]:
    """(a), (b), (c) at each count and (e) for one held-out model."""
    t = pool.table
    others = tuple(m for m in t.models if m != model)
    excluded = pool.train(others).router
    known = identity_traits(identity_table())
    j = t.models.index(model)
    cost = float(np.nanmean(t.cost[pool.train_rows, j]))
    prior = place_prior(excluded, known[model], known)
    out = {"excluded": pool.audc(excluded)}
    with_prior = excluded.with_expert(prior.expert(model, cost), a=prior.a, b=prior.b)
    out["prior"] = pool.audc(with_prior)
    order = rng.permutation(pool.train_rows)
    Q_all = excluded.project(pool.X[order[: max(COUNTS)]])
    u_all = t.quality[order[: max(COUNTS)], j]
    for n in COUNTS:
        r = refine(prior, Q_all[:n], u_all[:n])
        out[f"refined_{n}"] = pool.audc(excluded.with_expert(r.expert(model, cost), a=r.a, b=r.b))
    if pool.full is None:
        pool.full = pool.train(t.models).router
    out["trained"] = pool.audc(pool.full)
    return out


def place_fingerprint(
    pool: Pool, model: str, kind: PerplexityFingerprint, n_probes: int = FINGERPRINT_PROBES
):
    """(router without ``model`` in the perplexity space, the same router with ``model``
    added by its fingerprint, the probes, the model's answers to them). As ``models add`` does:
    the head is not retrained and the new expert takes the pooled calibration (a0, b0)."""
    t = pool.table
    others = tuple(m for m in t.models if m != model)
    res = pool.train(others, kind, n_probes=n_probes)
    answers = recorded_answers(t, res.probes, model)
    e = kind.describe({model: answers}, res.probes, [model])[0]
    cost = float(np.nanmean(t.cost[pool.train_rows, t.models.index(model)]))
    added = res.router.with_expert(Expert(model, e.astype(np.float32), cost, kind.name))
    return res.router, added, res.probes, answers


def fingerprinted(
    pool: Pool, model: str, kind: PerplexityFingerprint, n_probes: int = FINGERPRINT_PROBES
) -> dict[str, float]:
    """(d) for one held-out model: ``fp_excl`` (the perplexity router without it),
    ``fingerprint`` (with it fingerprinted) and ``n_missing`` (probes it left unanswered)."""
    without, added, _, answers = place_fingerprint(pool, model, kind, n_probes)
    return {
        "fp_excl": pool.audc(without),
        "fingerprint": pool.audc(added),
        "n_missing": float(sum(a is None for a in answers)),
    }


def plot(rows: list[tuple[str, str, dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [0, *COUNTS]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for ds, model, r in rows:
        ys = [r["prior"] - r["excluded"]] + [r[f"refined_{n}"] - r["excluded"] for n in COUNTS]
        line = ax.plot(xs, ys, marker="o", label=f"{model} ({ds})")[0]
        ax.axhline(r["trained"] - r["excluded"], color=line.get_color(), ls=":", lw=1)
        if "fingerprint" in r:
            ax.plot(0, r["fingerprint"] - r["excluded"], marker="x", ms=9, color=line.get_color())
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xscale("symlog", linthresh=25)
    ax.set_xticks(xs, ["prior", *map(str, COUNTS)])
    ax.set_xlabel("observed outcomes of the held-out model")
    ax.set_ylabel("test AUDC − AUDC without the model (dotted: trained; x: fingerprint)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", type=int, default=5)
    ap.add_argument("--plot", type=Path, default=Path("cold_start.png"))
    ap.add_argument("--encoder", default=DEFAULT_KIND, choices=known_kinds())
    ap.add_argument(
        "--fingerprint",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="measure (d) (scores every RouterBench model's probe answers)",
    )
    ap.add_argument("--fingerprint-probes", type=int, default=FINGERPRINT_PROBES)
    ap.add_argument("--fingerprint-tokens", type=int, default=FINGERPRINT_TOKENS)
    args = ap.parse_args()
    encoder = make_encoder(args.encoder, cache=True)
    print(f"encoder {args.encoder}")
    pools = {d: Pool.load(d, args.seed, encoder) for d in DATASETS}
    kind = None
    if args.fingerprint:
        kind = PerplexityFingerprint(Scorer(max_tokens=args.fingerprint_tokens, threads=1))
    chosen = pick_models({d: p.table for d, p in pools.items()}, args.models, args.seed)
    rng = np.random.default_rng(args.seed + 1)
    rows = []
    cols = [
        "excluded",
        "prior",
        *(f"refined_{n}" for n in COUNTS),
        "fp_excl",
        "fingerprint",
        "trained",
    ]
    print(f"{'dataset':<12} {'model':<30} " + " ".join(f"{c:>11}" for c in cols))
    for ds, model in chosen:
        r = run_model(pools[ds], model, rng)
        if kind is not None and pools[ds].answers_recorded():
            r.update(fingerprinted(pools[ds], model, kind, args.fingerprint_probes))
        rows.append((ds, model, r))
        cells = [f"{r[c]:11.4f}" if c in r else f"{'-':>11}" for c in cols]
        print(f"{ds:<12} {model:<30} " + " ".join(cells), flush=True)
    plot(rows, args.plot)
    print(
        f"wrote {args.plot}; (d) fingerprint: perplexity router on {args.fingerprint_probes} "
        f"probes, {args.fingerprint_tokens} scored tokens per answer (SmolLM2-135M), the "
        "model's fingerprint added without retraining; fp_excl: that router without it; "
        "'-': the dataset records no answers to fingerprint (MMLU-Pro)"
        + ("" if args.fingerprint else " or --no-fingerprint")
    )
    missing = {m: int(r["n_missing"]) for _, m, r in rows if r.get("n_missing")}
    if missing:
        print(f"probes without a recorded answer (their coordinate takes the mean): {missing}")

    def mean(f) -> float:
        return float(np.mean([f(r) for _, _, r in rows]))

    fp_rows = [r for _, _, r in rows if "fingerprint" in r]
    fp = np.mean([r["fingerprint"] - r["excluded"] for r in fp_rows]) if fp_rows else np.nan

    print(
        f"prior_minus_excluded={mean(lambda r: r['prior'] - r['excluded']):.4f} "
        f"gap_at_100={mean(lambda r: r['trained'] - r['refined_100']):.4f} "
        f"gap_at_400={mean(lambda r: r['trained'] - r['refined_400']):.4f} "
        f"fingerprint_minus_excluded={fp:.4f}"
    )


if __name__ == "__main__":
    main()
