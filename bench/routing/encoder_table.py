"""MiniLM vs prefill activations vs both: every router of ``tollgate eval`` on each run.

nice python -m bench.routing.encoder_table --out bench/routing/results/encoders [--runs routerbench/standard]
     [--seeds 0,1,2] [--encoders minilm,activations,both]
python -m bench.routing.encoder_table --out bench/routing/results/encoders --print   # the table from saved runs

Per run (``bench/routing/encoder_runs.py``), seed and encoder it writes the ``tollgate eval`` JSON
plus the (λ, prompt) choices, and prints: pooled and within-category AUDC, QNC, peak,
overpayment, the correctness predictors' mean AUC and Brier score, the diagnostics a router
does not beat, and the paired bootstrap 95% CI of ΔAUDC against the best MiniLM router of
the same run and seed (same test rows). It also reports, per encoder, the layer chosen by
Fisher J with J / d_eff / anisotropy per layer (mean vs last-token pooling) and the latency
of embedding one uncached prompt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bench.routing.encoder_runs import RUNS, Run, run_table
from router_core.evaluation.metrics import bootstrap_delta_audc, bootstrap_delta_within_audc
from router_core.evaluation.result import ROUTER_NAMES

# every router of ``tollgate eval`` but the trivial baselines and Tollgate's ablations
ROUTERS = tuple(r for r in ROUTER_NAMES if r not in ("random", "cheapest", "vanilla", "no_caro"))
LEARNED = ("knn", "mlp", "umr", "shared_trunk", "tollgate")
ENCODERS = ("minilm", "activations", "both")


def single_prompt_latency_ms(encoder, texts: list[str]) -> float:
    """Median wall time to embed one prompt with no cache (the serving path), one thread."""
    from router_core.baselines.threads import single_thread
    from router_core.encoders import make_encoder

    enc = make_encoder(encoder.settings(), cache=False)
    times = []
    with single_thread():  # every encoder on one thread, as the shared box runs them
        enc.encode(texts[:1])  # load the weights
        for t in texts:
            start = time.perf_counter()
            enc.encode([t])
            times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def evaluate(run: Run, seed: int, kind: str, out: Path, n_boot: int) -> dict:
    from router_core.evaluation.runner import run_evaluation

    table = run_table(run, seed)
    from router_core.encoders import make_encoder

    if kind not in ENCODERS:
        raise ValueError(f"unknown encoder {kind!r}; use {ENCODERS}")
    encoder = make_encoder(kind, cache=True)
    start = time.perf_counter()
    res = run_evaluation(
        table, encoder=encoder, routers=ROUTERS, seed=seed, n_boot=n_boot, log=_log
    )
    doc = res.to_json()
    doc["encoder"] = kind
    doc["seed"] = seed
    doc["wall_s"] = time.perf_counter() - start
    doc["predictors"] = res.predictors
    doc["notes"] = {k: v for k, v in res.notes.items() if not k.endswith("_by_category")}
    doc["audc_by_category"] = {
        k[: -len("_audc_by_category")]: v
        for k, v in res.notes.items()
        if k.endswith("_audc_by_category")
    }
    test_texts = [str(t) for t in table.prompts[np.asarray(table.split) == "test"]][:12]
    doc["latency_ms_one_prompt"] = single_prompt_latency_ms(encoder, test_texts)
    if kind == "activations":  # "both" fits the same layer on the same rows
        doc["geometry"] = _geometry(encoder, table)
    stem = _stem(run, seed, kind)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(doc, indent=1, default=_jsonable) + "\n")
    np.savez_compressed(out / f"{stem}.npz", **res.choices)
    _log(f"{stem}: {doc['wall_s']:.0f} s")
    return doc


def _geometry(encoder, table) -> dict:
    """J / d_eff / α per layer for both poolings, on the training rows (cached states)."""
    from router_core.baselines.threads import single_thread
    from router_core.encoders.activations import ActivationEncoder
    from router_core.encoders.layer_geometry import layer_geometry
    from router_core.encoders.prefill_states import POOLINGS

    act = encoder if isinstance(encoder, ActivationEncoder) else encoder.parts[-1]
    rows = np.flatnonzero(np.asarray(table.split) == "train")
    block = act.states.states([str(t) for t in table.prompts[rows]])
    seen = table.with_models(list(table.train_models)).quality[rows]
    out = {"chosen_layer": act.layer, "pooling": act.pooling, "n_train": len(rows)}
    for i, pooling in enumerate(POOLINGS):
        if pooling == act.pooling:
            report = act.geometry
        else:
            with single_thread():
                report = layer_geometry(block[:, :, i], seen)
        out[pooling] = [g.to_dict() for g in report]
    return out


def _jsonable(x):
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(type(x))


def _stem(run: Run, seed: int, kind: str) -> str:
    return f"{run.dataset}_{run.split}_s{seed}_{kind}"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def table_text(out: Path) -> str:
    """The combined table of every saved run, with CIs against the best MiniLM router, then
    the mean over seeds of each run."""
    docs = sorted(
        (json.loads(p.read_text()) for p in out.glob("*_s[0-9]*_*.json")),  # _stem's names
        key=lambda d: (d["dataset"], d["split"], d["seed"], ENCODERS.index(d["encoder"])),
    )
    lines = []
    for d in docs:
        base = out / f"{_stem(Run(d['dataset'], d['split']), d['seed'], 'minilm')}.json"
        ref = json.loads(base.read_text()) if base.exists() else None
        d["_ci"] = _ci_values(d, ref, out)
        lines += _run_block(d)
    return "\n".join(lines + summary_lines(docs))


SUMMARY_ROUTERS = ("single_frontier", "category", *LEARNED)


def summary_lines(docs: list[dict]) -> list[str]:
    """Per run and encoder, each router's AUDC pooled / within category averaged over the
    saved seeds, and in how many seeds its ΔAUDC CI against the best MiniLM router of that
    seed lies above 0 (+) or below 0 (-), pooled and within category."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for d in docs:
        runs.setdefault((d["dataset"], d["split"]), []).append(d)
    lines = [
        "\nMean over seeds: AUDC pooled / within category; [+a-b|+c-d]: seeds whose ΔAUDC CI "
        + "vs the best MiniLM router of that seed is above / below 0, pooled | within"
    ]
    for (dataset, split), group in runs.items():
        by_enc = {e: [d for d in group if d["encoder"] == e] for e in ENCODERS}
        by_enc = {e: ds for e, ds in by_enc.items() if ds}
        seeds = sorted({d["seed"] for d in group})
        n_test = group[0]["n_test"]
        lines.append(
            f"\n{dataset}/{split} · {n_test} test prompts · seeds {','.join(map(str, seeds))}"
        )
        lines.append((f"  {'router':<16}" + "".join(f"{e:<29}" for e in by_enc)).rstrip())
        for name in SUMMARY_ROUTERS:
            cells = []
            for ds in by_enc.values():
                rows = [d["routers"][name] for d in ds if name in d["routers"]]
                if not rows:
                    cells.append(f"{'-':<29}")
                    continue
                audc = statistics.mean(r["audc"] for r in rows)
                within = [r["audc_within"] for r in rows if r.get("audc_within") is not None]
                w = f"{statistics.mean(within):.4f}" if within else "-"
                marks = []
                for kind in ("pooled", "within"):
                    cis = [d["_ci"][name][kind] for d in ds if kind in d["_ci"].get(name, {})]
                    up = sum(lo > 0 for _, lo, _ in cis)
                    down = sum(hi < 0 for _, _, hi in cis)
                    marks.append(f"+{up}-{down}" if cis else "    ")
                bracket = f" [{marks[0]}|{marks[1]}]" if marks != ["    "] * 2 else ""
                cells.append(f"{f'{audc:.4f} / {w}{bracket}':<29}")
            lines.append((f"  {name:<16}" + "".join(cells)).rstrip())
        medians = [statistics.median(d["latency_ms_one_prompt"] for d in ds)
                   for ds in by_enc.values()]
        lat = "".join(f"{f'{m:.0f} ms':<29}" for m in medians)
        lines.append(f"  {'embed 1 prompt':<16}{lat}".rstrip())
    return lines


def _run_block(d: dict) -> list[str]:
    head = (
        f"\n{d['dataset']}/{d['split']} seed {d['seed']} · encoder {d['encoder']} · "
        f"{d['n_test']} test prompts · embed one prompt {d['latency_ms_one_prompt']:.0f} ms"
    )
    lines = [head]
    if "geometry" in d:
        g = d["geometry"]
        best = {p: max(g[p], key=lambda x: x["fisher_j"]) for p in ("mean", "last")}
        lines.append(
            f"  layer {g['chosen_layer']} ({g['pooling']}) by Fisher J on {g['n_train']} "
            "train prompts; best J: "
            + ", ".join(
                f"{p} L{b['layer']} J={b['fisher_j']:.2f} d_eff={b['d_eff']:.1f} "
                f"α={b['anisotropy']:.2f}"
                for p, b in best.items()
            )
        )
    lines.append(
        f"  {'router':<16}{'AUDC':>8}{'within':>8}{'QNC':>7}{'peak':>8}{'overpay':>8}"
        f"{'AUC':>7}{'Brier':>7}  ΔAUDC vs best MiniLM (95% CI), pooled; within  not above"
    )
    ci = {name: "; ".join(_ci_cell(*v[k]) if k in v else "-" for k in ("pooled", "within"))
          for name, v in d.get("_ci", {}).items()}
    for name, m in d["routers"].items():
        q = "never" if m["qnc"] is None else f"{m['qnc']:.3f}"
        w = "-" if m.get("audc_within") is None else f"{m['audc_within']:.4f}"
        auc = "-" if m.get("auc") is None else f"{m['auc']:.3f}"
        brier = "-" if m.get("brier") is None else f"{m['brier']:.3f}"
        lines.append(
            f"  {name:<16}{m['audc']:8.4f}{w:>8}{q:>7}{m['peak']:8.4f}{m['overpay']:8.3f}"
            f"{auc:>7}{brier:>7}  {ci.get(name, ''):<62} {', '.join(m.get('below', []))}"
        )
    return lines


def _ci_cell(best: str, lo: float, hi: float) -> str:
    mark = " *" if lo > 0 else (" -" if hi < 0 else "")
    return f"vs {best}: [{lo:+.4f}, {hi:+.4f}]{mark}"


def _ci_values(d: dict, ref: dict | None, out: Path) -> dict[str, dict[str, tuple]]:
    """ΔAUDC CIs of each learned router against the MiniLM router of the same seed that is
    best on that measure: name -> {"pooled" | "within": (that MiniLM router, low, high)}.
    Within category the bootstrap resamples inside each category (the weights stay)."""
    if ref is None:
        return {}
    learned = [r for r in LEARNED if r in ref["routers"]]
    best = max(learned, key=lambda r: ref["routers"][r]["audc"])
    best_w = max(learned, key=lambda r: ref["routers"][r].get("audc_within") or -1.0)
    run = Run(d["dataset"], d["split"])
    run_key = (run.dataset, run.split)
    table = run_table(next(r for r in RUNS if (r.dataset, r.split) == run_key), d["seed"])
    from router_core.evaluation.fitting import complete_rows

    tp = table.with_models(list(table.deployable_models))
    te = complete_rows(tp, np.flatnonzero(np.asarray(tp.split) == "test"))
    Q, C = tp.quality[te], tp.cost[te]
    cats = None if tp.category is None else np.asarray(tp.category[te], dtype=str)
    mine = np.load(out / f"{_stem(run, d['seed'], d['encoder'])}.npz")
    theirs = np.load(out / f"{_stem(run, d['seed'], 'minilm')}.npz")
    cis: dict[str, dict[str, tuple]] = {}
    for name in LEARNED:
        if name not in mine.files:
            continue
        own = d["encoder"] == "minilm"
        if not (own and name == best):
            lo, hi = bootstrap_delta_audc(mine[name], theirs[best], Q, C, n_boot=500, seed=0)
            cis.setdefault(name, {})["pooled"] = (best, lo, hi)
        if cats is not None and not (own and name == best_w):
            lo, hi = bootstrap_delta_within_audc(
                mine[name], theirs[best_w], Q, C, cats, n_boot=500, seed=0
            )
            cis.setdefault(name, {})["within"] = (best_w, lo, hi)
    return cis


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("results/encoders"))
    ap.add_argument("--runs", default=",".join(f"{r.dataset}/{r.split}" for r in RUNS))
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--encoders", default=",".join(ENCODERS))
    ap.add_argument("--bootstrap", type=int, default=500)
    ap.add_argument("--print", dest="only_print", action="store_true")
    args = ap.parse_args(argv)
    if not args.only_print:
        wanted = set(args.runs.split(","))
        for seed in (int(s) for s in args.seeds.split(",")):
            for run in RUNS:
                if f"{run.dataset}/{run.split}" not in wanted:
                    continue
                for kind in args.encoders.split(","):
                    evaluate(run, seed, kind, args.out, args.bootstrap)
    print(table_text(args.out))
    print(
        "\nΔAUDC: paired bootstrap (500 resamples of the test prompts; within category, "
        "resampled inside each category) against the learned MiniLM router of highest AUDC "
        "(pooled, resp. within) on the same rows; * CI above 0, - below 0."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
