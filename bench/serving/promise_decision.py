"""The packaged ``auto`` route's promise decision alone, in process: its p50 with the pool's
stacked beliefs (``Pool.belief_stack``, as served) beside each belief's own ``estimate``
(``stack_estimates``, as before), on the same prompt vectors, and whether they decide alike.

The decision is ``gateway/serving/plan/planning.py`` ``ranked`` on the packaged config and router:
the router's head, every backend's (p̂, n), the promise rule and its explanation record; Φ(x)
is computed once per prompt outside the timed call.

    python -m bench.serving.promise_decision [--prompts 200] [--repeats 20]

Last line: ``stacked_p50_us=… per_belief_p50_us=… same_decisions=…``
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from unittest import mock

from bench.serving.servers import WRK_LUA

WORDS = WRK_LUA.split('"')[1].split()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=20, help="timed calls per prompt")
    a = ap.parse_args()
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from gateway.app import reference_phi
    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.pool import Pool, build_pool
    from gateway.pricing import resolve_prices
    from gateway.serving.plan.planning import deployable, ranked, start_plan
    from gateway.serving.request.chat_request import parse_chat_request
    from gateway.store.records import Tenant
    from router_core.artifact import load_router
    from router_core.encoders import encoder_for_router
    from router_core.promise import stack_estimates

    settings, router = load_settings(DEFAULT_CONFIG_PATH), load_router(None)
    encoder = encoder_for_router(router.config, threads=1)
    pool = build_pool(settings, resolve_prices(settings), router,
                      reference_phi(settings, encoder))
    tenant = Tenant(id="bench", name="bench", budget_usd=None, period="total")
    rng = random.Random(0)
    texts = [" ".join(rng.choice(WORDS) for _ in range(rng.randrange(10, 120))) + "?"
             for _ in range(a.prompts)]
    phis = encoder.encode(texts)

    class PerBelief:  # what promise routing did before the stack: each belief on its own
        def __init__(self, beliefs):
            self.beliefs = beliefs

        def estimate(self, Q):
            return stack_estimates(self.beliefs, Q)

    def per_belief(self, experts):
        return PerBelief([self.qualities[e].belief for e in experts])

    def run() -> tuple[list[float], list[str]]:
        times, chosen = [], []
        for text, phi in zip(texts, phis, strict=True):
            req = parse_chat_request({"model": "auto",
                                      "messages": [{"role": "user", "content": text}]})
            plan = start_plan(pool, tenant, req)
            chosen.append(ranked(plan, deployable(plan), phi[None, :], 200).routed.backends[0])
            t0 = time.perf_counter()
            for _ in range(a.repeats):
                ranked(plan, deployable(plan), phi[None, :], 200)
            times.append((time.perf_counter() - t0) / a.repeats * 1e6)
        return times, chosen

    stacked, chose_stacked = run()
    with mock.patch.object(Pool, "belief_stack", per_belief):
        before, chose_before = run()
    same = sum(x == y for x, y in zip(chose_stacked, chose_before, strict=True)) / len(texts)
    s50, b50 = statistics.median(stacked), statistics.median(before)
    print(f"packaged auto route, {len(texts)} prompts, {a.repeats} calls each: decision p50 "
          f"{s50:.0f} µs stacked, {b50:.0f} µs per belief ({b50 / s50:.2f}×)")
    print(f"stacked_p50_us={s50:.0f} per_belief_p50_us={b50:.0f} same_decisions={same:.3f}")


if __name__ == "__main__":
    main()
