"""The promise where users meet it: `tollgate serve` over HTTP, on the packaged config, on a
pasted LiteLLM config, and with a wrong prior the live learning loop has to catch.

1. Routes (live_routes.py): `tollgate serve` on a config (the packaged `config.yaml`, or
   ``--config``), every backend on a local upstream with its price kept; ``--prompts`` test
   prompts of each of MMLU-Pro, LLMRouter and RouterBench through the OpenAI SDK to `auto`,
   `auto-balanced` and `auto-cheap`; every explanation read. Per route: where the prompts
   went, mean p̂ of the chosen backend and of the reference on the same prompts, the
   estimated drop, the saving against the reference.
2. The same for `auto` on the LiteLLM example config (bench/routing/litellm_example.yaml:
   OpenAI, Anthropic and Azure entries, no `routes:`).
3. The wrong-prior loop (wrong_prior_loop.py): ``--requests`` requests to `auto-cheap` on
   RouterBench's models with a cheap backend claimed to match the strongest; per window of
   250 its share, the realized drop and the saving; when the prior was corrected.
4. The learning loop (learning_loop.py): ``--learn-requests`` requests alternating between
   `auto` and `auto-balanced` on RouterBench's models, the strongest two joining on priors
   and the wrong prior of 3 claimed, learning from the default exploration (no
   ``exploration:`` section; judge at 80% agreement); per window of ``--learn-window`` (500)
   requests, per route, the realized drop, the saving and the exploration spend; over
   ``--seed`` or ``--seeds``.
5. With ``--learn-packaged``: the same loop on the packaged config.yaml as shipped (its
   backends, prices, routes and router; no wrong prior), each backend answering RouterBench's
   recorded answers as the model of its rank (dearest as strongest: learning_loop.py
   ``packaged_aliases``), over the same seeds.

    python -m bench.routing.live_promise [--config PATH] [--prompts 60] [--requests 3000]
        [--learn-requests 5000] [--learn-window 500] [--seed 0 | --seeds 0,1,2,3,4]
        [--skip-routes] [--skip-litellm] [--skip-loop] [--skip-learn] [--learn-packaged]

Last line: ``auto_live_drop=… balanced_live_drop=… cheap_live_drop=… auto_live_saving=…
cheap_live_saving=… litellm_auto_live_drop=… wrong_prior_caught_after=… loop_drop_max=…
learn_drop_excess_max=… auto_learned_saving=… balanced_learned_saving=…
exploration_share=… caught_after_median=… caught_after_worst=…`` and with
``--learn-packaged`` ``packaged_auto_learned_saving=… packaged_balanced_learned_saving=…
packaged_drop_excess_max=… packaged_exploration_share=…`` (a part skipped, or a route
not served, prints ``nan``; a prior never corrected ``never``; the learning loop's fields:
learning_loop.py's docstring).
"""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

LITELLM_EXAMPLE = Path(__file__).with_name("litellm_example.yaml")
NAN = float("nan")


def _fmt(x: float | None) -> str:
    if x is None:
        return "never"
    if isinstance(x, float) and math.isnan(x):
        return "nan"
    return f"{x:.4f}" if isinstance(x, float) else str(x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", type=Path, default=None,
                    help="the config the routes are measured on (default: the packaged one)")
    ap.add_argument("--litellm-config", type=Path, default=LITELLM_EXAMPLE)
    ap.add_argument("--prompts", type=int, default=60, help="test prompts per dataset")
    ap.add_argument("--requests", type=int, default=3000, help="requests in the loop")
    ap.add_argument("--window", type=int, default=250)
    ap.add_argument("--skip-routes", action="store_true")
    ap.add_argument("--skip-litellm", action="store_true")
    ap.add_argument("--skip-loop", action="store_true")
    ap.add_argument("--learn-requests", type=int, default=5000)
    ap.add_argument("--learn-window", type=int, default=500)
    ap.add_argument("--seed", type=int, default=None, help="the learning loop's seed")
    ap.add_argument("--seeds", type=str, default=None, help="its seeds, e.g. 0,1,2,3,4")
    ap.add_argument("--skip-learn", action="store_true")
    ap.add_argument("--learn-packaged", action="store_true",
                    help="also the learning loop on the packaged config (recorded answers)")
    a = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from bench.routing.live_routes import measure_routes, print_routes, sample_prompts
    from bench.routing.wrong_prior_loop import LoopSetup, print_loop, run_loop
    from gateway.config import DEFAULT_CONFIG_PATH

    fig: dict[str, float | int | None] = {
        "auto_live_drop": NAN, "balanced_live_drop": NAN, "cheap_live_drop": NAN,
        "auto_live_saving": NAN, "cheap_live_saving": NAN, "litellm_auto_live_drop": NAN,
        "wrong_prior_caught_after": NAN, "loop_drop_max": NAN}
    prompts = sample_prompts(a.prompts) if not (a.skip_routes and a.skip_litellm) else []
    if not a.skip_routes:
        config = a.config or DEFAULT_CONFIG_PATH
        routes = measure_routes(config, prompts)
        print_routes(f"{config}: {len(prompts)} prompts per route", routes)
        fig.update(auto_live_drop=routes["auto"].drop,
                   balanced_live_drop=routes["auto-balanced"].drop,
                   cheap_live_drop=routes["auto-cheap"].drop,
                   auto_live_saving=routes["auto"].saving,
                   cheap_live_saving=routes["auto-cheap"].saving)
    if not a.skip_litellm:
        routes = measure_routes(a.litellm_config, prompts, ("auto",))
        print_routes(f"{a.litellm_config}: {len(prompts)} prompts", routes)
        fig["litellm_auto_live_drop"] = routes["auto"].drop
    if not a.skip_loop:
        setup = LoopSetup(requests=a.requests, window=a.window)
        ws, caught, facts = run_loop(setup)
        print_loop(ws, caught, facts, setup)
        fig.update(wrong_prior_caught_after=caught, loop_drop_max=max(w.drop for w in ws))
    learned = dict.fromkeys(("learn_drop_excess_max", "auto_learned_saving",
                             "balanced_learned_saving", "exploration_share",
                             "caught_after_median", "caught_after_worst"), "nan")
    if not a.skip_learn:
        from bench.routing.learning_loop import LearnSetup, print_run, run, summary

        seeds = ([int(x) for x in a.seeds.split(",")] if a.seeds
                 else [a.seed if a.seed is not None else 0])
        runs = []
        for seed in seeds:
            s = LearnSetup(requests=a.learn_requests, window=a.learn_window, seed=seed)
            runs.append(run(s))
            print_run(runs[-1], s)
        learned = summary(runs)
    if a.learn_packaged:
        from bench.routing.learning_loop import LearnSetup, packaged_summary, print_run, run

        runs = []
        for seed in ([int(x) for x in a.seeds.split(",")] if a.seeds
                     else [a.seed if a.seed is not None else 0]):
            s = LearnSetup(requests=a.learn_requests, window=a.learn_window, seed=seed,
                           packaged=True)
            runs.append(run(s))
            print_run(runs[-1], s)
        learned = {**learned, **packaged_summary(runs)}
    print(" ".join([*(f"{k}={_fmt(v)}" for k, v in fig.items()),
                    *(f"{k}={v}" for k, v in learned.items())]))


if __name__ == "__main__":
    main()
