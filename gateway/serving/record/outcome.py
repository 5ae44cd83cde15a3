"""What happened to one request, from authentication to its log row: the ``Outcome``.

It exists as soon as the tenant is known, before anything can be refused, so every request
of every endpoint, refused or answered or cancelled, settles its held money and logs exactly
once (``finish``). A planned request (chat, Responses, completions, Messages) fills in its plan
as planning proceeds (None until the body is parsed) and takes its attempts
(gateway/serving/forwarding/attempts.py) whole from their frozen result; a request that names its
backend and is billed by what it sends (embeddings and the unit endpoints: its ``unit`` label)
records its one call (gateway/serving/named_call.py) and the cost its endpoint read off
the reply. The answer's text and usage are taken as they reach the client. Only this module
assigns its attributes (tests/gateway/serving/test_outcome_writes.py); an attempt's record is
never edited once made: what is learnt of it later (a broken stream, an overrun) is written on
the row (``attempt_log``). The log row and the learning record are both read from it
(gateway/serving/record/log_row.py).
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
from gateway.prompt_tokens import count_text_tokens
from gateway.provider.failures import UpstreamFailure
from gateway.reliability.parallel import Slot
from gateway.reliability.ratelimit import TokenGrant
from gateway.serving.budget.budget_hold import BudgetHold
from gateway.serving.forwarding.attempts import Attempted, Attempts, Forward
from gateway.serving.plan.planning import Plan, token_bounds
from gateway.serving.record.access_log import log_access
from gateway.serving.record.attribution import Attribution
from gateway.serving.record.log_row import log_row, served
from gateway.serving.record.request_metrics import count_request
from gateway.serving.record.tollgate_headers import tollgate_headers
from gateway.serving.record.usage import clamped, learned, reported_tokens, tokens_used
from gateway.serving.tracing import NO_TRACE, RequestTrace
from gateway.store.records import Tenant

if TYPE_CHECKING:
    from gateway.serving.forwarding.cached_answer import RequestCache

log = logging.getLogger(__name__)

def answered_name(out: Outcome) -> str:
    """The answering backend's name: the ``model`` the client is told."""
    assert out.answered is not None, "asked before a backend answered"
    return out.answered.model_name


class Outcome:
    """One request's record: its plan (or its named unit call), attempts, answer, usage and
    cost. ``unit``: the label of an endpoint billed by the unit (``embeddings``, ``images`` ...:
    its metrics' route and its row's reason), None for a planned request; ``by_tokens``: its
    input is counted in the token metrics (embeddings)."""

    def __init__(self, ctx: GatewayContext, tenant: Tenant, request_id: str, t0: float,
                 trace: RequestTrace = NO_TRACE,
                 client_gone: Callable[[], Awaitable[bool]] | None = None,
                 unit: str | None = None, by_tokens: bool = False) -> None:
        self.ctx, self.tenant, self.rid, self.t0 = ctx, tenant, request_id, t0
        self.unit, self.by_tokens = unit, by_tokens
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
        self.stream_error: str | None = None  # the answering stream broke after its first byte
        self.named: str | None = None  # the backend a unit call names (named_call.py)
        self.unit_cost = 0.0  # what the unit call's answer costs, as its endpoint read it
        self.unit_overrun = 0.0  # what its reply reported past the bound, at its prices
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

    def attributed(self, attribution: Attribution) -> None:
        """Key, user and session of the log row, once the body is read."""
        self.attribution = attribution

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
        self.stream_error = f"stream broken after first byte: {failure}"
        return (504 if failure.kind == "timeout" else 502), self.stream_error

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

    # -- a unit call (gateway/serving/named_call.py) ---------------------------------
    def naming(self, b: Backend) -> Backend:
        """The backend the unit call names (its row's ``chosen_model``, answered or not)."""
        self.named = b.model_name
        return b

    async def reserve_input(self, tokens: int, bound: int | None = None) -> None:
        """Reserve the input's ``tokens`` against the tenant's and the key's tokens per minute
        (429 over either); ``bound``: the tokens its provider may report at most, beyond which
        the report is the operator's overrun and teaches the backend's factor (embeddings)."""
        self.usage_prompt_tokens = tokens
        if bound is not None and self.named is not None:
            self.bounds[self.named] = (bound, 0)
        self.tpm_grant = await self.ctx.reliability.reserve_tokens(self.tenant, tokens, tokens)

    def unit_attempt(self, status: int, started: float,
                     failure: UpstreamFailure | None) -> None:
        """The unit call's one attempt, told to the circuit breaker and logged; a failure the
        provider may bill (it had the request) owes what was held."""
        name = self.named or ""
        self.ctx.reliability.upstream_result(name, failure, self.tenant.principal)
        record: dict[str, Any] = {
            "model": name, "status": status, "error": None if failure is None else str(failure),
            "latency_ms": round((time.perf_counter() - started) * 1000, 3)}
        if failure is not None and failure.billable:
            usd = self.hold.owe(self.hold.held)
            self.timeout_charges.append((name, usd))
            record["charged_usd"] = usd
        self.attempts.append(record)
        self.trace.attempted(record)  # its span (gateway/serving/tracing.py)
        self.ctx.metrics.attempts.labels(name, str(status)).inc()

    def unit_answered(self, b: Backend, cost_usd: float, overrun_usd: float = 0.0,
                      tokens: tuple[int | None, int | None] | None = None,
                      reported: int | None = None) -> None:
        """The unit call's answer: what it costs, what its reply reported past the bound (the
        operator's), its (prompt, completion) tokens when it has a count, and the prompt
        count it reported (held against the bound when it settles: usage.py ``learned``)."""
        self.answered = b
        self.unit_cost, self.unit_overrun = cost_usd, overrun_usd
        if tokens is not None:
            self.usage_prompt_tokens, self.completion_tokens = tokens
        self.reported = (reported, None)

    @property
    def prompt_tokens(self) -> int | None:
        """The upstream's count once it reported usage, else the plan's."""
        if self.usage_prompt_tokens is not None:
            return self.usage_prompt_tokens
        return self.plan.prompt_tokens if self.plan else None

    @property
    def route_label(self) -> str:
        return (self.plan and self.plan.route) or self.unit or "passthrough"

    def take_usage(self, usage: dict) -> None:
        """The upstream's usage, clamped: a count that is negative or not a number is not
        believed (the prompt is then our count; the completion what was answered, counted
        at settling); a count past the attempt's bound is clamped to it, the rest kept apart
        as the operator's overrun (``excess_tokens``; gateway/serving/record/usage.py)."""
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
            prompt, excess[0] = clamped(prompt, bound[0])
            if completion is not None:
                completion, excess[1] = clamped(completion, bound[1])
        if excess != [0, 0]:
            log.warning("request %s: %s reported usage past the reserved bound (%s tokens "
                        "more than prompt %d / completion %d): clamped, the excess is the "
                        "operator's overrun", self.rid, self.answered.model_name if self.answered
                        else "?", excess, *(bound or (0, 0)))
        self.usage_prompt_tokens = prompt
        self.completion_tokens = completion
        self.excess_tokens = (excess[0], excess[1])

    def headers(self) -> dict[str, str]:
        return tollgate_headers(self)

    def answer_cost(self) -> float:
        """usage.prompt_tokens · p_in + usage.completion_tokens · p_out at the answering
        deployment's price, by litellm's cost functions where the price is litellm's
        (gateway/pricing.py; 0 if unanswered or answered from the cache); a unit call's, as
        its endpoint read it off the reply."""
        if self.unit is not None:
            return self.unit_cost if self.answered is not None else 0.0
        if (self.answered is None or self.prompt_tokens is None or self.plan is None
                or self.cache_hit):
            return 0.0
        price = self.plan.pool.answer_price(self.answered.model_name, self.deployment)
        return price.settle_cost(self.prompt_tokens, self.completion_tokens or 0)

    def overrun_cost(self) -> float:
        """What the upstream reported past the answer's bounds, at its prices."""
        if self.unit is not None:
            return self.unit_overrun if self.answered is not None else 0.0
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

    def _book_overrun(self, owed: float) -> None:
        """The operator's part of the provider's report (past the bounds, or past what was
        held), the one booking of an overrun: counted by backend, on the answering attempt's
        log entry (``attempt_log``)."""
        name = self.answered.model_name if self.answered else "none"
        self.overrun_usd = self.overrun_cost() + max(0.0, owed - (self.cost_usd or 0.0))
        if self.overrun_usd <= 0:
            return
        m = self.ctx.metrics
        m.overruns.inc()
        m.overrun_usd.inc(self.overrun_usd)
        m.overrun_by_backend.labels(name).inc(self.overrun_usd)

    def attempt_log(self) -> list[dict]:
        """The attempts as the row logs them: the records as made, the answering one with what
        was learnt of it later (its stream broke: ``error``; an overrun: ``overrun_usd``)."""
        name = self.answered.model_name if self.answered else None
        answering = [i for i, a in enumerate(self.attempts)
                     if a.get("model") == name and a["status"] == 200]
        notes: dict[int, dict[str, Any]] = {}
        if self.stream_error and self.attempts:
            notes.setdefault(len(self.attempts) - 1, {})["error"] = self.stream_error
        if self.overrun_usd > 0 and answering:
            notes.setdefault(answering[-1], {})["overrun_usd"] = self.overrun_usd
        return [{**a, **notes[i]} if i in notes else a for i, a in enumerate(self.attempts)]

    async def settle(self) -> None:
        """Settle the held money with the actual cost (once); never raises: a fault is kept
        for the log row (``settle_error``). The request's parallel slot is given back here:
        before the client has the answer, so its next request never meets this one."""
        slot, self.parallel_slot = self.parallel_slot, None
        await self.ctx.reliability.free_slot(slot)
        if self.hold.settled:
            return
        try:
            if self.answered is not None and self.completion_tokens is None and \
                    self.unit is None:
                b = self.answered  # no believable count: what was answered, counted
                self.completion_tokens = self.count_unreported(
                    await anyio.to_thread.run_sync(count_text_tokens, b, self.answer_text))
            owed = self.answer_cost() + self.hold.owed
            self.cost_usd = self.charged(owed)
            absurd = learned(self)
            if self.answered is not None and not self.cache_hit and self.unit is None:
                # the backend's trust (gateway/serving/budget/budget_gate.py)
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
        count_request(self, status)
        self.trace.finished(self, status, error)
        row = log_row(self, status, error)
        self.ctx.log_writer.submit(row)
        log_access(row, self.tenant)
        if self.cache_hit:  # a replay: nothing new to learn, no tokens spent upstream
            return
        self._hold_conversation(status)
        if self.ctx.learning is not None and self.unit is None:  # what a router learns from
            await self.ctx.learning.after_request(served(self, status))
        if self.answered is not None or self.tpm_grant is not None:  # tokens per minute
            await self.ctx.reliability.settle_tokens(self.tenant, self.tpm_grant,
                                                     tokens_used(self))

    def _hold_conversation(self, status: int) -> None:
        """The backend that answered a routed conversation holds its prompt cache now
        (gateway/serving/plan/session_affinity.py)."""
        affinity = self.ctx.affinity
        plan = self.plan
        if (affinity is not None and status == 200 and self.answered is not None
                and plan is not None and plan.route is not None):
            affinity.hold(plan.conversation, self.answered.model_name)
