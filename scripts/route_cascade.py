"""Give a router artifact its encoder cascade (router_core/tuning/cascade_fit.py), fitted on its own
training prompts: the static encoder's head on the training rows, the threshold on the
validation carve (the rows `tollgate train` early-stopped and calibrated on; test rows are
never read), each with one short word window of every prompt (``word_windows``). Embedding
every training prompt with int8 MiniLM takes ~10 min on two cores the first time (cached in
$TOLLGATE_CACHE_DIR after).

    python scripts/route_cascade.py --router router_core/default_router          # report only
    python scripts/route_cascade.py --router router_core/default_router --write  # store it

``--write`` rewrites the artifact (arrays.npz gains the static head, router.json its
``cascade`` block; the version gets "@cascade-<hash>"); everything else is kept. Run by
scripts/build_default_router.sh after the promise step.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np

from router_core.artifact import load_meta, load_probes, load_router, save_router
from router_core.baselines import DEFAULT_LAMBDAS
from router_core.data import load_dataset
from router_core.data.splits import carve_val
from router_core.encoders import encoder_for_router, make_encoder
from router_core.tuning.cascade_fit import DEFAULT_AGREEMENT, STATIC_KIND, fit_cascade, word_windows

# serving compares its static encoder's vector of this text with the one recorded here
CHECK_TEXT = "Write a Python function that returns the n-th Fibonacci number, then explain it."
SAVED_KEYS = {"format", "version", "created_at", "k", "delta", "config", "head", "experts",
              "calibration", "metrics", "data_hash", "cascade"}  # what save_router writes


def fitting_rows(config: dict, max_train: int, max_val: int):
    """(table, train rows, val rows) of the router's own training carve, each a seeded sample
    of at most ``max_*`` rows (the map gained 11 points of decisions kept static from 2.5k to
    12k prompts, none from 12k to all 15.7k of the packaged router's)."""
    train = config.get("train") or {}
    seed = int(train.get("seed", 0))
    table = load_dataset(config["dataset"], split="standard", seed=seed)
    table = carve_val(table, float(train.get("val_fraction", 0.1)), seed)
    split = np.asarray(table.split)
    rng = np.random.default_rng(seed)

    def sample(rows: np.ndarray, n: int) -> np.ndarray:
        return np.sort(rng.choice(rows, n, replace=False)) if len(rows) > n else rows

    return (table, sample(np.flatnonzero(split == "train"), max_train),
            sample(np.flatnonzero(split == "val"), max_val))


def fit(router_dir: Path, agreement: float, max_train: int, max_val: int):
    router = load_router(router_dir)
    config = dict(router.config)
    table, tr, va = fitting_rows(config, max_train, max_val)
    full = encoder_for_router(config, cache=True, threads=0)
    static = make_encoder({**full.settings(), "kind": STATIC_KIND}, cache=True, threads=0)
    seed = int((config.get("train") or {}).get("seed", 0))
    train, val = ([str(p) for p in table.prompts[rows]] for rows in (tr, va))
    train, val = train + word_windows(train, seed), val + word_windows(val, seed + 1)
    X_full = full.encode(train + val, batch_size=64)
    X_static = static.encode(train + val, batch_size=64)
    n = len(train)
    check = {"text": CHECK_TEXT, "vector": [float(v) for v in static.encode([CHECK_TEXT])[0]]}
    return router, fit_cascade(router, X_full[:n], X_static[:n], X_full[n:], X_static[n:],
                               DEFAULT_LAMBDAS, static.settings(), agreement, check)


def write(router_dir: Path, cascaded) -> str:
    """Rewrite the artifact with its cascade; keep the rest of router.json and the probes."""
    old = load_meta(router_dir)
    block = cascaded.cascade.settings()
    arrays = b"".join(np.ascontiguousarray(w).tobytes() + np.ascontiguousarray(b).tobytes()
                      for w, b in cascaded.cascade.head.layers)
    digest = hashlib.sha256(json.dumps(block, sort_keys=True).encode() + arrays).hexdigest()[:8]
    base = "@".join(p for p in str(old["version"]).split("@") if not p.startswith("cascade-"))
    version = f"{base}@cascade-{digest}"
    from dataclasses import replace

    save_router(replace(cascaded, version=version), router_dir, metrics=old.get("metrics"),
                data_hash=old.get("data_hash"), probes=load_probes(router_dir) or None,
                extra={k: v for k, v in old.items() if k not in SAVED_KEYS})
    return version


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--router", type=Path, required=True)
    ap.add_argument("--agreement", type=float, default=DEFAULT_AGREEMENT)
    ap.add_argument("--max-train", type=int, default=100_000, help="train prompts the map sees")
    ap.add_argument("--max-val", type=int, default=1500, help="val prompts the threshold sees")
    ap.add_argument("--write", action="store_true", help="store the cascade in the artifact")
    args = ap.parse_args()
    _, cascaded = fit(args.router, args.agreement, args.max_train, args.max_val)
    c = cascaded.cascade
    print(f"{args.router}: threshold {c.threshold:.4f}; on {c.fit['val_prompts']} val prompts and "
          f"word windows "
          f"the static encoder alone agrees with MiniLM on {c.fit['val_static_agreement']:.1%} "
          f"of (prompt, λ) decisions, the cascade runs MiniLM on {c.fit['val_minilm_share']:.1%}")
    if args.write:
        print(f"version {write(args.router, cascaded)}")


if __name__ == "__main__":
    main()
