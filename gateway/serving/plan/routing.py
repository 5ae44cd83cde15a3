"""From a chat request to a routing decision over the deployable pool.

What is embedded: the text of the system and user turns (including ``developer``) in
conversation order, joined by blank lines, keeping the last ``encoder_max_chars`` characters;
the encoder then keeps the last 256 word pieces (MiniLM's window, truncated on the left, as
the router was trained). The end is kept because the last user turn says what is being asked
now; when a conversation is longer than the window, the oldest turns (usually a long system
prompt or few-shot examples) fall off, as the long few-shot prompts of the training data do.
Assistant and tool turns are not embedded: they are answers, not the task.

With an encoder cascade in the artifact (router_core/tuning/cascade_fit.py), the decision is made on
the static encoder's Φ̂ first and stands when its margin under the route's own rule (λ or promise)
clears the artifact's threshold; only the rest wait for MiniLM (``cascaded``).

The router works on *router model names* (experts in the artifact); a backend maps to one
by ``model_info.router_model``, its name or the identity table (gateway/pool/known.py). The
deployable pool of a route is its priced backends the router knows, a cold-start prior
included (``Pool.deployable``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import anyio.to_thread
import numpy as np

from router_core.encoders import make_encoder
from router_core.runtime.decision import Decision
from router_core.runtime.margin import decision_margin, promise_margin
from router_core.runtime.router import Cascade, Router

EMBEDDED_ROLES = ("system", "developer", "user")


def message_text(content: Any) -> str:
    """The text of an OpenAI message ``content`` (a string or a list of typed parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", ""))
            for p in content
            if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def embed_text(messages: list[dict], max_chars: int) -> str:
    """System and user turns in order, keeping the last ``max_chars`` characters."""
    parts = [
        message_text(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") in EMBEDDED_ROLES
    ]
    return "\n\n".join(p for p in parts if p)[-max_chars:]


@dataclass(frozen=True)
class Routed:
    """A decision mapped back to backends."""

    decision: Decision
    router_version: str
    backends: tuple[str, ...]  # ranked backend names (chosen first)
    by_router_model: Mapping[str, str] = field(default_factory=dict)
    priors: frozenset[str] = frozenset()  # the pool's experts on their cold-start prior
    promise: dict | None = None  # a promising route's explanation (serving/promise_routing.py)


def route_request(
    router: Router,
    phi: Any,
    *,
    lam: float,
    delta: float | None,
    backends_by_router_model: Mapping[str, str],
    costs_usd_by_backend: Mapping[str, float],
    max_cost_usd: float | None,
    pool_by_router_model: Mapping[str, str] | None = None,
    priors: frozenset[str] = frozenset(),
) -> Routed:
    """q = g_θ(Φ(x)); route over the allowed router models with this request's costs.

    c̃ divides by the dearest of ``pool_by_router_model`` (the route's whole routable pool,
    default the allowed ones), so a tenant's allowed_models or a capped prior does not
    change what λ means."""
    q = router.project(phi)[0]
    pool = {**(pool_by_router_model or {}), **backends_by_router_model}
    costs = {rm: costs_usd_by_backend[b] for rm, b in pool.items()}
    decision = router.route(
        q,
        lam,
        delta=delta,
        allowed=set(backends_by_router_model),
        costs_usd=costs,
        max_cost_usd=max_cost_usd,
    )
    return Routed(
        decision=decision,
        router_version=router.version,
        backends=tuple(backends_by_router_model[m] for m in decision.ranked),
        by_router_model=dict(backends_by_router_model),
        priors=priors,
    )


def routed_margin(routed: Routed) -> float:
    """How far the decision is from changing under the rule that made it
    (router_core.runtime.margin): the promise rule's drop bounds when the route has a promise, else
    the λ rule's scores."""
    record = routed.promise
    if record is None:
        return decision_margin(routed.decision)
    cands = record["candidates"]
    names = [c["backend"] for c in cands]
    drop = np.array([np.inf if c["drop_bound"] is None else c["drop_bound"] for c in cands])
    return promise_margin(drop, np.array([c["cost"] for c in cands]),
                          names.index(record["chosen"]),
                          names.index(record["reference"]["backend"]), record["tolerance"])


# A text up to this many characters gets the static encoder's Φ̂ on the event loop (~0.3 ms,
# measured: 0.19 ms at 200 characters, 0.32 at 1,000, 1.05 at 4,000), as a worker thread's
# hand-off and back costs ~0.1 ms idle and more under load; longer ones go to a thread.
STATIC_INLINE_CHARS = 1_000


async def cascaded(router: Router, text: str, embed: Callable[[str], Awaitable[Any]],
                   rank: Callable[[Any], Any]) -> Any:
    """``rank(Φ)`` (a plan with ``.routed``) on the static encoder's Φ̂ when the router has a
    cascade and that decision's margin clears its threshold, else on MiniLM's Φ (``embed``,
    the batched encoder). The decision names the encoder that made it; planning
    writes nothing (``record_routing`` counts decisions by encoder in the metrics)."""
    cascade = router.cascade
    if cascade is None:
        phi = None
    elif len(text) <= STATIC_INLINE_CHARS and cascade.static_built:
        phi = _static_phi(cascade, text)
    else:
        phi = await anyio.to_thread.run_sync(_static_phi, cascade, text)
    if phi is not None:
        plan = rank(phi)
        if cascade.confident(routed_margin(plan.routed)):
            return _decided_by(plan, cascade.kind)
    plan = rank(await embed(text))
    if cascade is None:
        return plan
    kind = str((router.config.get("encoder") or {}).get("kind", "minilm"))
    return _decided_by(plan, kind)


async def warm_cascade(router: Router) -> None:
    """Build the cascade's static encoder at startup, in a worker thread (else the first
    routed request waits for it: ~1 s from the cache, longer on a first distillation)."""
    if router.cascade is not None:
        await anyio.to_thread.run_sync(_static_phi, router.cascade, "warm up the encoder")


def _static_phi(cascade: Cascade, text: str) -> Any:
    """Φ̂(text), in a worker thread (the first call loads the static encoder and checks it);
    None when the check failed."""
    static = cascade.static_encoder(make_encoder)
    return None if static is None else cascade.estimate(static.encode([text]))


def _decided_by(plan: Any, kind: str) -> Any:
    routed = plan.routed
    return replace(plan, routed=replace(routed, decision=replace(routed.decision, encoder=kind)))
