"""The encoder cascade (router_core/tuning/cascade_fit.py) beside int8 MiniLM and the static encoder
alone.

On the standard split of each dataset (seed 0 unless told; by default the encoder
comparison's paired subsets of bench/routing/encoder_runs.py, ``--full`` for whole tables): Tollgate trained on int8 MiniLM's
vectors by the eval runner (``tollgate eval``'s protocol), then given a cascade (the static
head fitted on the train prompts, the threshold on the val prompts; test rows are never read
before scoring), and scored on the test rows over the runner's λ grid as
- ``minilm``: int8 MiniLM alone (the reference);
- ``static``: the static encoder alone through the cascade's map (no fallback);
- ``cascade``: static where its margin clears the threshold, MiniLM elsewhere;
with the share of test decisions that ran MiniLM (mean over the λ grid, and at the gateway's
default cost_weight 0.5). Then, on the packaged router, the p50 of one decision (encode,
project, route over every expert at λ = 0.5; one thread) at 20/50/200 word pieces on each
path, and the cascade's p50 (the mix of both paths at the measured share).

    python -m bench.routing.cascade                         # three datasets, seed 0
    python -m bench.routing.cascade --datasets llmrouter --agreement 0.99

The last line: ``key=value`` fields (per dataset: AUDC deltas and the MiniLM share).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from bench.routing.encoders import DATASETS, DEFAULT_LAM, LENGTHS, prompt_of
from router_core.tuning.cascade_fit import (
    DEFAULT_AGREEMENT,
    STATIC_KIND,
    cascade_choices,
    fit_cascade,
)

FULL_KIND = "minilm-onnx-int8"
TOLERANCE = 0.005  # issue 26: AUDC within 0.005 of int8 MiniLM's on every dataset


def _restricted(router, pool):
    for name in router.model_names:
        if name not in pool:
            router = router.without_expert(name)
    return router, np.array([pool.index(n) for n in router.model_names])


def choosers(router, width: int) -> dict:
    """The three routers as ``run_evaluation`` extras over [Φ_MiniLM | Φ_static] rows."""

    def full(X, pool, lams):
        r, col = _restricted(router, pool)
        return col[r.route_batch(r.project(X[:, :width]), lams)]

    def static(X, pool, lams):
        r, col = _restricted(router, pool)
        return col[r.route_batch(r.project(r.cascade.estimate(X[:, width:])), lams)]

    def cascade(X, pool, lams):
        r, col = _restricted(router, pool)
        idx, ran = cascade_choices(r, X[:, :width], X[:, width:], lams, r.cascade.threshold)
        cascade.ran_full = ran
        return col[idx]

    return {"minilm": full, "static": static, "cascade": cascade}


def load_table(dataset: str, seed: int, full: bool):
    """The standard split, whole or as the encoder comparison's paired subset
    (bench/routing/encoder_runs.py: every test prompt where it can, a seeded part of the rest)."""
    from router_core.data import load_dataset

    if full:
        return load_dataset(dataset, split="standard", seed=seed)
    from bench.routing.encoder_runs import RUNS, run_table

    return run_table(next(r for r in RUNS if (r.dataset, r.split) == (dataset, "standard")),
                     seed)


def measure(dataset: str, seed: int, agreement: float, full: bool) -> dict:
    """AUDC of the three and the MiniLM share on ``dataset``'s test rows."""
    from router_core.encoders import bulk_encoder
    from router_core.evaluation.fitting import eval_rows
    from router_core.evaluation.runner import run_evaluation

    table = load_table(dataset, seed, full)
    prompts = [str(p) for p in table.prompts]
    full_enc, static_enc = bulk_encoder(FULL_KIND), bulk_encoder(STATIC_KIND)
    X_full = full_enc.encode(prompts, batch_size=64)
    X_static = static_enc.encode(prompts, batch_size=64)
    quiet = {"seed": seed, "n_boot": 0, "log": lambda _m: None}
    trained = run_evaluation(table, embeddings=X_full, encoder=full_enc, routers=["tollgate"],
                             **quiet)
    rows = eval_rows(table)
    router = fit_cascade(trained.routers["tollgate"], X_full[rows.tr], X_static[rows.tr],
                         X_full[rows.va], X_static[rows.va], np.asarray(trained_lams()),
                         static_enc.settings(), agreement)
    extra = choosers(router, X_full.shape[1])
    res = run_evaluation(table, embeddings=np.hstack([X_full, X_static]), routers=["cheapest"],
                         extra=extra, **quiet)
    ran = extra["cascade"].ran_full
    at_default = int(np.argmin(np.abs(np.asarray(trained_lams()) - DEFAULT_LAM)))
    return {
        "audc": {k: float(res.metrics[k].audc) for k in ("minilm", "static", "cascade")},
        "tollgate_audc": float(trained.metrics["tollgate"].audc),
        "share": float(ran.mean()),
        "share_default": float(ran[at_default].mean()),
        "threshold": float(router.cascade.threshold),
        "val_share": float(router.cascade.fit["val_minilm_share"]),
        "n_test": len(rows.te),
    }


def trained_lams():
    from router_core.baselines import DEFAULT_LAMBDAS

    return DEFAULT_LAMBDAS


def latency(repeats: int) -> dict[str, dict[int, list[float]]]:
    """ms of one decision on the packaged router per path and length, interleaved."""
    from router_core.artifact import load_router
    from router_core.encoders import make_encoder

    router = load_router()
    encoders = {"static": make_encoder(STATIC_KIND, threads=1),
                "minilm": make_encoder(FULL_KIND, threads=1)}
    if router.cascade is None:  # an artifact without one: a stand-in head, same shapes
        from dataclasses import replace

        from router_core.runtime.router import Cascade, Head
        from router_core.training.static_head import HIDDEN

        rng = np.random.default_rng(0)
        shapes = ((HIDDEN, encoders["static"].dim), (router.head.in_dim, HIDDEN))
        head = Head(tuple((rng.normal(size=s).astype(np.float32),
                           np.zeros(s[0], dtype=np.float32)) for s in shapes))
        router = replace(router, cascade=Cascade(head, 0.0, encoders["static"].settings()))
    prompts = {n: prompt_of(n) for n in LENGTHS}
    times = {p: {n: [] for n in LENGTHS} for p in encoders}
    for path, enc in encoders.items():  # load and warm
        decide(router, path, enc, prompts[LENGTHS[0]])
    for _ in range(repeats):
        for n, text in prompts.items():
            for path, enc in encoders.items():
                t0 = time.perf_counter()
                decide(router, path, enc, text)
                times[path][n].append((time.perf_counter() - t0) * 1000)
    return times


def decide(router, path: str, encoder, text: str):
    """One decision on ``path``: static (Φ̂ through the cascade's map) or MiniLM."""
    phi = encoder.encode([text])
    if path == "static":
        phi = router.cascade.estimate(phi)
    return router.route(router.project(phi)[0], DEFAULT_LAM)


def mixed_p50(static: list[float], full: list[float], share: float) -> float:
    """p50 of one decision when ``share`` of them also pay for MiniLM (a static decision
    first, then MiniLM's): the weighted median of the two paths' samples."""
    both = [(t, 1.0 - share) for t in static]
    both += [(s + f, share) for s, f in zip(static, full)]
    both.sort()
    total, acc = sum(w for _, w in both), 0.0
    for t, w in both:
        acc += w
        if acc >= total / 2:
            return t
    return both[-1][0]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--agreement", type=float, default=DEFAULT_AGREEMENT,
                    help="the cascade must route as MiniLM on this share of val (prompt, λ) decisions, "
                    "pooled over the λ grid")
    ap.add_argument("--repeats", type=int, default=200, help="latency samples per cell")
    ap.add_argument("--full", action="store_true",
                    help="whole tables (default: the encoder comparison's subsets, "
                    "bench/routing/encoder_runs.py; int8 MiniLM embeds ~10 prompts/s per core)")
    a = ap.parse_args(argv)
    datasets = [d for d in a.datasets.split(",") if d]
    results = {d: measure(d, a.seed, a.agreement, a.full) for d in datasets}
    times = latency(a.repeats)
    print(f"{'whole tables' if a.full else 'encoder_runs subsets'}; seed {a.seed}; "
          f"agreement target {a.agreement} pooled over the λ grid (val prompts); "
          f"AUDC on test rows; share = test decisions that ran MiniLM (λ grid mean / λ=0.5)")
    print(f"{'dataset':<13}{'n_test':>7}{'minilm':>9}{'static':>18}{'cascade':>18}"
          f"{'threshold':>11}{'share':>8}{'@0.5':>7}{'val share':>10}")
    fields: dict[str, str] = {}
    worst = float("inf")
    for d, r in results.items():
        m, s, c = (r["audc"][k] for k in ("minilm", "static", "cascade"))
        worst = min(worst, c - m)
        print(f"{d:<13}{r['n_test']:>7}{m:>9.4f}{s:>9.4f} ({s - m:+.4f}){c:>9.4f} "
              f"({c - m:+.4f}){r['threshold']:>11.4f}{r['share']:>8.1%}"
              f"{r['share_default']:>7.1%}{r['val_share']:>10.1%}")
        key = d.replace("-", "_")
        fields[f"{key}_delta"] = f"{c - m:+.4f}"
        fields[f"{key}_static_delta"] = f"{s - m:+.4f}"
        fields[f"{key}_minilm_share"] = f"{r['share']:.3f}"
    mean_share = float(np.mean([r["share"] for r in results.values()]))
    print(f"\ndecision p50 ms (packaged router, λ={DEFAULT_LAM}, one thread; cascade at the "
          f"mean share {mean_share:.1%})")
    print(f"{'tokens':<8}{'static':>9}{'minilm':>9}{'cascade':>9}")
    for n in LENGTHS:
        st, fu = times["static"][n], times["minilm"][n]
        mix = mixed_p50(st, fu, mean_share)
        print(f"{n:<8}{statistics.median(st):>9.2f}{statistics.median(fu):>9.2f}{mix:>9.2f}")
        fields[f"cascade_p50_ms_{n}"] = f"{mix:.2f}"
    fields["worst_delta"] = f"{worst:+.4f}"
    fields["target_met"] = str(worst >= -TOLERANCE)
    fields["minilm_share"] = f"{mean_share:.3f}"
    print(" ".join(f"{k}={v}" for k, v in fields.items()))


if __name__ == "__main__":
    main()
