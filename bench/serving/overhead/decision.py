"""The routing decision alone, in the bench's own process, as the gateway makes it
(gateway/serving/plan/routing.py ``cascaded``, the λ rule at λ = 0.2): its p50 for prompts of
about 20, 50 and 200 tokens, and the share of decisions that ran MiniLM.

The share is read from the decisions themselves (``Decision.encoder``: the encoder that made
each); a router without a cascade runs MiniLM on every request (1.0).
Beside it, the share of decisions that are the ones MiniLM alone would have made (each
prompt ranked again on MiniLM's Φ, outside the timed call): a cascade that is fast because
its static encoder decides wrongly shows here.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass
from typing import Any

from bench.serving.servers import WRK_LUA

LENGTHS = (20, 50, 200)  # prompt tokens (cl100k, litellm's default counter)
WARM_UP = 10  # the first calls warm the encoder


@dataclass(frozen=True)
class DecisionTimes:
    """p50 ms and the share that ran MiniLM, per prompt length."""

    p50_ms: dict[int, float]
    minilm_share: dict[int, float]
    agreement: dict[int, float]  # share of decisions equal to MiniLM's own

    @property
    def overall_share(self) -> float:
        return statistics.fmean(self.minilm_share.values())


def minilm_share(router: Any, encoders: list[str | None]) -> float:
    """The share of decisions (by the encoder each names) that did not stand on the
    cascade's static encoder; 1.0 without a cascade or without decisions."""
    cascade = getattr(router, "cascade", None)
    if cascade is None or not encoders:
        return 1.0
    return 1.0 - sum(e == cascade.kind for e in encoders) / len(encoders)


def served_minilm_share(url: str, admin_key: str, static_kind: str = "minilm-static"
                        ) -> float | None:
    """The share of a running gateway's routing decisions that ran MiniLM, from its
    ``tollgate_routing_decisions`` counter: the share the wrk load met on the served route's
    own rule (the in-process figure above uses λ = 0.2); None when it has routed nothing."""
    import httpx
    from prometheus_client.parser import text_string_to_metric_families

    r = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {admin_key}"},
                  timeout=30)
    r.raise_for_status()
    by_encoder = {s.labels["encoder"]: s.value
                  for fam in text_string_to_metric_families(r.text)
                  if fam.name == "tollgate_routing_decisions"
                  for s in fam.samples if s.name.endswith("_total")}
    total = sum(by_encoder.values())
    return None if total == 0 else 1.0 - by_encoder.get(static_kind, 0.0) / total


def prompts(n: int, n_tokens: int, rng: random.Random) -> list[str]:
    """``n`` unique prompts of about ``n_tokens`` tokens, from the wrk script's words."""
    from router_core.env.litellm_env import litellm

    vocab = WRK_LUA.split('"')[1].split() + ["market", "energy", "river", "theorem"]
    out = []
    for i in range(n):
        words = [f"Request {i}:"]
        while litellm.token_counter(model="gpt-4", text=" ".join(words)) < n_tokens:
            words.append(rng.choice(vocab))
        out.append(" ".join(words))
    return out


@dataclass(frozen=True)
class _Ranked:
    """What ``cascaded`` ranks into: a plan with ``.routed`` (the gateway's Plan, reduced)."""

    routed: Any


def routing_decisions(n_samples: int, router_path: str | None) -> DecisionTimes:
    """Encode + head + search + tie-break as the gateway makes it (``cascaded``: the static
    encoder first where the router has a cascade, MiniLM where its decision is not safe),
    per prompt length."""
    import anyio

    from gateway.config import DEFAULT_CONFIG_PATH, load_settings
    from gateway.pool.known import know_backends
    from gateway.serving.plan.routing import cascaded, route_request
    from router_core.artifact import load_router
    from router_core.encoders import encoder_for_router

    settings = load_settings(DEFAULT_CONFIG_PATH)
    router = load_router(router_path)
    encoder = encoder_for_router(router.config, threads=settings.encoder_threads)
    by_rm: dict[str, str] = {}  # expert -> backend, every backend the artifact knows
    for k in know_backends(settings, router, [b.model_name for b in settings.model_list]):
        if k.expert is not None:
            by_rm.setdefault(k.expert, k.backend)
    costs = {b: 1e-4 * (i + 1) for i, b in enumerate(by_rm.values())}

    async def embed(text: str) -> Any:
        return encoder.encode([text])

    def rank(phi: Any) -> _Ranked:
        return _Ranked(route_request(router, phi, lam=0.2, delta=None,
                                     backends_by_router_model=by_rm,
                                     costs_usd_by_backend=costs, max_cost_usd=None))

    async def timed(texts: list[str]) -> tuple[list[float], float, float]:
        times: list[float] = []
        chosen, encoders = [], []
        for i, text in enumerate(texts):
            t = time.perf_counter()
            plan = await cascaded(router, text, embed, rank)
            if i >= WARM_UP:
                times.append((time.perf_counter() - t) * 1000)
                chosen.append(plan.routed.decision.chosen)
                encoders.append(plan.routed.decision.encoder)
        share = minilm_share(router, encoders)
        alone = [rank(await embed(text)).routed.decision.chosen for text in texts[WARM_UP:]]
        return times, share, statistics.fmean(a == b for a, b in zip(chosen, alone))

    rng = random.Random(0)
    p50, share, agree = {}, {}, {}
    for n_tokens in LENGTHS:
        times, share[n_tokens], agree[n_tokens] = anyio.run(
            timed, prompts(n_samples + WARM_UP, n_tokens, rng))
        p50[n_tokens] = statistics.median(times)
    return DecisionTimes(p50, share, agree)
