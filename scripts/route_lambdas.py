"""Choose each named route's λ for a config's pool on validation prompts, and write it there.

    python scripts/route_lambdas.py --config config.yaml --router router_core/default_router
    python scripts/route_lambdas.py --config gateway/sandbox/demo_config.yaml \
        --router router_core/routerbench_router --write

A route is a quality bound, not a λ: ``auto`` keeps expected quality within one point of
the strongest backend's (the QNC point), ``auto-balanced`` within three, ``auto-cheap`` within
six (``DROPS``). λ is chosen by router_core/tuning/lambda_choice.py on the validation prompts of the
dataset the router was trained on (its own seeded val slice; test rows are never read):
the largest λ whose mean p̂ of the chosen backend stays within the drop of the best single
backend's mean p̂. The choice is among the route's priced backends the router knows from
outcomes (trained or an alias); a backend on a cold-start prior is left out of it (its p̂ is
a guess, and its traffic is bounded by ``explore_share`` anyway) but still prices the pool:
c̃ divides by the route's dearest backend, as the gateway does. A backend's cost is what the
gateway compares (gateway/serving/plan/planning.py ``expected_cost``): its price at the
validation prompts' mean token count and ``routing_output_tokens`` out.

``--write`` replaces ``cost_weight`` on each route's line of the YAML file (comments and the
rest of the file are kept). scripts/build_default_router.sh runs this for the packaged
config.yaml (default router) and the demo's pool (RouterBench router).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.config import load_settings
from gateway.pool import build_pool
from gateway.pricing import resolve_prices
from router_core.artifact import load_router
from router_core.data import load_dataset
from router_core.data.splits import carve_val
from router_core.encoders import encoder_for_router
from router_core.env.litellm_env import litellm
from router_core.tuning.lambda_choice import RoutePoint, lambda_within

DROPS = {"auto": 0.01, "auto-balanced": 0.03, "auto-cheap": 0.06}  # expected-quality points


def validation_prompts(router_config: dict) -> list[str]:
    """The prompts of the router's own validation slice (the training run's carve)."""
    train = router_config.get("train") or {}
    seed = int(train.get("seed", 0))
    table = load_dataset(router_config["dataset"], split="standard", seed=seed)
    table = carve_val(table, float(train.get("val_fraction", 0.1)), seed)
    val = np.flatnonzero(np.asarray(table.split) == "val")
    seen: dict[str, None] = {}
    for i in val:
        seen.setdefault(str(table.prompts[i]), None)
    return list(seen)


def choose(config: Path, router_dir: Path) -> tuple[dict[str, RoutePoint], dict[str, str]]:
    """route -> its chosen point, and expert -> backend of the pool it was chosen among."""
    settings = load_settings(config)
    prices = resolve_prices(settings, strict=False)
    router = load_router(router_dir)
    pool = build_pool(settings, prices, router)  # as the gateway serves it
    trained: dict[str, str] = {}
    for k in pool.known.values():  # priced backends the artifact itself knows
        if k.expert is not None and not k.on_prior:
            trained.setdefault(k.expert, k.backend)
    if not trained:
        raise SystemExit(f"{config}: no priced backend the router {router_dir} knows")
    served = pool.router
    prompts = validation_prompts(dict(router.config))
    encoder = encoder_for_router(router.config, cache=True, threads=0)
    Q = served.project(encoder.encode(prompts))
    tokens = float(np.mean([litellm.token_counter(model="gpt-3.5-turbo", text=p)
                            for p in prompts]))
    out_tokens = settings.routing_output_tokens
    points = {}
    for route in settings.routes:
        if route not in DROPS:
            continue
        whole = pool.deployable(route)  # c̃'s denominator
        costs = {rm: prices[b].cost(round(tokens), out_tokens) for rm, b in whole.items()}
        allowed = [rm for rm in whole if rm in trained]
        points[route] = lambda_within(served, Q, costs, drop=DROPS[route], allowed=allowed)
    print(f"{len(prompts)} validation prompts of {router.config['dataset']}, mean "
          f"{tokens:.0f} prompt tokens, {out_tokens} out; chosen among: "
          + ", ".join(trained.values())
          + f"; priced for c̃ too: {', '.join(sorted(set(prices) - set(trained.values())))}")
    return points, trained


def write_lambdas(config: Path, lams: dict[str, float]) -> None:
    """Replace ``cost_weight`` on each route's one-line mapping in the YAML text."""
    text = config.read_text()
    for route, lam in lams.items():
        pat = re.compile(rf"^(\s+{re.escape(route)}:\s*\{{\s*cost_weight:\s*)[0-9.eE+-]+",
                         re.MULTILINE)
        text, n = pat.subn(lambda m, v=f"{lam:.4g}": m.group(1) + v, text)
        if n != 1:
            raise SystemExit(f"{config}: route {route!r} is not one line with cost_weight first")
    config.write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", type=Path, required=True)
    ap.add_argument("--router", type=Path, required=True)
    ap.add_argument("--write", action="store_true", help="write the λ values into --config")
    args = ap.parse_args()
    points, _ = choose(args.config, args.router)
    print(f"{'route':<14} {'drop':>5} {'λ':>8} {'E[p̂]':>7} {'best E[p̂]':>10} {'saves':>7}")
    for route, p in points.items():
        print(f"{route:<14} {DROPS[route]:>5.2f} {p.lam:>8.4g} {p.quality:>7.3f} "
              f"{p.best_quality:>10.3f} {p.saving:>7.1%}")
    if args.write:
        write_lambdas(args.config, {r: p.lam for r, p in points.items()})
        print(f"wrote λ into {args.config}")


if __name__ == "__main__":
    main()
