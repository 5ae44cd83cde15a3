"""Each packaged route's promise where a user meets it: test prompts of RouterBench, MMLU-Pro
and LLMRouter planned through the packaged config.yaml and router exactly as the gateway
plans them (no HTTP: gateway/serving/planning.py), reading each decision's explanation.

Per dataset and route: the route's own estimate of its quality change against its reference
(mean p̂ of the chosen backend minus the reference's, on this prompt), its expected saving
against always sending to the reference (expected costs of the same records), and where the
prompts went. There are no outcomes for the frontier backends here: this is the route's
estimate, what `bench/routing/promise.py` measures with the truth held out.

    python -m bench.routing.packaged_promise [--prompts 60]

Last line: ``auto_est_drop=… auto_saving=… balanced_est_drop=… cheap_est_drop=… cheap_saving=…``
(drop: the worst dataset's; saving: mean over datasets).
"""

from __future__ import annotations

import argparse
import os
from collections import Counter

import numpy as np

ROUTES = ("auto", "auto-balanced", "auto-cheap")
DATASETS = ("routerbench", "mmlu-pro", "llmrouter")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=60, help="test prompts per dataset")
    args = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from gateway.app import reference_phi
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.pool import build_pool
    from gateway.pricing import resolve_prices
    from gateway.serving.chat_request import parse_chat_request
    from gateway.serving.planning import deployable, ranked, start_plan
    from gateway.store.records import Tenant
    from router_core.artifact import load_router
    from router_core.data import load_dataset
    from router_core.encoders import encoder_for_router

    settings, router = load_settings(DEFAULT_CONFIG_PATH), load_router(None)
    encoder = encoder_for_router(router.config, threads=1)
    pool = build_pool(settings, resolve_prices(settings), router,
                      reference_phi(settings, encoder))
    tenant = Tenant(id="bench", name="bench", budget_usd=None, period="total")
    for route in ROUTES:
        print(f"{route}: {pool.promises[route].describe()}")
    drop: dict[str, list[float]] = {r: [] for r in ROUTES}
    saving: dict[str, list[float]] = {r: [] for r in ROUTES}
    print(f"{'dataset':<12} {'route':<14} {'est. drop':>9} {'saving':>7}  where the prompts went")
    for name in DATASETS:
        table = load_dataset(name)
        rows = np.flatnonzero(np.asarray(table.split) == "test")[: args.prompts]
        prompts = [str(table.prompts[i]) for i in rows]
        phis = encoder.encode(prompts)
        for route in ROUTES:
            gaps, paid, ref_paid, went = [], 0.0, 0.0, Counter()
            for text, phi in zip(prompts, phis):
                req = parse_chat_request({"model": route,
                                          "messages": [{"role": "user", "content": text}]})
                plan = start_plan(pool, tenant, req)
                rec = ranked(plan, deployable(plan), phi[None, :], 200).routed.promise
                by = {c["backend"]: c for c in rec["candidates"]}
                chosen, ref = by[rec["chosen"]], by[rec["reference"]["backend"]]
                gaps.append(ref["p"] - chosen["p"])
                paid, ref_paid = paid + chosen["cost"], ref_paid + ref["cost"]
                went[rec["chosen"]] += 1
            drop[route].append(float(np.mean(gaps)))
            saving[route].append(1.0 - paid / ref_paid)
            mix = ", ".join(f"{b} {n}" for b, n in went.most_common())
            print(f"{name:<12} {route:<14} {drop[route][-1]:>+9.4f} {saving[route][-1]:>7.3f}  {mix}")
    print(f"auto_est_drop={max(drop['auto']):.4f} auto_saving={np.mean(saving['auto']):.4f} "
          f"balanced_est_drop={max(drop['auto-balanced']):.4f} "
          f"cheap_est_drop={max(drop['auto-cheap']):.4f} "
          f"cheap_saving={np.mean(saving['auto-cheap']):.4f}")


if __name__ == "__main__":
    main()
