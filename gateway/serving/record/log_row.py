"""The two records a finished request leaves: its request-log row and what learning may know.

Both are read from the ``Outcome`` and its plan (gateway/serving/record/outcome.py), for every
endpoint; a request refused before its body was parsed has no plan, and its row says only what
is known; a unit call (embeddings, images ...) has none either: its row's reason is its
endpoint's label and its ``chosen_model`` the backend it named.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from gateway.errors import GatewayError
from gateway.serving.plan.planning import allowed_backends
from gateway.serving.plan.routing import embed_text
from gateway.serving.record.served import Served

if TYPE_CHECKING:
    from gateway.serving.plan.planning import Plan
    from gateway.serving.record.outcome import Outcome


def plan_fields(plan: Plan | None, log_prompts: bool, max_chars: int) -> dict[str, Any]:
    """The row's fields that come from the plan (the routing decision among them)."""
    if plan is None:
        return {"route": None, "lam": None, "router_version": None, "candidates": [],
                "equivalent": [], "reason": None, "stream": False, "prompt_text": None}
    routed = plan.routed
    d = routed.decision if routed else None
    by_rm = routed.by_router_model if routed else {}
    priors = routed.priors if routed else frozenset()  # cold start: marked "prior"
    promised = {c["backend"]: c for c in (routed.promise or {}).get("candidates", [])} \
        if routed else {}
    candidates = ([{**c, "backend": by_rm.get(c["model"]),
                    **({"known": "prior"} if c["model"] in priors else {}),
                    **({"promise": promised[by_rm.get(c["model"])]}
                       if by_rm.get(c["model"]) in promised else {})}
                   for c in d.to_dict()["candidates"]] if d else [])
    reference = (routed.promise or {}).get("promised_reference") if routed else None
    if candidates and reference is not None:  # the route's reference on this prompt
        candidates[0] = {**candidates[0], "promised_reference": reference}
    certified = (routed.promise or {}).get("certificate") if routed else None
    if candidates and certified is not None:  # a certificate from judged pairs decided
        candidates[0] = {**candidates[0], "certificate": certified}
    return {
        "route": plan.route,
        "lam": plan.lam,
        "router_version": plan.router_version if routed else None,
        "candidates": candidates,
        "equivalent": [by_rm.get(m, m) for m in d.equivalent] if d else [],
        "reason": routing_reason(plan),
        "stream": bool(plan.request.stream),
        "prompt_text": embed_text(plan.request.messages, max_chars) if log_prompts else None,
    }


def routing_reason(plan: Plan) -> str:
    """The row's ``reason``: the router's, or "passthrough"."""
    d = plan.routed.decision if plan.routed else None
    return d.reason if d else "passthrough"


def log_row(outcome: Outcome, status: int, error: str | None) -> dict[str, Any]:
    """The request-log row (keys fixed in docs/architecture.md)."""
    plan, settings = outcome.plan, outcome.ctx.settings
    chosen = outcome.answered.model_name if outcome.answered else outcome.named
    if chosen is None and plan is not None and plan.candidates:
        chosen = plan.candidates[0]
    return {
        "id": outcome.rid,
        "tenant_id": outcome.tenant.id,
        "key_id": outcome.tenant.key_id,
        **outcome.attribution.row_fields(),
        "created_at": outcome.created_at,
        **plan_fields(plan, settings.log_prompts, settings.encoder_max_chars),
        # an answer from the response cache (gateway/serving/forwarding/cached_answer.py)
        **({"reason": f"{routing_reason(plan)}; cache hit"}
           if outcome.cache_hit and plan is not None else {}),
        **({"reason": outcome.unit} if outcome.unit is not None else {}),  # embeddings ...
        "chosen_model": chosen,
        "attempts": outcome.attempt_log(),
        "prompt_tokens": outcome.prompt_tokens,
        "completion_tokens": outcome.completion_tokens,
        "cost_usd": outcome.cost_usd,
        "reserved_usd": outcome.hold.held,
        "latency_ms": round((time.perf_counter() - outcome.t0) * 1000, 3),
        "ttft_ms": outcome.ttft_ms,
        "status": status,
        "error": error,
    }


def served(outcome: Outcome, status: int) -> Served:
    """The record the learning loop gets of this request."""
    plan, b = outcome.plan, outcome.answered
    routed = plan.routed if plan else None
    return Served(
        request_id=outcome.rid,
        tenant_id=outcome.tenant.id,
        status=status,
        route=plan.route if plan else None,
        messages=plan.request.messages if plan else [],
        phi=plan.phi if plan else None,
        pool=tuple(routed.by_router_model.values()) if routed else (),
        backend=b.model_name if b else None,
        router_model=b.router_model if b else None,
        cost_usd=outcome.answer_cost(),  # the answer's own cost (no timeout charges)
        answer_text=outcome.answer_text,
        allowed=_allowed(plan) if routed else None,
    )


def _allowed(plan: Any) -> frozenset[str] | None:
    """The backends the request's tenant policy and options allow, as planning read them."""
    if plan.policy.allowed_models is None and plan.request.options.allowed_models is None:
        return None
    try:
        return frozenset(allowed_backends(plan))
    except GatewayError:  # planning refused it already; nothing may be explored
        return frozenset()
