"""How one request will be served, decided before any money is held: a frozen ``Plan``.

A ``model`` naming a route is routed: the route's pool ∩ the tenant policy's ``allowed_models``
∩ the request's, ranked by the router for this request's Φ(x), λ and expected costs, then cut
to the backends whose context window and output cap fit. Any other ``model`` is a passthrough
to that one backend. All of it is pure but Φ(x) and the prompt measurements (the expected
token count and the size the budget bounds it by, gateway/pricing.py), which ``plan_request``
computes off the event loop on both paths; so every rule is testable without HTTP.

Tenant ``policy`` keys read here: ``allowed_models``, ``max_cost_usd`` (per request),
``cost_weight``, ``min_cost_weight``, ``max_cost_weight``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import anyio.to_thread

from gateway.config import Backend, Settings
from gateway.context import GatewayContext
from gateway.errors import GatewayError, invalid, model_not_found
from gateway.pricing import Price, PromptSize, count_prompt_tokens, prompt_size
from gateway.serving.chat_request import ChatRequest, TollgateOptions
from gateway.serving.explore_share import PriorShare, cap_priors
from gateway.serving.fallbacks import with_fallbacks
from gateway.serving.routing import Routed, embed_text, route_request, router_model_map
from gateway.serving.validation import fit_candidates
from router_core.decision import NoEligibleModel
from router_core.router import Router

PASSTHROUGH_VERSION = "passthrough"


@dataclass(frozen=True)
class Plan:
    """A parsed request and what was decided for it; ``candidates`` are tried in order."""

    request: ChatRequest
    policy: Mapping[str, Any]  # the tenant's policy
    route: str | None = None  # the route ``model`` names; None: passthrough
    router_version: str = PASSTHROUGH_VERSION
    lam: float | None = None  # λ of a routed request
    max_cost_usd: float | None = None  # the tighter of the request's and the policy's cap
    prompt_tokens: int | None = None  # expected (routing, context windows)
    prompt_size: PromptSize | None = None  # what the reservation bounds the prompt by
    candidates: tuple[str, ...] = ()
    routed: Routed | None = None
    phi: Any = None  # Φ(x) of a routed request, kept for the learning loop

    def prompt_bound(self, backend: Backend) -> int:
        """N_prompt on ``backend``: prompt tokens no tokenizer exceeds (gateway/pricing.py)."""
        assert self.prompt_size is not None
        return self.prompt_size.bound(backend)

    @property
    def n(self) -> int:
        return int(self.request.params.get("n") or 1)

    def output_cap(self, backend: Backend) -> int:
        """m: the client's max_tokens, else the backend's max_output_tokens."""
        return self.request.max_tokens or backend.model_info.max_output_tokens


def tenant_policy(tenant: Any) -> dict[str, Any]:
    return dict(getattr(tenant, "policy", None) or {})


def cost_weight(options: TollgateOptions, policy: Mapping[str, Any], route_lam: float) -> float:
    """λ: the request's, else the policy's, else the route's; clamped to the policy's bounds."""
    lam = options.cost_weight
    if lam is None:
        lam = float(policy.get("cost_weight", route_lam))
    lo = float(policy.get("min_cost_weight", 0.0))
    hi = float(policy.get("max_cost_weight", float("inf")))
    return min(max(lam, lo), hi)


def max_cost(options: TollgateOptions, policy: Mapping[str, Any]) -> float | None:
    caps = [float(c) for c in (options.max_cost_usd, policy.get("max_cost_usd")) if c is not None]
    return min(caps) if caps else None


def start_plan(settings: Settings, router: Router, tenant: Any, req: ChatRequest) -> Plan:
    """What is known before anything can be refused: route, router version, λ and cost cap."""
    policy = tenant_policy(tenant)
    cap = max_cost(req.options, policy)
    route = settings.routes.get(req.model)
    if route is None:
        return Plan(req, policy, max_cost_usd=cap)
    lam = cost_weight(req.options, policy, route.cost_weight)
    return Plan(req, policy, route=req.model, router_version=router.version, lam=lam,
                max_cost_usd=cap)


def expected_cost(plan: Plan, backend: Backend, price: Price, routing_output_tokens: int) -> float:
    """USD the request is expected to cost on ``backend``: what λ trades against and
    max_cost_usd caps. n_prompt·p_in + n·min(m, routing_output_tokens)·p_out: the budget
    reserves the worst case (m), routing compares the typical case, so one backend's larger
    max_output_tokens does not make it look dearer."""
    out = min(plan.output_cap(backend), routing_output_tokens) * plan.n
    return price.cost(plan.prompt_tokens or 0, out)


def allowed_backends(settings: Settings, plan: Plan) -> list[str]:
    """The route's pool ∩ the tenant policy's allowed_models ∩ the request's (400 if empty)."""
    out = [b.model_name for b in settings.route_backends(plan.route)]
    policy_allowed = plan.policy.get("allowed_models")
    if policy_allowed is not None:
        out = [n for n in out if n in set(policy_allowed)]
    asked = plan.request.options.allowed_models
    if asked is not None:
        unknown = sorted(set(asked) - {b.model_name for b in settings.model_list})
        if unknown:
            raise invalid(f"unknown model(s) in tollgate.allowed_models: {unknown}",
                          param="tollgate.allowed_models")
        out = [n for n in out if n in set(asked)]
    if not out:
        raise invalid("no backend is allowed for this request (route, tenant policy and "
                      "tollgate.allowed_models leave none)", param="tollgate.allowed_models")
    return out


def deployable(settings: Settings, router: Router, plan: Plan,
               prices: Mapping[str, Price] | None = None,
               share: PriorShare | None = None) -> dict[str, str]:
    """router model → backend over the allowed, priced backends the router knows (503 if
    none); backends on a cold-start prior only while under the route's explore_share."""
    by_rm = router_model_map(settings, router, allowed_backends(settings, plan), priced=prices)
    if share is not None and by_rm:
        explore = settings.routes[plan.route].explore_share
        by_rm = cap_priors(share, plan.route, explore, router, by_rm)
    if not by_rm:
        raise GatewayError(503, f"route {plan.route!r} has no backend the router knows",
                           "service_unavailable", code="no_deployable_backend")
    return by_rm


def ranked(settings: Settings, prices: Mapping[str, Price], router: Router, plan: Plan,
           by_rm: Mapping[str, str], phi: Any, prompt_tokens: int) -> Plan:
    """The router's decision over ``by_rm`` for Φ(x) = ``phi`` (400 if no backend fits the cap)."""
    plan = replace(plan, prompt_tokens=prompt_tokens, phi=phi)
    # the route's routable pool: c̃ = c / its dearest backend's c (README "Routes")
    pool = router_model_map(settings, router,
                            [b.model_name for b in settings.route_backends(plan.route)],
                            priced=prices)
    costs = {name: expected_cost(plan, settings.backend(name), prices[name],
                                 settings.routing_output_tokens)
             for name in {*by_rm.values(), *pool.values()}}
    try:
        routed = route_request(router, phi, lam=plan.lam, delta=settings.routes[plan.route].delta,
                               backends_by_router_model=by_rm, costs_usd_by_backend=costs,
                               max_cost_usd=plan.max_cost_usd, pool_by_router_model=pool)
    except NoEligibleModel as e:
        raise invalid(f"no backend fits max_cost_usd={plan.max_cost_usd} for this request",
                      param="tollgate.max_cost_usd") from e
    return replace(plan, routed=routed, candidates=routed.backends)


def passthrough_backend(settings: Settings, plan: Plan) -> Backend:
    """The backend ``model`` names, if the tenant policy allows it (404 otherwise)."""
    model = plan.request.model
    backend = settings.backend(model)
    policy_allowed = plan.policy.get("allowed_models")
    if backend is None or (policy_allowed is not None and model not in policy_allowed):
        raise model_not_found(model)
    return backend


def priced(prices: Mapping[str, Price], backend: Backend) -> Backend:
    """A backend without a price is refused: a budget cannot bound what it costs (503)."""
    if backend.model_name not in prices:
        raise GatewayError(503, f"backend {backend.model_name!r} has no price: set its "
                           "input/output_cost_per_million", "service_unavailable",
                           code="backend_unpriced")
    return backend


def with_plan_fallbacks(settings: Settings, plan: Plan) -> Plan:
    """The candidates followed by the request's (or the config's) fallbacks."""
    names = with_fallbacks(settings, list(plan.candidates), plan.request.model,
                           plan.request.fallbacks, plan.policy.get("allowed_models"))
    return replace(plan, candidates=tuple(names))


def fitted(settings: Settings, plan: Plan) -> Plan:
    """The candidates whose context window and output cap fit (400 when none does)."""
    fit = fit_candidates(settings, list(plan.candidates), plan.prompt_tokens,
                         plan.request.max_tokens)
    return replace(plan, candidates=tuple(fit))


def within_cap(settings: Settings, prices: Mapping[str, Price], plan: Plan) -> Plan:
    """A passthrough whose expected cost passes max_cost_usd is a 400."""
    name = plan.candidates[0]
    cost = expected_cost(plan, settings.backend(name), prices[name],
                         settings.routing_output_tokens)
    if plan.max_cost_usd is not None and cost > plan.max_cost_usd:
        raise invalid(f"the predicted cost of {name} exceeds max_cost_usd={plan.max_cost_usd}",
                      param="tollgate.max_cost_usd")
    return plan


async def measure(req: ChatRequest, backend: Backend) -> tuple[int, PromptSize]:
    """(expected prompt tokens on ``backend``, the prompt's size), in a worker thread: CPU
    work proportional to the prompt (an 8 MB prompt takes seconds)."""

    def both() -> tuple[int, PromptSize]:
        return (count_prompt_tokens(backend, req.messages, req.params.get("tools")),
                prompt_size(req.messages, req.params))

    return await anyio.to_thread.run_sync(both)


async def plan_request(ctx: GatewayContext, router: Router, plan: Plan) -> Plan:
    """Complete a started plan: Φ(x) and prompt measurements off the loop, the rest pure.
    The candidates are not yet checked against the request (``admissible``), so a refusal
    there still logs what was planned."""
    settings, req = ctx.settings, plan.request
    if plan.route is None:
        backend = priced(ctx.prices, passthrough_backend(settings, plan))
        n_prompt, size = await measure(req, backend)
        plan = replace(plan, candidates=(backend.model_name,), prompt_tokens=n_prompt,
                       prompt_size=size)
        return with_plan_fallbacks(settings, plan)
    by_rm = deployable(settings, router, plan, ctx.prices, ctx.prior_share)
    first = settings.backend(next(iter(by_rm.values())))
    started = time.perf_counter()
    phi = await ctx.embedder.embed(embed_text(req.messages, settings.encoder_max_chars))
    n_prompt, size = await measure(req, first)
    plan = replace(plan, prompt_size=size)
    plan = ranked(settings, ctx.prices, router, plan, by_rm, phi, n_prompt)
    ctx.metrics.routing.observe(time.perf_counter() - started)
    if ctx.prior_share is not None:  # what a cold-start prior backend's share counts
        chosen = plan.routed.decision.chosen
        ctx.prior_share.record(plan.route, by_rm.get(chosen), chosen in plan.routed.priors)
    return with_plan_fallbacks(settings, plan)


def admissible(settings: Settings, prices: Mapping[str, Price], plan: Plan) -> Plan:
    """The candidates that can take this request (400 when none can); a passthrough must
    also be within its cost cap (a routed one was ranked within it)."""
    plan = fitted(settings, plan)
    return plan if plan.route is not None else within_cap(settings, prices, plan)
