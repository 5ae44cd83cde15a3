"""From a chat request to a routing decision over the deployable pool.

What is embedded: the text of the system and user turns (including ``developer``) in
conversation order, joined by blank lines, keeping the last ``encoder_max_chars`` characters;
the encoder then keeps the last 256 word pieces (MiniLM's window, truncated on the left, as
the router was trained). The end is kept because the last user turn says what is being asked
now; when a conversation is longer than the window, the oldest turns (usually a long system
prompt or few-shot examples) fall off, as the long few-shot prompts of the training data do.
Assistant and tool turns are not embedded: they are answers, not the task.

The router works on *router model names* (experts in the artifact); a backend maps to one
by ``model_info.router_model``, its name or the identity table (gateway/pool/known.py). The
deployable pool of a route is its priced backends the router knows, a cold-start prior
included (``Pool.deployable``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from router_core.decision import Decision
from router_core.router import Router

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
