"""The attempts of one planned request: reserve, forward with fallback, answer.

Built from a complete ``Plan``; what happens is recorded into the request's ``Outcome``
(gateway/serving/outcome.py), which settles and logs it.

Budget rule (the hard budget is never exceeded by design, not by luck):
- The reservation for a backend h is ĉ_h = N_prompt·p_in + n·m·p_out, with N_prompt the
  prompt-token bound of gateway/pricing.py (not the tokenizer's estimate) and m the client's
  output cap (the smaller of max_tokens and max_completion_tokens) or, when the client gives
  none, h's ``max_output_tokens``; the upstream receives m in every output-cap field the
  client sent, so the settled cost cannot pass the reservation. A provider reporting more
  anyway is an overrun (gateway/store/ledger.py, ``tollgate_budget_overruns``).
- No client max_tokens and ĉ_h does not fit the remaining budget: m is lowered to what the
  remaining budget pays unless that is below ``min_output_tokens``; then h does not fit.
- The candidates are tried in order, one loop for streamed and non-streamed requests; one that
  does not fit is skipped (an attempt with status 429), one whose circuit is open too (503).
  When no candidate fits: a retryable 429 ``budget_busy`` (``Retry-After``) if the settled
  spend still pays for the smallest request this one could be (it waited ``budget_wait_s``
  for the tenant's in-flight reservations, gateway/serving/budget_gate.py), else 429
  ``budget_exceeded`` (``x-should-retry: false``).
- A fallback to a dearer backend tops up the reservation; settlement charges the actual cost
  across the reservations and releases the rest.
- An attempt that timed out after its request was sent is billed by the provider: not
  streamed, the provider generates and bills the answer, so it costs the tenant the attempt's
  whole reservation ĉ_h; streamed, closing the stream stops generation, so it costs the
  prompt's input cost N̂·p_in (N̂ the tokenizer's count, at most N_prompt); whether or not
  another backend then answers. Later attempts are held on top of it
  (gateway/serving/budget_hold.py), so the total stays within the hold. Logged as the attempt's ``charged_usd``, counted in
  ``tollgate_timeout_charges`` / ``tollgate_timeout_charged_usd``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import anyio
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from gateway.config import Backend
from gateway.errors import (
    CLIENT_GONE,
    GatewayError,
    budget_busy,
    budget_exceeded,
    error_body,
)
from gateway.pricing import count_text_tokens
from gateway.reliability.guards import circuit_open_error
from gateway.serving.answer import DONE, SettlingStream, completion_body, sse, stream_chunk
from gateway.serving.bound_factors import held_out_error, widened, widened_price
from gateway.serving.cached_answer import RequestCache, assembled, replayed
from gateway.serving.outcome import Outcome
from gateway.serving.planning import Plan
from gateway.serving.upstream import (
    Billed,
    OpenStream,
    UpstreamFailure,
    classify,
    complete,
    open_stream,
)


class Attempts:
    """Forwards a complete plan's candidates in rank order until one answers."""

    CACHED = True  # chat answers go through the response cache (Responses, completions: not)

    def __init__(self, outcome: Outcome, plan: Plan) -> None:
        self.out, self.plan, self.ctx = outcome, plan, outcome.ctx
        self.circuit_open: GatewayError | None = None
        self._charges_logged = 0
        # backends sent a lower output cap than the request's own (the budget or TPM lowered
        # it): their answer depends on more than the request, so it is not cached
        self._lowered: set[str] = set()

    async def respond(self) -> Response:
        """Forward to the candidates in order until one answers: its response to the client.
        With the response cache on, the first candidate's stored answer (routing chose it) is
        replayed instead, costing the tenant nothing (gateway/serving/cached_answer.py)."""
        hit = await self._cached()
        if hit is not None:
            return hit
        await self._reserve_tokens()
        plan = self.plan
        last: UpstreamFailure | None = None
        async for b, params in self._attempts(plan):
            started = time.perf_counter()
            try:
                reply = await self._forward(b, params, self._billed(b, plan))
            except UpstreamFailure as f:
                last = f
                self._upstream_result(b, f, started)
                if not f.retryable:  # a 400 about the request: the next would refuse it too
                    break
                continue
            self._upstream_result(b, None, started)
            self.out.answered = b
            return await self._reply(b, reply)
        raise self._final_error(last)

    async def _cached(self) -> Response | None:
        """The cached answer of the backend routing ranked first, replayed; None on a miss."""
        req = self.plan.request
        if not (self.CACHED and self.plan.candidates):
            return None
        cache = await RequestCache.for_request(self.ctx, self.out.tenant.id, req.messages,
                                               req.params, req.cache)
        self.out.cache = cache
        if cache is None:
            return None
        b = self.plan.pool.backends[self.plan.candidates[0]]
        entry = await cache.lookup(b.model_name)
        if entry is None:
            return None
        body = {**entry["body"], "model": b.model_name}
        self.out.replayed(b, body)
        await self.out.settle()  # nothing held: frees the parallel slot, charges nothing
        headers = {**self.out.headers(), "x-tollgate-cost-usd": f"{0.0:.10f}"}
        return replayed(body, req.stream, req.include_usage, headers, self.out.finish)

    async def _reserve_tokens(self) -> None:
        """Reserve the request's token bound against the tenant's TPM (429 when it does not
        fit): R = max_h N_prompt(h) + n·max_h m_h; without a client max_tokens as little as
        N_prompt + n·min_output_tokens, the output cap lowered to what was granted
        (gateway/reliability/ratelimit.py)."""
        plan = self.plan
        backends = [plan.pool.backends[name] for name in plan.candidates]
        prompt = max(plan.prompt_bound(b) for b in backends)
        out = plan.n * max(plan.output_cap(b) for b in backends)
        least = prompt + (out if plan.request.max_tokens is not None
                          else min(out, plan.n * self.ctx.settings.min_output_tokens))
        grant = await self.ctx.reliability.reserve_tokens(self.out.tenant, least, prompt + out)
        self.out.tpm_grant = grant
        if grant is not None and grant.tokens < prompt + out:
            self.plan = replace(plan, tpm_tokens=grant.tokens)

    async def _forward(self, b: Backend, params: dict[str, Any], billed: Billed) -> Any:
        """One attempt on ``b``: its reply (an OpenStream when streamed), or UpstreamFailure.
        Endpoints that forward another body override it (gateway/serving/responses_handler.py)."""
        forward = open_stream if self.plan.request.stream else complete
        return await forward(b, self.plan.request.messages, params, billed=billed,
                             answered=self._answered)

    async def _reply(self, b: Backend, reply: Any) -> Response:
        """The client's response from ``b``'s reply."""
        if self.plan.request.stream:
            return self._stream(b, reply)
        return await self._complete(b, reply)

    async def _attempts(self, plan: Plan) -> AsyncIterator[tuple[Backend, dict[str, Any]]]:
        """Candidates in rank order with their upstream params, skipping those whose circuit
        is open or that do not fit the budget; at most ``max_attempts`` are forwarded to."""
        settings, circuits = self.ctx.settings, self.ctx.reliability.circuits
        pool = plan.pool
        forwarded = 0
        for name in plan.candidates:
            if forwarded >= settings.max_attempts:
                break
            b = pool.backends[name]
            started = time.perf_counter()
            factors = getattr(self.ctx, "bound_factors", None)  # gateway/serving/bound_factors.py
            if factors is not None and factors.held_out(name, self.out.tenant.principal):
                self._record(b, 503, "held out: reported usage past 10x its bound", started)
                self.circuit_open = self.circuit_open or held_out_error(name)
                continue
            f = factors.factor(name) if factors is not None else 1.0
            if not circuits.allow(name):
                self._record(b, 503, "circuit open: backend in cooldown", started)
                self.circuit_open = circuit_open_error(self.ctx.reliability,
                                                       list(plan.candidates))
                continue
            cap = await self.out.hold.fit(  # at the price widened by its factor f_h (B1)
                widened_price(pool.prices[name], f), plan.prompt_bound(b), plan.output_cap(b), plan.n,
                shrink=plan.request.max_tokens is None, min_tokens=settings.min_output_tokens,
                worst_tokens=None if self.ctx.budget_gate.trusted(name)
                else b.model_info.max_output_tokens)
            if cap is None:
                circuits.release(name)
                self._record(b, 429, "budget: does not fit the remaining budget", started)
                continue
            if factors is not None and factors.held_out(name, self.out.tenant.principal):  # while it waited for the hold
                circuits.release(name)
                self._record(b, 503, "held out: reported usage past 10x its bound", started)
                self.circuit_open = self.circuit_open or held_out_error(name)
                continue
            if forwarded == 0:
                self.ctx.metrics.overhead.labels(plan.route or "passthrough").observe(
                    time.perf_counter() - self.out.t0)
            forwarded += 1
            self.out.bounds[name] = (widened(plan.prompt_bound(b), f), widened(cap * plan.n, f))
            if cap < (plan.request.max_tokens or b.model_info.max_output_tokens):
                self._lowered.add(name)
            params = dict(plan.request.params)
            for field in plan.request.output_fields or ("max_tokens",):
                params[field] = cap
            yield b, params

    def _answered(self, deployment: int) -> None:
        """The deployment of a group that answered: its price is what is settled."""
        self.out.deployment = deployment

    def _billed(self, b: Backend, plan: Plan) -> Billed:
        """The hook an attempt on ``b`` reports billable timeouts to: the request owes the
        attempt's whole reservation (non-streamed) or the prompt's input cost on ``b``
        (streamed) (module docstring); another deployment of ``b`` may be tried only if the
        hold covers it on top."""

        async def billed(failure: UpstreamFailure, another: bool) -> bool:
            if plan.request.stream:
                tokens = min(plan.prompt_tokens or 0, plan.prompt_bound(b))
                usd = self.out.hold.owe(plan.pool.prices[b.model_name].cost(tokens, 0))
            else:
                usd = self.out.hold.owe(self.out.hold.attempt_usd)
            self.out.timeout_charges.append((b.model_name, usd))
            return another and await self.out.hold.fits_again()

        return billed

    def _record(self, b: Backend, status: int, error: str | None, started: float) -> None:
        self.out.attempts.append({"model": b.model_name, "status": status, "error": error,
                              "latency_ms": round((time.perf_counter() - started) * 1000, 3)})
        self.out.trace.attempted(self.out.attempts[-1])  # its span (gateway/serving/tracing.py)
        self.ctx.metrics.attempts.labels(b.model_name, str(status)).inc()

    def _upstream_result(self, b: Backend, f: UpstreamFailure | None, started: float) -> None:
        """An attempt that reached the upstream: to the circuit breaker and the attempt log."""
        self.ctx.reliability.upstream_result(b.model_name, f, self.out.tenant.principal)
        self._record(b, 200 if f is None else f.status, None if f is None else str(f), started)
        charged = sum(usd for _, usd in self.out.timeout_charges[self._charges_logged:])
        self._charges_logged = len(self.out.timeout_charges)
        if charged:
            self.out.attempts[-1]["charged_usd"] = charged

    def _final_error(self, last: UpstreamFailure | None) -> GatewayError:
        if last is None and self.circuit_open is not None:
            return self.circuit_open
        if last is None:  # nothing was tried: every candidate was over budget
            e = self.out.hold.refusal
            whose = f"key {e.key_id}'s " if getattr(e, "key_id", None) else ""  # key_ledger
            detail = (f" ({whose}budget ${e.budget_usd:.6f}, spent ${e.spent_usd:.6f}, reserved "
                      f"${e.reserved_usd:.6f})" if e is not None else "")
            if e is not None and e.overrun_usd:
                detail += (f"; a provider charged ${e.overrun_usd:.6f} more than was reserved, "
                           "so this tenant is refused until an operator reviews its budget")
            hold = self.out.hold
            if e is not None and hold.retryable:  # fits the settled spend: later, it may
                wait = self.ctx.settings.budget_wait_s
                return budget_busy(
                    "This request's predicted cost does not fit the budget while the tenant's "
                    f"other requests hold their reservations{detail}; waited "
                    f"{hold.waited_s:.1f}s of budget_wait_s={wait:g}s. Retry shortly.",
                    retry_after_s=1)
            return budget_exceeded(
                f"This request's predicted cost does not fit the remaining budget{detail}."
                + _affordable(hold.affordable_tokens, self.plan.request.max_tokens))
        if not last.retryable:
            return GatewayError(last.status, f"upstream refused the request: {last.message}",
                                "invalid_request_error", code="upstream_bad_request")
        status = {504: 504, 429: 503}.get(last.status, 502)
        tried = ", ".join(
            a["model"] for a in self.out.attempts if not (a["error"] or "").startswith("budget"))
        return GatewayError(
            status,
            f"every upstream attempt failed ({tried}); last: {last.kind}: {last.message}",
            "upstream_error",
            code={504: "upstream_timeout", 503: "upstream_unavailable"}.get(status, "bad_gateway"),
        )

    # the answer -------------------------------------------------------------------------
    async def _complete(self, b: Backend, resp: Any) -> Response:
        body, usage, self.out.answer_text = completion_body(resp, b.model_name)
        self.out.take_usage(usage)
        # settle before the body is sent (a client's next request must not meet this one's
        # hold: one settle round trip on the latency); log after it is sent
        await self.out.settle()
        if self.out.cache is not None and b.model_name not in self._lowered:  # stored before
            await self.out.cache.store(b.model_name, body)  # it is sent: the next one finds it
        headers = {**self.out.headers(), "x-tollgate-cost-usd": f"{self.out.cost_usd:.10f}"}
        return JSONResponse(body, headers=headers,
                            background=BackgroundTask(self.out.finish, 200, None))

    def _stream(self, b: Backend, opened: OpenStream) -> Response:
        self.out.ttft_ms = round((time.perf_counter() - self.out.t0) * 1000, 3)
        async def abandoned() -> None:  # the client left before the first byte was relayed
            await opened.close()
            await self.out.finish(499, "client disconnected before the stream")

        return SettlingStream(
            self._relay(b, opened),
            abandoned,
            media_type="text/event-stream",
            headers={**self.out.headers(), "cache-control": "no-cache"},
        )

    async def _relay(self, b: Backend, opened: OpenStream) -> AsyncIterator[bytes]:
        """SSE to the client; settles and logs whatever way the stream ends."""
        include_usage = self.plan.request.include_usage
        status, error = 200, None
        try:
            async for chunk in opened.chunks():
                data, usage, text = stream_chunk(chunk, b.model_name, include_usage)
                if usage:
                    self.out.take_usage(usage)
                self.out.answer_text += text
                if data is not None:
                    if self.out.cache is not None:
                        self.out.cache.chunks.append(chunk.model_dump(exclude_none=True))
                    yield sse(data)
            with anyio.CancelScope(shield=True):  # settled and stored before the client
                await self._count_streamed(b)  # has [DONE]
                await self.out.settle()
                await self._store_stream(b)
            yield DONE
        except Exception as e:  # noqa: BLE001 - mid-stream failure: the client already has bytes
            f = classify(e)
            self.ctx.reliability.upstream_result(b.model_name, f, self.out.tenant.principal)
            status = 504 if f.kind == "timeout" else 502  # the upstream broke, not the client
            error = f"stream broken after first byte: {f}"
            self.out.attempts[-1]["error"] = error
            yield sse(error_body(error, "upstream_error", code="stream_interrupted"))
        except BaseException:  # client went away (cancellation): settle what was streamed
            status, error = 499, CLIENT_GONE
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await opened.close()  # an abandoned stream stops upstream, too
                await self._count_streamed(b)
                await self.out.finish(status, error)

    async def _store_stream(self, b: Backend) -> None:
        """A whole stream, assembled into the completion it adds up to, into the cache."""
        cache = None if b.model_name in self._lowered else self.out.cache
        usage = {"prompt_tokens": self.out.prompt_tokens or 0,
                 "completion_tokens": self.out.completion_tokens or 0}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        body = assembled(cache.chunks, usage) if cache is not None else None
        if cache is not None and body is not None:
            await cache.store(b.model_name, {**body, "model": b.model_name})

    async def _count_streamed(self, b: Backend) -> None:
        """No usage chunk: count what was streamed, within the attempt's output bound."""
        if self.out.completion_tokens is None:
            self.out.completion_tokens = self.out.count_unreported(
                await anyio.to_thread.run_sync(count_text_tokens, b, self.out.answer_text))


def _affordable(tokens: int | None, asked: int | None) -> str:
    """What the budget's room pays, for a client that set its output cap (with none set, the
    cap is lowered already down to ``min_output_tokens``)."""
    if asked is None or tokens is None:
        return ""
    if tokens < 1:
        return " The remaining budget does not pay for this prompt on any backend."
    return (f" You asked for up to {asked} output tokens; the remaining budget pays for up to "
            f"{tokens} (a smaller output cap fits).")
