"""What happened to one request, from authentication to its log row: the ``Outcome``.

It exists as soon as the tenant is known, before anything can be refused, so every request,
refused or answered or cancelled, settles its held money and logs exactly once (``finish``).
The plan is filled in as planning proceeds (None until the body is parsed); the attempts
(gateway/serving/forwarding/attempts.py) are taken whole from their frozen result, the answer's text
and usage as they reach the client. Only this module writes it. The log row and the learning record
are both read from it (gateway/serving/record/log_row.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import anyio

from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.pricing import count_text_tokens
from gateway.reliability.parallel import Slot
from gateway.reliability.ratelimit import TokenGrant
from gateway.serving.budget.bound_factors import ABSURD_FACTOR, report_ratio
from gateway.serving.budget.budget_hold import BudgetHold
from gateway.serving.forwarding.attempts import Attempted, Attempts, Forward
from gateway.serving.forwarding.upstream import UpstreamFailure
from gateway.serving.plan.planning import PASSTHROUGH_VERSION, Plan, token_bounds
from gateway.serving.record.access_log import log_access
from gateway.serving.record.attribution import Attribution
from gateway.serving.record.log_row import log_row, served
from gateway.serving.tracing import NO_TRACE, RequestTrace
from gateway.store.records import Tenant

if TYPE_CHECKING:
    from gateway.serving.forwarding.cached_answer import RequestCache

log = logging.getLogger(__name__)

def reported_tokens(value: Any) -> int | None:
    """A reported token count, or None when it is not one (missing, negative, not a number)."""
    if isinstance(value, bool):
        return None
    try:
        n = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return n if n >= 0 else None


def answered_name(out: Outcome) -> str:
    """The answering backend's name: the ``model`` the client is told."""
    assert out.answered is not None, "asked before a backend answered"
    return out.answered.model_name


class Outcome:
    """One request's record: its plan, attempts, answer, usage and cost."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, request_id: str, t0: float,
                 trace: RequestTrace = NO_TRACE,
                 client_gone: Callable[[], Awaitable[bool]] | None = None) -> None:
        self.ctx, self.tenant, self.rid, self.t0 = ctx, tenant, request_id, t0
        self.trace = trace  # its OpenTelemetry spans (gateway/serving/tracing.py)
        self.created_at = datetime.now(UTC)
        self.plan: Plan | None = None  # set by the frame as planning proceeds (endpoint.py)
        # key, user and session on the log row; the session's once the body is read
        self.attribution = Attribution(user_id=tenant.key_user_id)
        self.hold = BudgetHold(ctx, tenant, request_id)
        self.hold.client_gone = client_gone  # ends a wait for the budget
        self.attempts: list[dict] = []
        self.answered: Backend | None = None
        self.deployment: int | None = None  # which of the answering group's deployments
        self.usage_prompt_tokens: int | None = None  # the upstream's count, once it gave one
        self.completion_tokens: int | None = None
        self.cost_usd: float | None = None
        self.ttft_ms: float | None = None
        self.answer_text = ""  # what the client received, for the learning loop
        self.timeout_charges: list[tuple[str, float]] = []  # (backend, USD) owed for timeouts
        # per backend attempted: (prompt-token bound, output tokens sent as the cap × n)
        self.bounds: dict[str, tuple[int, int]] = {}
        self.output_cap: int | None = None  # the lowered cap sent upstream, if any
        self.excess_tokens = (0, 0)  # reported past the bounds (prompt, completion): overrun
        self.reported: tuple[int | None, int | None] = (None, None)  # as reported, unclamped
        self.overrun_usd = 0.0  # what the provider reported past the hold: the operator's
        self.settle_error: str | None = None
        self.tpm_grant: TokenGrant | None = None  # tokens reserved against TPM
        self.parallel_slot: Slot | None = None  # of max_parallel_requests (endpoint.py)
        self.cache: RequestCache | None = None  # the response cache, when on (delivery.py)
        self.finished = False

    @property
    def cache_hit(self) -> bool:
        return self.cache is not None and self.cache.state == "hit"

    def planned(self, plan: Plan) -> Plan:
        """The plan as far as it was made: a refusal is logged with it."""
        self.plan = plan
        return plan

    def admitted(self, slot: Slot | None) -> None:
        """The request's slot of max_parallel_requests, given back when it is settled."""
        self.parallel_slot = slot

    def caching(self, cache: RequestCache | None) -> None:
        """The request's response cache (gateway/serving/forwarding/cached_answer.py), when it has
        one."""
        self.cache = cache

    async def reserve_tokens(self, plan: Plan) -> Plan:
        """Reserve the request's token bound against the tenant's TPM (429 when it does not
        fit; gateway/reliability/ratelimit.py): the plan, its output cap lowered to what was
        granted (``Plan.tpm_tokens``)."""
        least, most = token_bounds(plan, self.ctx.settings.min_output_tokens)
        self.tpm_grant = await self.ctx.reliability.reserve_tokens(self.tenant, least, most)
        if self.tpm_grant is not None and self.tpm_grant.tokens < most:
            return replace(plan, tpm_tokens=self.tpm_grant.tokens)
        return plan

    async def attempt(self, plan: Plan, forward: Forward) -> Attempted:
        """The plan's attempts (gateway/serving/forwarding/attempts.py), taken whole; their refusal
        is raised when none answered. A cancelled loop still leaves the attempts it made."""
        attempts = Attempts(self.ctx, self.tenant, self.hold, self.trace, self.t0)
        try:
            tried = await attempts.run(plan, forward)
        except BaseException:
            self._took(attempts.so_far())
            raise
        self._took(tried)
        if tried.refusal is not None:
            raise tried.refusal
        return tried

    def _took(self, tried: Attempted) -> None:
        self.attempts = list(tried.tried)  # the records themselves: annotated when settled
        self.answered, self.deployment = tried.answered, tried.deployment
        self.timeout_charges = list(tried.charges)
        self.bounds = dict(tried.bounds)
        a = tried.answered
        # the output cap the budget (or TPM) lowered the answering attempt to (issue 47.4)
        self.output_cap = tried.caps.get(a.model_name) if a and a.model_name in tried.lowered \
            else None

    def streaming(self) -> None:
        """The first chunk is on its way to the client: time to first token."""
        self.ttft_ms = round((time.perf_counter() - self.t0) * 1000, 3)

    def add_text(self, text: str) -> None:
        """What a stream sent the client adds to the answer (what the loop learns from)."""
        self.answer_text += text

    def take_answer(self, text: str, usage: dict) -> None:
        """A complete answer's text and usage."""
        self.answer_text = text
        self.take_usage(usage)

    def stream_broke(self, failure: UpstreamFailure) -> tuple[int, str]:
        """The answering stream failed after its first byte: (status, error) of the request,
        told to the backend's circuit breaker and written on the answering attempt."""
        name = self.answered.model_name if self.answered else ""
        self.ctx.reliability.upstream_result(name, failure, self.tenant.principal)
        error = f"stream broken after first byte: {failure}"
        if self.attempts:
            self.attempts[-1]["error"] = error
        return (504 if failure.kind == "timeout" else 502), error

    def replayed(self, b: Backend, body: dict[str, Any]) -> None:
        """A cached answer of ``b``: answered, its usage as the log's token counts (what the
        dashboard's saving prices), no cost."""
        self.answered = b
        usage = body.get("usage") or {}
        self.usage_prompt_tokens = reported_tokens(usage.get("prompt_tokens"))
        self.completion_tokens = reported_tokens(usage.get("completion_tokens")) or 0
        choices = body.get("choices") or [{}]
        self.answer_text = str((choices[0].get("message") or {}).get("content") or "")
        self.ttft_ms = round((time.perf_counter() - self.t0) * 1000, 3)

    @property
    def prompt_tokens(self) -> int | None:
        """The upstream's count once it reported usage, else the plan's."""
        if self.usage_prompt_tokens is not None:
            return self.usage_prompt_tokens
        return self.plan.prompt_tokens if self.plan else None

    @property
    def route_label(self) -> str:
        return (self.plan and self.plan.route) or "passthrough"

    def take_usage(self, usage: dict) -> None:
        """The upstream's usage, clamped: a count that is negative or not a number is not
        believed (the prompt is then our count; the completion what was answered, counted
        at settling); a count past the attempt's bound is clamped to it, the rest kept apart
        as the operator's overrun (``excess_tokens``, at most ``ABSURD_FACTOR`` × the bound;
        gateway/serving/budget/bound_factors.py). Clamped before anything is written: no count
        reaches the log row or the ledger past the bound, whatever its size."""
        prompt, completion = reported_tokens(usage.get("prompt_tokens")), reported_tokens(
            usage.get("completion_tokens"))
        self.reported = (prompt, completion)
        if prompt is None or prompt == 0:
            prompt = (self.plan.prompt_tokens if self.plan else None) or 0
        if completion == 0 and self.answer_text:  # text in no tokens: a stand-in (litellm's
            completion = None  # when an upstream sent none and its counter is off), counted
        bound = self.bounds.get(self.answered.model_name) if self.answered else None
        excess = [0, 0]
        if bound is not None:
            if prompt > bound[0]:
                excess[0] = min(prompt, int(ABSURD_FACTOR * max(bound[0], 1))) - bound[0]
                prompt = bound[0]
            if completion is not None and completion > bound[1]:
                excess[1] = min(completion, int(ABSURD_FACTOR * max(bound[1], 1))) - bound[1]
                completion = bound[1]
        if excess != [0, 0]:
            log.warning("request %s: %s reported usage past the reserved bound (%s tokens "
                        "more than prompt %d / completion %d): clamped, the excess is the "
                        "operator's overrun", self.rid, self.answered.model_name if self.answered
                        else "?", excess, *(bound or (0, 0)))
        self.usage_prompt_tokens = prompt
        self.completion_tokens = completion
        self.excess_tokens = (excess[0], excess[1])

    def headers(self) -> dict[str, str]:
        version = self.plan.router_version if self.plan else PASSTHROUGH_VERSION
        h = {"x-tollgate-request-id": self.rid, "x-tollgate-router-version": version}
        if self.answered is not None:
            h["x-tollgate-model"] = self.answered.model_name
        if self.output_cap is not None:
            h["x-tollgate-output-cap"] = str(self.output_cap)
        cert = ((self.plan.routed.promise or {}).get("certificate")
                if self.plan is not None and self.plan.routed is not None else None)
        if cert is not None:  # a certificate from judged pairs decided (promise_routing.py)
            bound = "none" if cert["upper_drop"] is None else f"{cert['upper_drop']:.4f}"
            h["x-tollgate-certificate"] = (f"region={cert['region']}; "
                                           f"n_prompts={cert['n_prompts']}; drop_bound={bound}")
        if self.cache is not None:
            h.update(self.cache.headers())
        return h

    def answer_cost(self) -> float:
        """usage.prompt_tokens · p_in + usage.completion_tokens · p_out at the answering
        deployment's price, by litellm's cost functions where the price is litellm's
        (gateway/pricing.py; 0 if unanswered or answered from the cache)."""
        if (self.answered is None or self.prompt_tokens is None or self.plan is None
                or self.cache_hit):
            return 0.0
        price = self.plan.pool.answer_price(self.answered.model_name, self.deployment)
        return price.settle_cost(self.prompt_tokens, self.completion_tokens or 0)

    def overrun_cost(self) -> float:
        """What the upstream reported past the answer's bounds, at its prices."""
        if self.answered is None or self.plan is None or self.excess_tokens == (0, 0):
            return 0.0
        return self.plan.pool.answer_price(self.answered.model_name,
                                           self.deployment).cost(*self.excess_tokens)

    def actual_cost(self) -> float:
        """What the tenant owes: the answer's cost + what timed-out attempts owe
        (gateway/serving/forwarding/attempts.py), never more than was held (``charged``)."""
        return self.charged(self.answer_cost() + self.hold.owed)

    def charged(self, usd: float) -> float:
        """``usd``, at most what the request held: a tenant is never charged past its
        reservation (gateway/serving/budget/bound_factors.py); the rest is ``overrun_usd``."""
        return max(0.0, min(usd, self.hold.held))

    def count_unreported(self, counted: int) -> int:
        """Our own count of an answer without usage, within the attempt's output bound: an
        estimate is never a bill past what was reserved (and never an overrun)."""
        bound = self.bounds.get(self.answered.model_name) if self.answered else None
        return counted if bound is None else min(counted, bound[1])

    def _learn(self) -> bool:
        """The answering backend's report against its bound
        (gateway/serving/budget/bound_factors.py): its factor widened, or held out when absurd
        (returned)."""
        b = self.answered
        bound = self.bounds.get(b.model_name) if b is not None else None
        factors = self.ctx.bound_factors
        if b is None or bound is None or factors is None:
            return False
        return factors.reported(b.model_name, report_ratio(self.reported, bound),
                                self.tenant.principal) in ("absurd", "held out")

    def _book_overrun(self, owed: float) -> None:
        """The operator's part of the provider's report: counted by backend, in the
        answering attempt's log entry."""
        name = self.answered.model_name if self.answered else "none"
        self.overrun_usd = self.overrun_cost() + max(0.0, owed - self.cost_usd)
        if self.overrun_usd <= 0:
            return
        m = self.ctx.metrics
        m.overruns.inc()
        m.overrun_usd.inc(self.overrun_usd)
        m.overrun_by_backend.labels(name).inc(self.overrun_usd)
        answered = [a for a in self.attempts if a.get("model") == name and a["status"] == 200]
        if answered:
            answered[-1]["overrun_usd"] = self.overrun_usd

    async def settle(self) -> None:
        """Settle the held money with the actual cost (once); never raises: a fault is kept
        for the log row (``settle_error``). The request's parallel slot is given back here:
        before the client has the answer, so its next request never meets this one."""
        slot, self.parallel_slot = self.parallel_slot, None
        await self.ctx.reliability.free_slot(slot)
        if self.hold.settled:
            return
        try:
            if self.answered is not None and self.completion_tokens is None:
                b = self.answered  # no believable count: what was answered, counted
                self.completion_tokens = self.count_unreported(
                    await anyio.to_thread.run_sync(count_text_tokens, b, self.answer_text))
            owed = self.answer_cost() + self.hold.owed
            self.cost_usd = self.charged(owed)
            absurd = self._learn()
            if self.answered is not None and not self.cache_hit:  # the backend's trust
                # (gateway/serving/budget/budget_gate.py)
                self.ctx.budget_gate.answered(self.answered.model_name, overran=absurd)
            self._book_overrun(owed)
            await self.hold.settle(self.cost_usd)
        except Exception as e:  # noqa: BLE001 - a settlement fault must not lose the log row
            self.settle_error = f"settlement failed: {type(e).__name__}: {e}"

    async def finish(self, status: int, error: str | None) -> None:
        """Settle the held money with the actual cost, count, and queue the log row (once)."""
        if self.finished:
            return
        self.finished = True
        await self.settle()
        if self.cost_usd is None:
            self.cost_usd = self.actual_cost()
        if self.settle_error:
            error = f"{error + '; ' if error else ''}{self.settle_error}"
        self._count(status)
        self.trace.finished(self, status, error)
        row = log_row(self, status, error)
        self.ctx.log_writer.submit(row)
        log_access(row, self.tenant)
        if self.cache_hit:  # a replay: nothing new to learn, no tokens spent upstream
            return
        self._hold_conversation(status)
        if self.ctx.learning is not None:
            await self.ctx.learning.after_request(served(self, status))
        if self.answered is not None or self.tpm_grant is not None:  # tokens per minute
            await self.ctx.reliability.settle_tokens(self.tenant, self.tpm_grant,
                                                     self._tokens_used())

    def _hold_conversation(self, status: int) -> None:
        """The backend that answered a routed conversation holds its prompt cache now
        (gateway/serving/plan/session_affinity.py)."""
        affinity = self.ctx.affinity
        plan = self.plan
        if (affinity is not None and status == 200 and self.answered is not None
                and plan is not None and plan.route is not None):
            affinity.hold(plan.conversation, self.answered.model_name)

    def _tokens_used(self) -> int:
        """What the request counts against TPM: the answer's tokens; unanswered, its whole
        reservation if an attempt timed out after it was sent (the provider worked on it),
        else none."""
        if self.answered is not None:
            return (self.prompt_tokens or 0) + (self.completion_tokens or 0)
        if self.timeout_charges and self.tpm_grant is not None:
            return self.tpm_grant.tokens
        return 0

    def _count(self, status: int) -> None:
        m, route = self.ctx.metrics, self.route_label
        model = self.answered.model_name if self.answered else "none"
        stream = str(bool(self.plan and self.plan.request.stream)).lower()
        m.requests.labels(route, model, str(status), stream).inc()
        m.latency.labels(route, stream).observe(time.perf_counter() - self.t0)
        for backend, usd in self.timeout_charges:
            m.timeout_charges.labels(backend).inc()
            m.timeout_charged_usd.labels(backend).inc(usd)
            m.cost.labels(backend).inc(usd)
        if self.answered is not None and not self.cache_hit:
            m.cost.labels(model).inc(self.answer_cost())
            m.tokens.labels(model, "prompt").inc(self.prompt_tokens or 0)
            m.tokens.labels(model, "completion").inc(self.completion_tokens or 0)
