"""Query encoders side by side: routing AUDC, routing decisions and encode latency.

For each encoder kind (``router_core.encoders``), on the standard split of each dataset:
Tollgate retrained on that encoder's vectors and scored by the eval runner (``tollgate eval``'s
protocol: AUDC on the test prompts), the share of test prompts it routes to the same model as
the router retrained on torch MiniLM's vectors at the gateway's default λ (cost_weight 0.5),
and, in the same process, the p50 time to encode one prompt of 20, 50 and 200 word pieces
(one thread each, encoders interleaved so that machine load hits them alike).

The last line names the default encoder by its rule: the fastest (p50
at 50 word pieces) whose AUDC is at most 0.005 below MiniLM's on every dataset.

    python -m bench.routing.encoders                       # seed 0, every kind, three datasets
    python -m bench.routing.encoders --seeds 0,1,2 --json out.json
    python -m bench.routing.encoders --skip-audc           # latency only
    python -m bench.routing.encoders --encoders minilm,minilm-onnx-int8,minilm-static \
        --latency-encoders minilm-onnx                 # minilm-onnx timed, not retrained

Embeddings go through the on-disk cache, so a rerun only retrains.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from router_core.encoders import bulk_encoder, encoder_class, known_kinds, make_encoder

TORCH = "minilm"  # the reference encoder
DATASETS = ("routerbench", "mmlu-pro", "llmrouter")
DEFAULT_LAM = 0.5  # the gateway's default cost_weight (gateway/config/settings.py Route)
AUDC_TOLERANCE = 0.005
LENGTHS = (20, 50, 200)
# a realistic request to cut to a given number of word pieces
TEXT = (
    "I am writing a small inventory service in Python with FastAPI and SQLAlchemy. When two "
    "requests reserve the last item at the same time, both succeed and the stock goes "
    "negative. Explain why this race happens, show how to fix it with a row lock or an atomic "
    "update in PostgreSQL, and compare both fixes for throughput under contention. Also say "
    "how I should test the fix so that the test fails reliably before it and passes after, "
    "without sleeping in the test, and what isolation level the database should use. "
) * 4


def prompt_of(n_pieces: int) -> str:
    """A prefix of TEXT that MiniLM's tokenizer splits into ``n_pieces`` word pieces."""
    from tokenizers import Tokenizer

    from router_core.encoders.minilm import default_model_path

    tok = Tokenizer.from_file(str(Path(default_model_path()) / "tokenizer.json"))
    tok.no_truncation()
    offsets = tok.encode(TEXT, add_special_tokens=False).offsets
    return TEXT[: offsets[n_pieces - 1][1]]


def latency(kinds: list[str], repeats: int) -> dict[str, dict[int, float]]:
    """p50 ms of ``encode([prompt])`` per kind and prompt length, interleaved."""
    if TORCH in kinds:
        import torch

        torch.set_num_threads(1)  # as the gateway runs it (encoder_threads: 1)
    encoders = {k: make_encoder(k, threads=1) for k in kinds}
    prompts = {n: prompt_of(n) for n in LENGTHS}
    for enc in encoders.values():
        enc.encode([prompts[LENGTHS[0]]])  # load and warm
    times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in LENGTHS} for k in kinds}
    for _ in range(repeats):
        for n, text in prompts.items():
            for kind, enc in encoders.items():
                t0 = time.perf_counter()
                enc.encode([text])
                times[kind][n].append((time.perf_counter() - t0) * 1000)
    return {k: {n: statistics.median(v) for n, v in per.items()} for k, per in times.items()}


def routing(kinds: list[str], datasets: list[str], seeds: list[int], base: str) -> dict:
    """AUDC of Tollgate retrained on each kind's vectors, and its decisions beside MiniLM's."""
    from router_core.data import load_dataset
    from router_core.evaluation.runner import run_evaluation

    out: dict = {k: {d: {"audc": [], "same": []} for d in datasets} for k in kinds}
    for dataset in datasets:
        for seed in seeds:
            table = load_dataset(dataset, split="standard", seed=seed)
            test = np.asarray(table.split) == "test"
            chosen = {}
            for kind in [base, *[k for k in kinds if k != base]]:
                encoder = bulk_encoder(kind)
                X = encoder.encode(list(map(str, table.prompts)), batch_size=64)
                result = run_evaluation(
                    table,
                    embeddings=X,
                    encoder=encoder,
                    routers=["tollgate"],
                    seed=seed,
                    log=lambda _msg: None,
                )
                router = result.routers["tollgate"]
                idx = router.route_batch(router.project(X[test]), np.array([DEFAULT_LAM]))[0]
                chosen[kind] = np.asarray(router.model_names)[idx]
                cell = out.setdefault(kind, {}).setdefault(dataset, {"audc": [], "same": []})
                cell["audc"].append(float(result.metrics["tollgate"].audc))
                cell["same"].append(float(np.mean(chosen[kind] == chosen[base])))
                print(
                    f"  {dataset} seed {seed} {kind}: AUDC {cell['audc'][-1]:.4f}, "
                    f"same decision as {base} {cell['same'][-1]:.1%}",
                    file=sys.stderr,
                    flush=True,
                )
    return out


def default_by_rule(p50: dict, audc: dict, datasets: list[str], base: str) -> str | None:
    """The fastest kind whose AUDC is within AUDC_TOLERANCE of ``base``'s on every dataset."""
    ref = {d: np.mean(audc[base][d]["audc"]) for d in datasets}
    ok = [
        k
        for k in audc
        if all(np.mean(audc[k][d]["audc"]) >= ref[d] - AUDC_TOLERANCE for d in datasets)
    ]
    return min(ok, key=lambda k: p50[k][50]) if ok else None


def print_table(datasets, p50, audc, base) -> None:
    head = f"{'encoder':<18}{'dim':>5}"
    if audc:
        head += "".join(f"{d + ' AUDC':>18}" for d in datasets)
        head += "".join(f"{'same ' + d[:6]:>14}" for d in datasets)
    head += "".join(f"{f'p50 {n}wp ms':>13}" for n in LENGTHS)
    print(head)
    for kind in p50:
        row = f"{kind:<18}{make_encoder(kind).dim:>5}"
        if audc and kind not in audc:
            row += f"{'-':>18}" * len(datasets) + f"{'-':>14}" * len(datasets)
        elif audc:
            for d in datasets:
                a, b = np.mean(audc[kind][d]["audc"]), np.mean(audc[base][d]["audc"])
                row += f"{a:>10.4f} ({a - b:+.4f})"
            row += "".join(f"{np.mean(audc[kind][d]['same']):>14.1%}" for d in datasets)
        row += "".join(f"{p50[kind][n]:>13.2f}" for n in LENGTHS)
        print(row)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encoders", default=",".join(known_kinds()))
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--repeats", type=int, default=100, help="latency samples per cell")
    parser.add_argument("--skip-audc", action="store_true")
    parser.add_argument(
        "--latency-encoders",
        default="",
        help="more kinds to time only (no retraining: their AUDC is not measured)",
    )
    parser.add_argument(
        "--baseline",
        default=TORCH,
        help="the kind AUDC and decisions are compared with (minilm-onnx: MiniLM's own "
        "vectors to 1e-5, when torch MiniLM's are not cached and CPU is short)",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    kinds = [k for k in args.encoders.split(",") if k]
    for kind in kinds:
        encoder_class(kind)  # unknown kinds fail before any work
    if args.baseline not in kinds:
        kinds.insert(0, args.baseline)
    datasets = [d for d in args.datasets.split(",") if d]
    seeds = [int(s) for s in args.seeds.split(",")]
    timed = [*kinds, *[k for k in args.latency_encoders.split(",") if k and k not in kinds]]
    for kind in timed:
        encoder_class(kind)
    audc = {} if args.skip_audc else routing(kinds, datasets, seeds, args.baseline)
    p50 = latency(timed, args.repeats)
    print(
        f"seeds {seeds}; same = share of test prompts routed as by the {args.baseline} router "
        f"at λ={DEFAULT_LAM}; p50 of one encode call, one thread; '-': timed, not retrained"
    )
    print_table(datasets, p50, audc, args.baseline)
    if audc:
        print(
            f"default by the rule (fastest within {AUDC_TOLERANCE} AUDC of {args.baseline} on "
            f"every dataset): {default_by_rule(p50, audc, datasets, args.baseline)}"
        )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "p50_ms": p50,
                    "routing": audc,
                    "seeds": seeds,
                    "datasets": datasets,
                    "baseline": args.baseline,
                    "default_by_rule": default_by_rule(p50, audc, datasets, args.baseline)
                    if audc
                    else None,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
