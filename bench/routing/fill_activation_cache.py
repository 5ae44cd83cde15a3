"""Fill the prefill-state cache for the evaluation runs, and print the embedding throughput.

nice python -m bench.routing.fill_activation_cache [mmlu-pro/standard ...]  # default: every run

Every layer's pooled states of every prompt the runs evaluate are computed once and stored
(``router_core.encoders.prefill_states``); the eval runs then read them from disk.
"""

from __future__ import annotations

import sys
import time

from bench.routing.encoder_runs import RUNS, run_table
from router_core.encoders.prefill_states import PrefillStates


def main(argv: list[str] | None = None) -> int:
    wanted = set((argv if argv is not None else sys.argv[1:]) or [])
    states = PrefillStates()
    seen: set[str] = set()
    for run in RUNS:
        if wanted and f"{run.dataset}/{run.split}" not in wanted:
            continue
        texts = [str(t) for t in run_table(run, seed=0).prompts if str(t) not in seen]
        seen.update(texts)
        start = time.perf_counter()
        states.states(
            texts,
            progress=lambda done, total, tag=f"{run.dataset}/{run.split}": print(
                f"  {tag}: {done}/{total}", file=sys.stderr, flush=True
            ),
        )
        wall = time.perf_counter() - start
        rate = states.last_throughput
        print(
            f"{run.dataset}/{run.split}: {len(texts)} new prompts in {wall:.0f} s"
            + ("" if rate is None else f" ({rate:.2f} prompts/s uncached)"),
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
