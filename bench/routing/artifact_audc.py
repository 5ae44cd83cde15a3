"""Test AUDC of router artifacts as built, side by side (e.g. the packaged router before and
after a rebuild).

``tollgate eval`` trains its own Tollgate; this scores the files themselves: each artifact
embeds the dataset's standard-split test prompts with the encoder it records, routes them
over the eval runner's λ grid as the runner routes its own Tollgate, and is scored by the runner
(``run_evaluation``'s ``extra`` routers) beside the cheapest and best-single baselines.

    python -m bench.routing.artifact_audc --router old=/tmp/old_router --router new=router_core/default_router
    python -m bench.routing.artifact_audc --dataset routerbench --seed 0 --router packaged=

(an empty path: the packaged default router). An artifact with an encoder cascade is also
scored as served, ``NAME+cascade``: static Φ̂ first, MiniLM where the margin is below its
threshold (router_core/tuning/cascade_fit.py), with the share of test decisions that ran MiniLM. The
last line: ``name=AUDC`` per artifact (and per cascade).
"""

from __future__ import annotations

import argparse

import numpy as np


def chooser(router, table):
    """``run_evaluation``'s ``extra`` callable for an artifact on ``table``'s pool: as the
    runner routes its own Tollgate (the experts' recorded costs), or by canonical id for a
    router trained on several datasets."""
    from router_core.evaluation.combined import dataset_chooser
    from router_core.evaluation.fitting import trained_choices

    if not set(table.models) <= set(router.model_names):
        return dataset_chooser(router, table)
    return lambda X, pool, lams: trained_choices(router, X, pool, lams)


def pool_router(router, table, pool):
    """``router`` restricted to ``pool`` (by canonical id for a router trained on several
    datasets), the pool column of each expert, and the costs it routes with (None: its own)."""
    from router_core.data.combined import canonical_table

    if set(table.models) <= set(router.model_names):
        names, costs = {m: m for m in pool}, None
    else:
        canon = dict(zip(table.models, canonical_table(table).models))
        train = np.asarray(table.split) == "train"
        mean = dict(zip(table.models, np.nanmean(table.cost[train], axis=0)))
        names = {canon[m]: m for m in pool}
        costs = {e: float(mean[m]) for e, m in names.items()}
    for expert in router.model_names:
        if expert not in names:
            router = router.without_expert(expert)
    return router, np.array([pool.index(names[e]) for e in router.model_names]), costs


def cascade_chooser(router, table, width: int, shares: dict, name: str):
    """The artifact as served with its cascade, over rows [Φ_MiniLM | Φ_static]."""
    from router_core.tuning.cascade_fit import cascade_choices

    def choose(X, pool, lams):
        sub, col, costs = pool_router(router, table, pool)
        idx, ran = cascade_choices(sub, X[:, :width], X[:, width:], lams,
                                   sub.cascade.threshold, costs_usd=costs)
        shares[name] = float(ran.mean())
        return col[idx]

    return choose


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--router", action="append", required=True, metavar="NAME=PATH",
                    help="an artifact to score (empty PATH: the packaged default router)")
    ap.add_argument("--dataset", default="routerbench")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from router_core.artifact import load_router
    from router_core.data import load_dataset
    from router_core.encoders import encoder_for_router
    from router_core.evaluation.runner import run_evaluation

    table = load_dataset(a.dataset, split="standard", seed=a.seed)
    test = np.asarray(table.split) == "test"
    prompts = [str(p) for p in table.prompts]

    def embed(enc) -> np.ndarray:
        """Φ of the test rows (the only ones scored; the rest stay zero, unread)."""
        out = np.zeros((len(prompts), enc.dim), dtype=np.float32)
        out[test] = enc.encode([p for p, t in zip(prompts, test) if t], batch_size=64)
        return out
    results = {}
    for spec in a.router:
        name, _, path = spec.partition("=")
        router = load_router(path or None)
        encoder = encoder_for_router(router.config, cache=True, threads=0)  # as recorded
        X = embed(encoder)
        extra, shares, width = {name: chooser(router, table)}, {}, X.shape[1]
        if router.cascade is not None:
            from router_core.encoders import make_encoder

            static = make_encoder(dict(router.cascade.encoder), cache=True, threads=0)
            X = np.hstack([X, embed(static)])
            extra[f"{name}+cascade"] = cascade_chooser(router, table, width, shares,
                                                       f"{name}+cascade")
        full = extra[name]
        extra[name] = lambda Xt, pool, lams, full=full, w=width: full(Xt[:, :w], pool, lams)
        res = run_evaluation(table, embeddings=X, routers=["cheapest", "best_single"],
                             seed=a.seed, n_boot=0, extra=extra, log=lambda _m: None)
        for key in extra:
            m = res.metrics[key]
            results[key] = m.audc
            share = f"; MiniLM on {shares[key]:.1%}" if key in shares else ""
            print(f"{key:<20} {router.version:<52} encoder {encoder.kind:<18} test AUDC "
                  f"{m.audc:.4f} (n_test {int(test.sum())}; cheapest "
                  f"{res.metrics['cheapest'].audc:.4f}, best single "
                  f"{res.metrics['best_single'].audc:.4f}{share})", flush=True)
    print(" ".join(f"{k}={v:.4f}" for k, v in results.items()))


if __name__ == "__main__":
    main()
