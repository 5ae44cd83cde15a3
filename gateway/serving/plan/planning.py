"""How one request will be served, decided before any money is held: a frozen ``Plan``.

A plan is made over one ``Pool`` (gateway/pool/), taken once per request: a ``model`` naming
a route is routed: the route's backends ∩ the tenant policy's ``allowed_models`` ∩ the
request's, ranked by the router for this request's Φ(x), λ and expected costs, then cut to
the backends whose context window and output cap fit. Any other ``model`` is a passthrough to
that one backend. All of it is pure but Φ(x) and the prompt measurements (the expected token
count and the size the budget bounds it by, gateway/prompt_tokens.py), which ``plan_request``
computes off the event loop on both paths; so every rule is testable without HTTP.

Tenant policy fields read here: ``allowed_models``, ``max_cost_usd`` (per request),
``cost_weight``, ``min_cost_weight``, ``max_cost_weight``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import anyio.to_thread

from gateway.auth import require_model
from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import GatewayError, invalid
from gateway.pool import Pool
from gateway.pool.certificates import text_share
from gateway.pool.explore_share import PriorShare, cap_priors
from gateway.price_like import unpriced_fix
from gateway.prompt_tokens import (
    PromptSize,
    estimated_prompt_tokens,
    expected_prompt_tokens,
    prompt_size,
)
from gateway.serving.budget.fee_params import billable_tier, tier_pool, tier_unpriced
from gateway.serving.plan.backend_named import passthrough_backend
from gateway.serving.plan.fallbacks import with_fallbacks
from gateway.serving.plan.promise_routing import promise_route
from gateway.serving.plan.routing import Routed, cascaded, embed_text, route_request
from gateway.serving.plan.session_affinity import (
    cache_read_ratio,
    discounted,
    earlier_share,
    kept,
)
from gateway.serving.request.chat_request import ChatRequest, TollgateOptions
from gateway.serving.request.validation import fit_candidates
from gateway.store.policy import TenantPolicy
from gateway.store.records import Tenant
from router_core.runtime.decision import NoEligibleModel

PASSTHROUGH_VERSION = "passthrough"


@dataclass(frozen=True)
class Plan:
    """A parsed request and what was decided for it, over one pool; ``candidates`` are
    tried in order."""

    pool: Pool  # what the request is routed over, taken once
    request: ChatRequest
    policy: TenantPolicy  # the tenant's
    route: str | None = None  # the route ``model`` names; None: passthrough
    router_version: str = PASSTHROUGH_VERSION
    lam: float | None = None  # λ of a routed request
    max_cost_usd: float | None = None  # the tighter of the request's and the policy's cap
    prompt_tokens: int | None = None  # expected (routing, context windows)
    prompt_size: PromptSize | None = None  # what the reservation bounds the prompt by
    candidates: tuple[str, ...] = ()
    routed: Routed | None = None
    phi: Any = None  # Φ(x) of a routed request, kept for the learning loop
    # tokens reserved against the tenant's TPM when fewer than the request's bound
    # (gateway/reliability/ratelimit.py): the output cap is lowered to fit them
    tpm_tokens: int | None = None
    key_models: tuple[str, ...] | None = None  # the calling key's (serving/key_models.py)
    routing_s: float | None = None  # how long a routed request's Φ(x) and ranking took
    conversation: str | None = None  # its conversation's name (serving/plan/session_affinity.py)

    def prompt_bound(self, backend: Backend) -> int:
        """N_prompt on ``backend``: prompt tokens no tokenizer exceeds (gateway/pricing.py)."""
        assert self.prompt_size is not None
        return self.prompt_size.bound(backend)

    @property
    def n(self) -> int:
        return int(self.request.params.get("n") or 1)

    def output_cap(self, backend: Backend) -> int:
        """m: the client's max_tokens, else the backend's max_output_tokens, lowered to what
        the TPM reservation left after the prompt bound (``tpm_tokens``)."""
        m = self.request.max_tokens or backend.model_info.max_output_tokens
        if self.tpm_tokens is not None:
            m = min(m, max(1, (self.tpm_tokens - self.prompt_bound(backend)) // self.n))
        return m


def cost_weight(options: TollgateOptions, policy: TenantPolicy, route_lam: float) -> float:
    """λ: the request's, else the policy's, else the route's; clamped to the policy's bounds."""
    lam = options.cost_weight
    if lam is None:
        lam = route_lam if policy.cost_weight is None else policy.cost_weight
    lo = 0.0 if policy.min_cost_weight is None else policy.min_cost_weight
    hi = float("inf") if policy.max_cost_weight is None else policy.max_cost_weight
    return min(max(lam, lo), hi)


def max_cost(options: TollgateOptions, policy: TenantPolicy) -> float | None:
    caps = [float(c) for c in (options.max_cost_usd, policy.max_cost_usd) if c is not None]
    return min(caps) if caps else None


def start_plan(pool: Pool, tenant: Tenant, req: ChatRequest) -> Plan:
    """What is known before anything can be refused: route, router version, λ and cost cap.
    ``model`` is first resolved through ``model_group_alias`` (everything after, the tenant
    policy's allowed_models and the fallbacks included, sees the resolved name); a model no
    backend or route names but a wildcard backend matches is served over the pool with that
    model added (Pool.concrete)."""
    policy = tenant.policy
    cap = max_cost(req.options, policy)
    resolved = pool.settings.resolve_alias(req.model)
    require_model(tenant, req.model, resolved)  # the calling key's models (403)
    if resolved != req.model:
        req = replace(req, model=resolved)
    keyed = tenant.key_models or None
    route = pool.routes.get(req.model)
    if route is None:
        pool = pool.concrete(req.model) or pool
        return Plan(pool, req, policy, max_cost_usd=cap, key_models=keyed)
    lam = cost_weight(req.options, policy, route.cost_weight)
    return Plan(pool, req, policy, route=req.model, router_version=pool.version, lam=lam,
                max_cost_usd=cap, key_models=keyed)


def expected_cost(plan: Plan, backend: Backend, routing_output_tokens: int) -> float:
    """USD the request is expected to cost on ``backend``: what λ trades against and
    max_cost_usd caps. n_prompt·p_in + n·min(m, routing_output_tokens)·p_out: the budget
    reserves the worst case (m), routing compares the typical case, so one backend's larger
    max_output_tokens does not make it look dearer."""
    out = min(plan.output_cap(backend), routing_output_tokens) * plan.n
    return plan.pool.prices[backend.model_name].cost(plan.prompt_tokens or 0, out)


def allowed_backends(plan: Plan) -> list[str]:
    """The route's backends ∩ the tenant policy's allowed_models ∩ the request's (400 if
    empty); the calling key listed the route, which grants its backends
    (gateway/serving/plan/key_models.py)."""
    pool = plan.pool
    out = [b.model_name for b in pool.settings.route_backends(plan.route)]
    policy_allowed = plan.policy.allowed_models
    if policy_allowed is not None:
        out = [n for n in out if n in set(policy_allowed)]
    asked = plan.request.options.allowed_models
    if asked is not None:
        unknown = sorted(set(asked) - set(pool.backends))
        if unknown:
            raise invalid(f"unknown model(s) in tollgate.allowed_models: {unknown}",
                          param="tollgate.allowed_models")
        out = [n for n in out if n in set(asked)]
    if not out:
        raise invalid("no backend is allowed for this request (route, tenant policy and "
                      "tollgate.allowed_models leave none)", param="tollgate.allowed_models")
    return out


def by_promise(plan: Plan) -> bool:
    """Whether the promise rule decides this routed request: the route has a promise and the
    request sets no cost_weight of its own (else the λ rule does)."""
    return (plan.pool.promises.get(plan.route) is not None
            and plan.request.options.cost_weight is None)


def deployable(plan: Plan, share: PriorShare | None = None) -> dict[str, str]:
    """expert → backend over the allowed, priced backends the router knows (503 if none).
    Under the λ rule, backends on a cold-start prior only while under the route's
    explore_share; the promise rule sees them all, its reference always (a prior backend
    gets live traffic only where the rule finds it within the promise)."""
    pool = plan.pool
    by_rm = pool.deployable(plan.route, allowed_backends(plan))
    if share is not None and by_rm and not by_promise(plan):
        explore = pool.routes[plan.route].explore_share
        by_rm = cap_priors(share, plan.route, explore, pool.priors, by_rm)
    tier = billable_tier(plan.request.params)
    if not by_rm and tier is not None:
        raise tier_unpriced(tier, [])
    if not by_rm:
        raise GatewayError(503, f"route {plan.route!r} has no backend the router knows",
                           "service_unavailable", code="no_deployable_backend")
    return by_rm


def ranked(plan: Plan, by_rm: dict[str, str], phi: Any, prompt_tokens: int,
           held: str | None = None, share: float | None = None) -> Plan:
    """The router's decision over ``by_rm`` for Φ(x) = ``phi`` (400 if no backend fits the cap):
    on a route with a promise, the promise rule (serving/promise_routing.py) unless the request
    sets its own cost_weight; else a = p̂ − λ·c̃, c̃ dividing by the dearest backend of the
    route's whole routable pool (README "Routes"). ``held``: the backend holding this
    conversation's prompt cache, priced with its cache discount and kept first while the
    rule's eligible set holds it (serving/plan/session_affinity.py), when the request has
    earlier turns (what that backend has cached). ``share``: the prompt's
    place a route's certificate draws on (gateway/pool/certificates.py ``text_share``)."""
    plan = replace(plan, prompt_tokens=prompt_tokens, phi=phi)
    pool, s = plan.pool, plan.pool.settings
    whole = pool.deployable(plan.route)
    costs = {name: expected_cost(plan, pool.backends[name], s.routing_output_tokens)
             for name in {*by_rm.values(), *whole.values()}}
    cached = earlier_share(plan.request.messages)
    if cached <= 0:  # a single turn: nothing of it is cached yet, so nothing holds it (a
        held = None  # repeated prompt was kept on the reference over a certificate's draw)
    if held is not None and held in costs:
        costs = discounted(costs, held, pool.prices[held].cost(prompt_tokens, 0), cached,
                           cache_read_ratio(pool.backends[held]))
    promise = pool.promises.get(plan.route)
    try:
        if promise is not None and by_promise(plan):
            routed = promise_route(pool, promise, phi, by_rm, costs, plan.max_cost_usd,
                                   max(costs[b] for b in whole.values()), share)
        else:
            routed = route_request(pool.router, phi, lam=plan.lam,
                                   delta=pool.routes[plan.route].delta,
                                   backends_by_router_model=by_rm, costs_usd_by_backend=costs,
                                   max_cost_usd=plan.max_cost_usd, pool_by_router_model=whole,
                                   priors=pool.priors)
    except NoEligibleModel as e:
        raise invalid(f"no backend fits max_cost_usd={plan.max_cost_usd} for this request",
                      param="tollgate.max_cost_usd") from e
    if held is not None:
        routed = kept(routed, held)
    return replace(plan, routed=routed, candidates=routed.backends)


async def named_plan(plan: Plan, backend: Backend) -> Plan:
    """A passthrough to ``backend`` (priced: 503), measured, with the request's or the
    config's fallbacks: the plan of an endpoint that names its backend."""
    backend = priced(plan, backend)
    n_prompt, size = await measure(plan.request, backend)
    return with_plan_fallbacks(replace(plan, candidates=(backend.model_name,),
                                       prompt_tokens=n_prompt, prompt_size=size))


def priced(plan: Plan, backend: Backend) -> Backend:
    """A backend without a price is refused: a budget cannot bound what it costs (503)."""
    if backend.model_name in plan.pool.prices:
        return backend
    tier = billable_tier(plan.request.params)
    if tier is not None:
        raise tier_unpriced(tier, [backend.model_name])
    if backend.wildcard is not None:
        raise GatewayError(503, f"model {backend.model_name!r} (wildcard "
                           f"{backend.wildcard!r}) has no price: litellm's price map does not "
                           f"know {backend.litellm_model!r}; add it to model_list with "
                           "input/output_cost_per_million", "service_unavailable",
                           code="backend_unpriced")
    raise GatewayError(503, f"backend {backend.model_name!r} has no price: "
                       f"{unpriced_fix(backend)}", "service_unavailable",
                       code="backend_unpriced")


def with_plan_fallbacks(plan: Plan) -> Plan:
    """The candidates followed by the request's (or the config's) fallbacks."""
    allowed, settings = plan.policy.allowed_models, plan.pool.settings
    names = with_fallbacks(settings, list(plan.candidates), plan.request.model,
                           tuple(settings.resolve_alias(n) for n in plan.request.fallbacks),
                           None if allowed is None else list(allowed), plan.key_models)
    return replace(plan, candidates=tuple(names))


def fitted(plan: Plan) -> Plan:
    """The candidates whose context window and output cap fit (400 when none does)."""
    fit = fit_candidates(plan.pool.settings, list(plan.candidates), plan.prompt_tokens,
                         plan.request.max_tokens,
                         plan.prompt_size.files if plan.prompt_size is not None else 0)
    return replace(plan, candidates=tuple(fit))


def within_cap(plan: Plan) -> Plan:
    """A passthrough whose expected cost passes max_cost_usd is a 400."""
    name = plan.candidates[0]
    cost = expected_cost(plan, plan.pool.backends[name], plan.pool.settings.routing_output_tokens)
    if plan.max_cost_usd is not None and cost > plan.max_cost_usd:
        raise invalid(f"the predicted cost of {name} exceeds max_cost_usd={plan.max_cost_usd}",
                      param="tollgate.max_cost_usd")
    return plan


# A prompt of plain text messages up to this many characters is measured on the event loop:
# its size takes tens of µs, less than the hand-off to a worker thread and back.
INLINE_MEASURE_CHARS = 16_384


def _small(req: ChatRequest) -> bool:
    """Plain text messages of at most INLINE_MEASURE_CHARS, no list or object parameter
    (tools, a schema) but ``stream_options``: cheap to measure whatever it holds."""
    chars = 0
    for m in req.messages:
        content = m.get("content")
        if not isinstance(content, str) or len(m) > 2:
            return False
        chars += len(content)
    return chars <= INLINE_MEASURE_CHARS and not any(
        isinstance(v, (list, dict)) for k, v in req.params.items() if k != "stream_options")


async def measure(req: ChatRequest, backend: Backend, pool: Pool | None = None
                  ) -> tuple[int, PromptSize]:
    """(expected prompt tokens on ``backend``, the prompt's size). Counted with a tokenizer
    only when the prompt's bound passes a context window of ``pool`` (else ``backend``'s):
    gateway/pricing.py ``expected_prompt_tokens``; in a worker thread (CPU work proportional
    to the prompt: an 8 MB prompt takes seconds) unless the prompt is small and estimated."""
    reachable = tuple(pool.backends.values()) if pool is not None else (backend,)
    if _small(req):
        size = prompt_size(req.messages, req.params)
        estimate = estimated_prompt_tokens(backend, size, reachable)
        if estimate is not None:
            return estimate, size
    return await anyio.to_thread.run_sync(expected_prompt_tokens, backend, req.messages,
                                          req.params, reachable)


async def plan_request(ctx: GatewayContext, plan: Plan) -> Plan:
    """Complete a started plan: Φ(x) and prompt measurements off the loop, the rest pure
    (what it decided is counted by the caller: ``record_routing``). The candidates are not yet
    checked against the request (``admissible``), so a refusal there still logs what was
    planned."""
    req = plan.request
    tier = billable_tier(req.params)
    if tier is not None:  # priced at that tier (gateway/serving/budget/fee_params.py)
        plan = replace(plan, pool=tier_pool(plan.pool, tier))
    if plan.route is None:
        backend = priced(plan, passthrough_backend(plan))
        n_prompt, size = await measure(req, backend, plan.pool)
        plan = replace(plan, candidates=(backend.model_name,), prompt_tokens=n_prompt,
                       prompt_size=size)
        return with_plan_fallbacks(plan)
    by_rm = deployable(plan, ctx.prior_share)
    first = plan.pool.backends[next(iter(by_rm.values()))]
    started = time.perf_counter()
    n_prompt, size = await measure(req, first, plan.pool)
    sized = replace(plan, prompt_size=size)
    text = embed_text(req.messages, ctx.settings.encoder_max_chars)
    affinity = ctx.affinity
    held = affinity.held(plan.conversation) if affinity is not None else None
    share = text_share(text)  # one draw for both encoders' passes (certificates.py)
    plan = await cascaded(plan.pool.router, text, ctx.embedder.embed,
                          lambda phi: ranked(sized, by_rm, phi, n_prompt, held, share))
    plan = replace(plan, routing_s=time.perf_counter() - started)
    return with_plan_fallbacks(plan)


def record_routing(ctx: GatewayContext, plan: Plan) -> None:
    """A routed plan's decision, counted: its time and encoder, and under the λ rule the
    cold-start shares (``PriorShare``), which count the rule's own decisions."""
    routed = plan.routed
    if routed is None or plan.routing_s is None:
        return
    ctx.metrics.routing.observe(plan.routing_s)
    ctx.metrics.decisions.labels(encoder=routed.decision.encoder or ctx.encoder.kind).inc()
    if not by_promise(plan):
        chosen = routed.decision.chosen
        ctx.prior_share.record(plan.route, routed.by_router_model.get(chosen),
                               chosen in plan.pool.priors)


def token_bounds(plan: Plan, min_output_tokens: int) -> tuple[int, int]:
    """(least, most) tokens to reserve against the tenant's TPM: most is R = max_h
    N_prompt(h) + n·max_h m_h; least the same when the client set max_tokens, else as
    little as N_prompt + n·min_output_tokens (the output cap is then lowered to fit)."""
    backends = [plan.pool.backends[name] for name in plan.candidates]
    prompt = max(plan.prompt_bound(b) for b in backends)
    out = plan.n * max(plan.output_cap(b) for b in backends)
    least = prompt + (out if plan.request.max_tokens is not None
                      else min(out, plan.n * min_output_tokens))
    return least, prompt + out


def admissible(plan: Plan) -> Plan:
    """The candidates that can take this request (400 when none can): priced (a fallback
    without a price at the request's service_tier is left out), fitting the request; a
    passthrough must also be within its cost cap (a routed one was ranked within it)."""
    priced_ones = tuple(n for n in plan.candidates if n in plan.pool.prices)
    tier = billable_tier(plan.request.params)
    if tier is not None and not priced_ones:
        raise tier_unpriced(tier, list(plan.candidates))
    plan = fitted(replace(plan, candidates=priced_ones or plan.candidates))
    return plan if plan.route is not None else within_cap(plan)
