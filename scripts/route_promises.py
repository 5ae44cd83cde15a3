"""Measure an artifact's promise parameters on its own validation prompts and store them in it.

    python scripts/route_promises.py --router router_core/default_router           # print
    python scripts/route_promises.py --router router_core/routerbench_router --write

What is measured and why: router_core/tuning/promise_measure.py. The validation prompts are the
training run's own seeded val slice (``router.config["train"]``: seed, val_fraction); test
rows are never read. Q_ref is the artifact's probe prompts (probes.json) encoded with the
router's encoder and projected: the gateway can do the same at startup, so it reproduces the
level map and every prior's level exactly.

``--write`` sets ``router.config["promise"]`` and rewrites router.json only (arrays.npz and
probes.json are untouched). The changed artifact gets a new version, named by what changed as
``gateway/cli/models.py`` names an artifact it edits (``<training version>@<what>``), but by
content, not by clock: ``<training version>@promise-<sha256(promise block)[:8]>``, so a rerun
that measures the same numbers writes the same version (as a retrain with the same data and
settings keeps its name: router_core/training/assemble.py). scripts/build_default_router.sh
runs this for both packaged artifacts after training them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from router_core.artifact import load_meta, load_probes, load_router
from router_core.data import load_dataset
from router_core.data.combined import row_datasets
from router_core.data.splits import carve_val
from router_core.encoders import encoder_for_router
from router_core.identity.capability import capability
from router_core.promise import PROMISES, router_weights
from router_core.tuning.promise_measure import measure_promise


def validation_rows(config: dict):
    """(table, val row indices) of the router's own validation slice (the training carve)."""
    train = config.get("train") or {}
    seed = int(train.get("seed", 0))
    table = load_dataset(config["dataset"], split="standard", seed=seed)
    table = carve_val(table, float(train.get("val_fraction", 0.1)), seed)
    return table, np.flatnonzero(np.asarray(table.split) == "val"), seed


def project(router, encoder, prompts: list[str]) -> np.ndarray:
    """q for each prompt, encoding each distinct text once."""
    uniq = list(dict.fromkeys(prompts))
    Q = router.project(encoder.encode(uniq)).astype(float)
    at = {p: i for i, p in enumerate(uniq)}
    return Q[[at[p] for p in prompts]]


def measure(router_dir: Path) -> tuple[dict, dict]:
    """(the promise block, per-expert facts for the table)."""
    router = load_router(router_dir)
    config = dict(router.config)
    names = list(router.model_names)
    table, va, seed = validation_rows(config)
    cols = [table.models.index(m) if m in table.models else None for m in names]

    def grid(a: np.ndarray) -> np.ndarray:
        return np.stack([a[va, j] if j is not None else np.full(len(va), np.nan)
                         for j in cols], axis=1)  # fmt: skip

    Y, C = grid(table.quality), grid(table.cost)
    groups = (row_datasets(table)[va] if config["dataset"] == "all"
              else np.full(len(va), str(config["dataset"]), dtype=object))  # fmt: skip
    encoder = encoder_for_router(config, cache=True, threads=0)
    Q_val = project(router, encoder, [str(p) for p in table.prompts[va]])
    Q_ref = project(router, encoder, [p["prompt"] for p in load_probes(router_dir)])
    W, b = router_weights(router, names)
    assert np.allclose(1 / (1 + np.exp(-(Q_ref[:5] @ W.T + b))),
                       router.quality_estimates(Q_ref[:5]), atol=1e-5)  # fmt: skip
    caps = {m: capability(m) for m in names}
    published = {m: c.value for m, c in caps.items() if c is not None}
    block, _ = measure_promise(names=names, W=W, b=b, Q_val=Q_val, Y_val=Y, C_val=C,
                               groups=groups, Q_ref=Q_ref, published=published)  # fmt: skip
    block["q_ref"] = "probes"
    block["measured_on"] = (f"{config['dataset']} validation, seed {seed}, "
                            f"{len(set(map(str, table.prompts[va])))} prompts")  # fmt: skip
    level = np.mean(1 / (1 + np.exp(-(Q_ref @ W.T + b))), axis=0)
    facts = {m: {"published": None if caps[m] is None else (caps[m].value, caps[m].how),
                 "level": float(level[j]), "val_mean": float(np.nanmean(Y[:, j])),
                 "val_rows": int(np.isfinite(Y[:, j]).sum())}
             for j, m in enumerate(names)}  # fmt: skip
    return block, facts


def report(block: dict, facts: dict) -> str:
    lm = block["level_map"]
    lines = [
        f"measured on {block['measured_on']}; Q_ref = {block['q_ref']}",
        f"{'expert':<36}{'published':>10} {'how':<20}{'mean p̂':>8}{'mapped':>8}"
        + f"{'val mean':>9}{'rows':>6}{'n':>9}",
    ]
    for m, f in facts.items():
        pub = f["published"]
        mapped = (f"{min(1 - 1e-3, max(1e-3, lm['slope'] * pub[0] + lm['intercept'])):8.3f}"
                  if pub else f"{'':>8}")  # fmt: skip
        lines.append(
            f"{m[:35]:<36}{pub[0] if pub else float('nan'):>10.3f} "
            f"{pub[1] if pub else '-':<20}{f['level']:>8.3f}{mapped}"
            f"{f['val_mean']:>9.3f}{f['val_rows']:>6}{block['trained_n'][m]:>9.1f}"
        )
    rsd = lm["residual_sd"]
    lines.append(
        f"level map: mean p̂ over probes = {lm['slope']:.4f}·published + "
        f"{lm['intercept']:.4f} (residual sd {rsd if rsd is None else round(rsd, 4)},"
        f" {len(lm['models'])} models){'; ' + lm['note'] if lm.get('note') else ''}"
    )
    lines.append(
        f"aggregate-prior pseudo-count n0 = {block['n0']:.2f} (placed as the gateway places a "
        f"prior; among the published experts only: {block['n0_among_published']:.2f})"
    )
    for name, c in block["cases"].items():
        fr = "; ".join(f"{m} at {v['level']:.3f} from {v['from']}" for m, v in
                       c["frontier"].items()) or "none"  # fmt: skip
        lines.append(
            f"case {name}: {c['prompts']} prompts, {len(c['pool'])} backends, "
            f"reference {c['reference']}; on priors: {fr}"
        )
    lines.append(f"{'promise':<9}{'z':>6}{'τ':>9}{'worst drop':>12}{'min saving':>12}")
    for drop, r in block["rules"].items():
        z = f"{r['z']:g}"
        lines.append(
            f"{drop:<9}{z:>6}{r['tolerance']:>9.4f}{r['val_drop']:>+12.4f}{r['val_saving']:>12.3f}"
        )
    zs = {route: block["rules"][f"{d:g}"]["z"] for route, d in PROMISES.items()}

    def zf(z):
        return f"{z:g}"

    lines.append(
        f"n0={block['n0']:.2f} "
        f"trained_n_median={np.median(list(block['trained_n'].values())):.1f} "
        f"auto_z={zf(zs['auto'])} balanced_z={zf(zs['auto-balanced'])} "
        f"cheap_z={zf(zs['auto-cheap'])}"
    )
    return "\n".join(lines)


def write(router_dir: Path, block: dict) -> str:
    """Set config.promise and the new version in router.json (atomic replace); the version."""
    meta = load_meta(router_dir)
    digest = hashlib.sha256(json.dumps(block, sort_keys=True).encode()).hexdigest()[:8]
    meta["version"] = f"{str(meta['version']).split('@', 1)[0]}@promise-{digest}"
    meta["config"] = {**meta.get("config", {}), "promise": block}
    fd, tmp = tempfile.mkstemp(prefix=".router.json.", dir=router_dir)
    with os.fdopen(fd, "w") as fh:
        fh.write(json.dumps(meta, indent=2, default=float))
    os.chmod(tmp, 0o644)
    os.replace(tmp, router_dir / "router.json")
    return meta["version"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--router", type=Path, required=True)
    ap.add_argument("--write", action="store_true", help="store the block in the artifact")
    args = ap.parse_args()
    block, facts = measure(args.router)
    print(report(block, facts))
    if args.write:
        version = write(args.router, block)
        assert load_router(args.router).config["promise"]["n0"] == block["n0"]
        print(f"wrote config.promise into {args.router}/router.json (version {version})")


if __name__ == "__main__":
    main()
