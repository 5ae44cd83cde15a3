"""The attempts of one planned request: hold the budget, forward with fallback, until one answers.

Built from a complete ``Plan``; each endpoint says how one attempt is forwarded (a ``Forward``
of a ``Call``). The loop returns a frozen ``Attempted``: what was tried, what answered (its
reply) and what timed-out attempts owe; the request's ``Outcome`` takes it whole
(gateway/serving/record/outcome.py), and the endpoint's story sends the answer and settles it.

Budget rule (the hard budget is never exceeded by design, not by luck):
- The reservation for a backend h is ĉ_h = N_prompt·p_in + n·m·p_out, with N_prompt the
  prompt-token bound of gateway/prompt_tokens.py (not the tokenizer's estimate) and m the client's
  output cap (the smaller of max_tokens and max_completion_tokens) or, when the client gives
  none, h's ``max_output_tokens``; the upstream receives m in every output-cap field the
  client sent, so the settled cost cannot pass the reservation. A provider reporting more
  anyway is an overrun (gateway/store/ledger.py, ``tollgate_budget_overruns``).
- ĉ_h does not fit the remaining budget (no client max_tokens, or with
  ``budget.lower_max_tokens``, the default, h the last candidate): m is lowered at once to what half the free room
  pays (so a parallel request starts too), else, after waiting for the tenant's other
  reservations, to what the settled spend's room pays; below ``min_output_tokens`` h does
  not fit. The cap sent is announced in ``x-tollgate-output-cap`` (issue 47.4).
- The candidates are tried in order, one loop for streamed and non-streamed requests; one that
  does not fit is skipped (an attempt with status 429), one whose circuit is open too (503).
  When no candidate fits: a retryable 429 ``budget_busy`` (``Retry-After``) if the settled
  spend still pays for the smallest request this one could be (it waited ``budget_wait_s``
  for the tenant's in-flight reservations, gateway/serving/budget/budget_gate.py), else 429
  ``budget_exceeded`` (``x-should-retry: false``).
- A fallback to a dearer backend tops up the reservation; settlement charges the actual cost
  across the reservations and releases the rest.
- An attempt that timed out after its request was sent is billed by the provider: not
  streamed, the provider generates and bills the answer, so it costs the tenant the attempt's
  whole reservation ĉ_h; streamed, closing the stream stops generation, so it costs the
  prompt's input cost N̂·p_in (N̂ the tokenizer's count, at most N_prompt); whether or not
  another backend then answers. Later attempts are held on top of it
  (gateway/serving/budget/budget_hold.py), so the total stays within the hold. Logged as the
  attempt's ``charged_usd``, counted in ``tollgate_timeout_charges`` /
  ``tollgate_timeout_charged_usd``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import GatewayError, budget_busy, budget_exceeded
from gateway.provider.deployments import deployment_order, next_deployment
from gateway.provider.failures import UpstreamFailure
from gateway.provider.transport import ProviderReply, ProviderRequest, ReplyBody
from gateway.reliability.guards import circuit_open_error
from gateway.serving.budget.bound_factors import held_out_error, widened, widened_price
from gateway.serving.budget.budget_hold import BudgetHold
from gateway.serving.plan.planning import Plan
from gateway.serving.tracing import RequestTrace
from gateway.store.key_ledger import KeyBudgetExceeded
from gateway.store.records import Tenant

HELD_OUT = "held out: reported usage past 10x its bound"


@dataclass(frozen=True)
class Call:
    """One attempt as an endpoint forwards it: the backend, the output cap the budget allowed,
    and chat's upstream params with that cap in each output field."""

    backend: Backend
    cap: int
    params: dict[str, Any]


# What an endpoint sends for an attempt (its operation and parameters): the loop sends it to
# the backend's deployments through the context's transport (gateway/provider/transport.py).
Forward = Callable[[Call], ProviderRequest]


@dataclass(frozen=True)
class Attempted:
    """What the attempts of one request did, fixed once the loop ended."""

    tried: tuple[dict, ...] = ()  # the attempt log's records, in order
    answered: Backend | None = None
    deployment: int | None = None  # which of the answering group's deployments
    reply: ReplyBody | None = None  # the answer as the upstream gave it (an OpenStream when streamed)
    charges: tuple[tuple[str, float], ...] = ()  # (backend, USD) owed for timed-out attempts
    # per backend attempted: (prompt-token bound, output tokens sent as the cap × n)
    bounds: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    # backends sent a lower output cap than the request's own (the budget or TPM lowered
    # it): their answer depends on more than the request, so it is not cached
    lowered: frozenset[str] = frozenset()
    refusal: GatewayError | None = None  # why nothing answered (None when one did)
    caps: Mapping[str, int] = field(default_factory=dict)  # output cap sent, per backend

    @property
    def cacheable(self) -> bool:
        """The answer depends on the request alone (its output cap was not lowered)."""
        return self.answered is not None and self.answered.model_name not in self.lowered


class Attempts:
    """Forwards a complete plan's candidates in rank order until one answers; its working
    state is its own until ``run`` returns it frozen (``so_far`` for a cancelled run)."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, hold: BudgetHold,
                 trace: RequestTrace, t0: float) -> None:
        self.ctx, self.tenant, self.hold, self.trace, self.t0 = ctx, tenant, hold, trace, t0
        self.circuit_open: GatewayError | None = None
        self.tried: list[dict] = []
        self.charges: list[tuple[str, float]] = []
        self.charges_logged = 0
        self.bounds: dict[str, tuple[int, int]] = {}
        self.lowered: set[str] = set()
        self.caps: dict[str, int] = {}
        self.deployment: int | None = None

    def so_far(self, answered: Backend | None = None, reply: ReplyBody | None = None,
               refusal: GatewayError | None = None) -> Attempted:
        return Attempted(tuple(self.tried), answered, self.deployment, reply,
                         tuple(self.charges), dict(self.bounds), frozenset(self.lowered),
                         refusal, dict(self.caps))

    async def run(self, plan: Plan, forward: Forward) -> Attempted:
        """The candidates in order, each admitted (circuit, bound factor, budget) then
        forwarded, until one answers; at most ``max_attempts`` are forwarded to. A 400 about
        the request stops the loop: the next backend would refuse it too."""
        last: UpstreamFailure | None = None
        forwarded = 0
        for name in plan.candidates:
            if forwarded >= self.ctx.settings.max_attempts:
                break
            b = plan.pool.backends[name]
            cap = await self.admitted(plan, b)
            if cap is None:
                continue
            if forwarded == 0:
                self.ctx.metrics.overhead.labels(plan.route or "passthrough").observe(
                    time.perf_counter() - self.t0)
            forwarded += 1
            started = time.perf_counter()
            try:
                reply = await self.send(plan, b, forward(self.call(plan, b, cap)))
            except UpstreamFailure as f:
                last = f
                self.upstream_result(b, f, started)
                if not f.retryable:
                    break
                continue
            self.upstream_result(b, None, started)
            self.deployment = reply.deployment  # its price is what is settled
            return self.so_far(answered=b, reply=reply.body)
        return self.so_far(refusal=self.final_error(plan, last))

    async def send(self, plan: Plan, b: Backend, request: ProviderRequest) -> ProviderReply:
        """``request`` to ``b``'s deployments in turn (gateway/serving/forwarding/
        deployments.py), each billable failure charged to the hold (``charge_timeout``) and
        the next deployment tried only if the hold covers it on top; raises the last
        UpstreamFailure."""
        order = deployment_order(b)
        for i, deployment in enumerate(order):
            try:
                return await self.ctx.transport.send(replace(request, deployment=deployment))
            except UpstreamFailure as failure:
                go_on = next_deployment(b, failure, len(order) - i - 1)
                if failure.billable:
                    self.charge_timeout(b, plan)
                    go_on = go_on and await self.hold.fits_again()
                if not go_on:
                    raise
        raise AssertionError("a backend has at least one deployment")

    async def admitted(self, plan: Plan, b: Backend) -> int | None:
        """The output cap an attempt on ``b`` may send, with its share of the budget held; None
        when its circuit is open, it is held out, or it does not fit the budget (logged)."""
        name, circuits, settings = b.model_name, self.ctx.reliability.circuits, self.ctx.settings
        started = time.perf_counter()
        factors = self.ctx.bound_factors  # gateway/serving/budget/bound_factors.py
        if factors is not None and factors.held_out(name, self.tenant.principal):
            self.record(b, 503, HELD_OUT, started)
            self.circuit_open = self.circuit_open or held_out_error(name)
            return None
        f = factors.factor(name) if factors is not None else 1.0
        if not circuits.allow(name):
            self.record(b, 503, "circuit open: backend in cooldown", started)
            self.circuit_open = circuit_open_error(self.ctx.reliability, list(plan.candidates))
            return None
        cap = await self.hold.fit(  # at the price widened by its factor f_h (B1)
            widened_price(plan.pool.prices[name], f), plan.prompt_bound(b), plan.output_cap(b),
            plan.n, shrink=plan.request.max_tokens is None or self.lowers(plan, name),
            min_tokens=settings.min_output_tokens,
            worst_tokens=None if self.ctx.budget_gate.trusted(name)
            else b.model_info.max_output_tokens)
        if cap is None:
            circuits.release(name)
            self.record(b, 429, "budget: does not fit the remaining budget", started)
            return None
        if factors is not None and factors.held_out(name, self.tenant.principal):
            circuits.release(name)  # held out while it waited for the hold
            self.record(b, 503, HELD_OUT, started)
            self.circuit_open = self.circuit_open or held_out_error(name)
            return None
        self.bounds[name] = (widened(plan.prompt_bound(b), f), widened(cap * plan.n, f))
        self.caps[name] = cap
        if cap < (plan.request.max_tokens or b.model_info.max_output_tokens):
            self.lowered.add(name)
        return cap

    def lowers(self, plan: Plan, name: str) -> bool:
        """Whether the client's own max_tokens may be lowered to fit the budget on ``name``:
        with ``budget.lower_max_tokens``, on the last candidate only, so a routed request
        takes a later candidate's whole answer before an earlier one's cut answer."""
        return self.ctx.settings.budget.lower_max_tokens and name == plan.candidates[-1]

    def call(self, plan: Plan, b: Backend, cap: int) -> Call:
        params = dict(plan.request.params)
        for name in plan.request.output_fields or ("max_tokens",):
            params[name] = cap
        return Call(b, cap, params)

    def charge_timeout(self, b: Backend, plan: Plan) -> None:
        """A billable timeout on ``b``: the request owes the attempt's whole reservation
        (non-streamed) or the prompt's input cost on ``b`` (streamed) (module docstring)."""
        if plan.request.stream:
            tokens = min(plan.prompt_tokens or 0, plan.prompt_bound(b))
            usd = self.hold.owe(plan.pool.prices[b.model_name].cost(tokens, 0))
        else:
            usd = self.hold.owe(self.hold.attempt_usd)
        self.charges.append((b.model_name, usd))

    def record(self, b: Backend, status: int, error: str | None, started: float,
               charged_usd: float = 0.0) -> None:
        """One attempt-log record, whole when made (never edited after: the trace and the
        Outcome hold it): with ``charged_usd`` when its billable timeouts cost the tenant."""
        record = {"model": b.model_name, "status": status, "error": error,
                  "latency_ms": round((time.perf_counter() - started) * 1000, 3)}
        if charged_usd:
            record["charged_usd"] = charged_usd
        self.tried.append(record)
        self.trace.attempted(record)  # its span (gateway/serving/tracing.py)
        self.ctx.metrics.attempts.labels(b.model_name, str(status)).inc()

    def upstream_result(self, b: Backend, f: UpstreamFailure | None, started: float) -> None:
        """An attempt that reached the upstream: to the circuit breaker and the attempt log."""
        self.ctx.reliability.upstream_result(b.model_name, f, self.tenant.principal)
        charged = sum(usd for _, usd in self.charges[self.charges_logged:])
        self.charges_logged = len(self.charges)
        self.record(b, 200 if f is None else f.status, None if f is None else str(f), started,
                    charged)

    def final_error(self, plan: Plan, last: UpstreamFailure | None) -> GatewayError:
        """Why nothing answered: a circuit open, the budget, or the last upstream failure."""
        if last is None and self.circuit_open is not None:
            return self.circuit_open
        if last is None:  # nothing was tried: every candidate was over budget
            return self.budget_refusal(plan.request.max_tokens)
        return upstream_error(last, [a["model"] for a in self.tried
                                     if not (a["error"] or "").startswith("budget")])

    def budget_refusal(self, asked: int | None) -> GatewayError:
        """No candidate fits the budget: retryable while others' reservations are the reason."""
        hold = self.hold
        e = hold.refusal
        whose = f"key {e.key_id}'s " if isinstance(e, KeyBudgetExceeded) else ""
        detail = (f" ({whose}budget ${e.budget_usd:.6f}, spent ${e.spent_usd:.6f}, reserved "
                  f"${e.reserved_usd:.6f})" if e is not None else "")
        if e is not None and e.overrun_usd:
            detail += (f"; a provider charged ${e.overrun_usd:.6f} more than was reserved, "
                       "so this tenant is refused until an operator reviews its budget")
        if e is not None and hold.retryable:  # fits the settled spend: later, it may
            wait = self.ctx.settings.budget_wait_s
            return budget_busy(
                "This request's predicted cost does not fit the budget while the tenant's "
                f"other requests hold their reservations{detail}; waited "
                f"{hold.waited_s:.1f}s of budget_wait_s={wait:g}s. Retry shortly.",
                retry_after_s=1)
        return budget_exceeded(
            f"This request's predicted cost does not fit the remaining budget{detail}."
            + affordable(hold.affordable_tokens, asked))


def upstream_error(last: UpstreamFailure, tried: list[str]) -> GatewayError:
    """The client's error when no attempt answered, ``last`` the last failure (of every
    endpoint): the upstream's 400 about the request as it is, a timeout 504, a rate limit 503,
    anything else 502."""
    if not last.retryable:
        return GatewayError(last.status, f"upstream refused the request: {last.message}",
                            "invalid_request_error", code="upstream_bad_request")
    status = {504: 504, 429: 503}.get(last.status, 502)
    return GatewayError(
        status,
        f"every upstream attempt failed ({', '.join(tried)}); last: {last.kind}: {last.message}",
        "upstream_error",
        code={504: "upstream_timeout", 503: "upstream_unavailable"}.get(status, "bad_gateway"),
    )


def affordable(tokens: int | None, asked: int | None) -> str:
    """What the budget's room pays, for a client that set its output cap (with none set, the
    cap is lowered already down to ``min_output_tokens``)."""
    if asked is None or tokens is None:
        return ""
    if tokens < 1:
        return " The remaining budget does not pay for this prompt on any backend."
    return (f" You asked for up to {asked} output tokens; the remaining budget pays for up to "
            f"{tokens} (a smaller output cap fits).")
