"""Benchmark: the time to fingerprint one model on N probes with the offline scorer.

    python -m bench.routing.fingerprints [--n 192] [--model gpt-4-1106-preview]

Uses RouterBench's recorded answers on N probes drawn from its training rows (as CSCR
does), scores them with SmolLM2-135M without the score cache, and prints the seconds spent
loading the scorer and scoring, with the descriptor's shape. The unseen-model routing table
is ``tollgate eval --dataset routerbench --split unseen-models --descriptor perplexity``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=192)
    ap.add_argument("--model", default="gpt-4-1106-preview")
    ap.add_argument("--scorer", default=None)
    ap.add_argument("--condition-on-prompt", action="store_true")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads for scoring")
    args = ap.parse_args(argv)

    from router_core.data import load_dataset
    from router_core.descriptors.base import ProbeSet
    from router_core.fingerprints.perplexity import PerplexityFingerprint, recorded_answers
    from router_core.fingerprints.scorer import Scorer

    table = load_dataset("routerbench")
    probes = ProbeSet.sample(table.split_rows("train"), args.n, seed=0)
    answers = recorded_answers(table, probes, args.model)
    t0 = time.perf_counter()
    scorer = Scorer(args.scorer, cache=False, threads=args.threads)
    scorer.load()
    t1 = time.perf_counter()
    kind = PerplexityFingerprint(scorer, condition_on_prompt=args.condition_on_prompt)
    e = kind.describe({args.model: answers}, probes, [args.model])
    t2 = time.perf_counter()
    _, tok = scorer.load()
    n_tok = sum(min(len(tok(a)["input_ids"]), scorer.max_tokens) for a in answers if a)
    print(f"scorer       {scorer.ident}  (torch threads: {args.threads})")
    print(
        f"model        {args.model}: {sum(a is not None for a in answers)}/{len(answers)} "
        f"answers, {n_tok} scored tokens, condition_on_prompt={args.condition_on_prompt}"
    )
    print(f"load scorer  {t1 - t0:8.1f} s")
    print(
        f"fingerprint  {t2 - t1:8.1f} s  for N={len(probes)} probes -> shape {e.shape}, "
        f"norm {float(np.linalg.norm(e)):.3f}"
    )


if __name__ == "__main__":
    main()
