"""The attempts of one planned request: reserve, forward with fallback, answer, settle, log.

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
  429 ``budget_exceeded`` when no candidate fits.
- A fallback to a dearer backend tops up the reservation; settlement charges the actual cost
  across the reservations and releases the rest.
- An attempt that timed out after its request was sent may be billed by the provider (it has
  the prompt): it costs the tenant the prompt's input cost on that backend, N̂·p_in with N̂
  the tokenizer's count (at most the bound N_prompt), whether or not another backend then
  answers; later attempts are held on top of it (gateway/serving/budget_hold.py), so the
  total stays within the hold. Logged as the attempt's ``charged_usd``, counted in
  ``tollgate_timeout_charges`` / ``tollgate_timeout_charged_usd``.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import GatewayError, budget_exceeded, error_body
from gateway.pricing import count_text_tokens
from gateway.reliability.guards import circuit_open_error
from gateway.serving.access_log import log_access
from gateway.serving.answer import DONE, SettlingStream, completion_body, sse, stream_chunk
from gateway.serving.budget_hold import BudgetHold
from gateway.serving.planning import PASSTHROUGH_VERSION, Plan
from gateway.serving.routing import embed_text
from gateway.serving.served import Served
from gateway.serving.upstream import (
    Billed,
    OpenStream,
    UpstreamFailure,
    classify,
    complete,
    open_stream,
)


class Exchange:
    """One request from its plan to its log row; created before anything can be refused, so
    every request, refused or answered, settles and logs exactly once (``finish``)."""

    def __init__(self, ctx: GatewayContext, tenant: Any, request_id: str, t0: float) -> None:
        self.ctx, self.tenant, self.rid, self.t0 = ctx, tenant, request_id, t0
        self.created_at = datetime.now(UTC)
        self.plan: Plan | None = None  # set by the handler as planning proceeds
        self.hold = BudgetHold(ctx, tenant, request_id)
        self.attempts: list[dict] = []
        self.circuit_open: GatewayError | None = None
        self.answered: Backend | None = None
        self.usage_prompt_tokens: int | None = None  # the upstream's count, once it gave one
        self.completion_tokens: int | None = None
        self.cost_usd: float | None = None
        self.ttft_ms: float | None = None
        self.answer_text = ""  # what the client received, for the learning loop
        self.timeout_charges: list[tuple[str, float]] = []  # (backend, USD) owed for timeouts
        self._charges_logged = 0
        self.finished = False

    @property
    def prompt_tokens(self) -> int | None:
        """The upstream's count once it reported usage, else the plan's."""
        if self.usage_prompt_tokens is not None:
            return self.usage_prompt_tokens
        return self.plan.prompt_tokens if self.plan else None

    # attempts ---------------------------------------------------------------------------
    async def respond(self) -> Response:
        """Forward to the candidates in order until one answers: its response to the client."""
        plan = self.plan
        assert plan is not None and plan.prompt_tokens is not None
        forward = open_stream if plan.request.stream else complete
        last: UpstreamFailure | None = None
        async for b, params in self._attempts(plan):
            started = time.perf_counter()
            try:
                reply = await forward(b, plan.request.messages, params,
                                      billed=self._billed(b, plan))
            except UpstreamFailure as f:
                last = f
                self._upstream_result(b, f, started)
                if not f.retryable:  # a 400 about the request: the next would refuse it too
                    break
                continue
            self._upstream_result(b, None, started)
            self.answered = b
            return self._stream(b, reply) if plan.request.stream else self._complete(b, reply)
        raise self._final_error(last)

    async def _attempts(self, plan: Plan) -> AsyncIterator[tuple[Backend, dict[str, Any]]]:
        """Candidates in rank order with their upstream params, skipping those whose circuit
        is open or that do not fit the budget; at most ``max_attempts`` are forwarded to."""
        settings, circuits = self.ctx.settings, self.ctx.reliability.circuits
        forwarded = 0
        for name in plan.candidates:
            if forwarded >= settings.max_attempts:
                break
            b = settings.backend(name)
            started = time.perf_counter()
            if not circuits.allow(name):
                self._record(b, 503, "circuit open: backend in cooldown", started)
                self.circuit_open = circuit_open_error(self.ctx.reliability,
                                                       list(plan.candidates))
                continue
            cap = await self.hold.fit(
                self.ctx.prices[name], plan.prompt_bound(b), plan.output_cap(b), plan.n,
                shrink=plan.request.max_tokens is None, min_tokens=settings.min_output_tokens)
            if cap is None:
                circuits.release(name)
                self._record(b, 429, "budget: does not fit the remaining budget", started)
                continue
            if forwarded == 0:
                self.ctx.metrics.overhead.labels(plan.route or "passthrough").observe(
                    time.perf_counter() - self.t0)
            forwarded += 1
            params = dict(plan.request.params)
            for field in plan.request.output_fields or ("max_tokens",):
                params[field] = cap
            yield b, params

    def _billed(self, b: Backend, plan: Plan) -> Billed:
        """The hook an attempt on ``b`` reports billable timeouts to: the request owes the
        prompt's input cost on ``b`` (module docstring); another deployment of ``b`` may be
        tried only if the hold covers it on top."""

        async def billed(failure: UpstreamFailure, another: bool) -> bool:
            tokens = min(plan.prompt_tokens or 0, plan.prompt_bound(b))
            usd = self.hold.owe(self.ctx.prices[b.model_name].cost(tokens, 0))
            self.timeout_charges.append((b.model_name, usd))
            return another and await self.hold.fits_again()

        return billed

    def _record(self, b: Backend, status: int, error: str | None, started: float) -> None:
        self.attempts.append({"model": b.model_name, "status": status, "error": error,
                              "latency_ms": round((time.perf_counter() - started) * 1000, 3)})
        self.ctx.metrics.attempts.labels(b.model_name, str(status)).inc()

    def _upstream_result(self, b: Backend, f: UpstreamFailure | None, started: float) -> None:
        """An attempt that reached the upstream: to the circuit breaker and the attempt log."""
        self.ctx.reliability.upstream_result(b.model_name, f)
        self._record(b, 200 if f is None else f.status, None if f is None else str(f), started)
        charged = sum(usd for _, usd in self.timeout_charges[self._charges_logged:])
        self._charges_logged = len(self.timeout_charges)
        if charged:
            self.attempts[-1]["charged_usd"] = charged

    def _final_error(self, last: UpstreamFailure | None) -> GatewayError:
        if last is None and self.circuit_open is not None:
            return self.circuit_open
        if last is None:  # nothing was tried: every candidate was over budget
            e = self.hold.refusal
            detail = (f" (budget ${e.budget_usd:.6f}, spent ${e.spent_usd:.6f}, reserved "
                      f"${e.reserved_usd:.6f})" if e is not None else "")
            if e is not None and e.overrun_usd:
                detail += (f"; a provider charged ${e.overrun_usd:.6f} more than was reserved, "
                           "so this tenant is refused until an operator reviews its budget")
            return budget_exceeded(
                f"This request's predicted cost does not fit the remaining budget{detail}.")
        if not last.retryable:
            return GatewayError(last.status, f"upstream refused the request: {last.message}",
                                "invalid_request_error", code="upstream_bad_request")
        status = {504: 504, 429: 503}.get(last.status, 502)
        tried = ", ".join(
            a["model"] for a in self.attempts if not (a["error"] or "").startswith("budget"))
        return GatewayError(
            status,
            f"every upstream attempt failed ({tried}); last: {last.kind}: {last.message}",
            "upstream_error",
            code={504: "upstream_timeout", 503: "upstream_unavailable"}.get(status, "bad_gateway"),
        )

    # the answer -------------------------------------------------------------------------
    def _take_usage(self, usage: dict) -> None:
        self.usage_prompt_tokens = int(usage.get("prompt_tokens") or self.prompt_tokens or 0)
        self.completion_tokens = int(usage.get("completion_tokens") or 0)

    def _complete(self, b: Backend, resp: Any) -> Response:
        body, usage, self.answer_text = completion_body(resp, b.model_name)
        self._take_usage(usage)
        self.cost_usd = self._actual_cost()
        headers = {**self.headers(), "x-tollgate-cost-usd": f"{self.cost_usd:.10f}"}
        # settle and log after the response is sent: off the client's latency
        return JSONResponse(body, headers=headers,
                            background=BackgroundTask(self.finish, 200, None))

    def _stream(self, b: Backend, opened: OpenStream) -> Response:
        self.ttft_ms = round((time.perf_counter() - self.t0) * 1000, 3)
        async def abandoned() -> None:  # the client left before the first byte was relayed
            await opened.close()
            await self.finish(499, "client disconnected before the stream")

        return SettlingStream(
            self._relay(b, opened),
            abandoned,
            media_type="text/event-stream",
            headers={**self.headers(), "cache-control": "no-cache"},
        )

    async def _relay(self, b: Backend, opened: OpenStream) -> AsyncIterator[bytes]:
        """SSE to the client; settles and logs whatever way the stream ends."""
        include_usage = self.plan.request.include_usage
        status, error = 200, None
        try:
            async for chunk in opened.chunks():
                data, usage, text = stream_chunk(chunk, b.model_name, include_usage)
                if usage:
                    self._take_usage(usage)
                self.answer_text += text
                if data is not None:
                    yield sse(data)
            yield DONE
        except Exception as e:  # noqa: BLE001 - mid-stream failure: the client already has bytes
            f = classify(e)
            self.ctx.reliability.upstream_result(b.model_name, f)
            status = 504 if f.kind == "timeout" else 502  # the upstream broke, not the client
            error = f"stream broken after first byte: {f}"
            self.attempts[-1]["error"] = error
            yield sse(error_body(error, "upstream_error", code="stream_interrupted"))
        except BaseException:  # client went away (cancellation): settle what was streamed
            status, error = 499, "client disconnected"
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await opened.close()  # an abandoned stream stops upstream, too
                if self.completion_tokens is None:  # no usage chunk: count what was streamed
                    self.completion_tokens = await anyio.to_thread.run_sync(
                        count_text_tokens, b, self.answer_text)
                await self.finish(status, error)

    def headers(self) -> dict[str, str]:
        version = self.plan.router_version if self.plan else PASSTHROUGH_VERSION
        h = {"x-tollgate-request-id": self.rid, "x-tollgate-router-version": version}
        if self.answered is not None:
            h["x-tollgate-model"] = self.answered.model_name
        return h

    # settling and logging ---------------------------------------------------------------
    def _answer_cost(self) -> float:
        """usage.prompt_tokens · p_in + usage.completion_tokens · p_out (0 if unanswered)."""
        if self.answered is None or self.prompt_tokens is None:
            return 0.0
        price = self.ctx.prices[self.answered.model_name]
        return price.cost(self.prompt_tokens, self.completion_tokens or 0)

    def _actual_cost(self) -> float:
        """c = the answer's cost + what timed-out attempts owe (module docstring)."""
        return self._answer_cost() + self.hold.owed

    async def finish(self, status: int, error: str | None) -> None:
        """Settle the held money with the actual cost, count, and queue the log row (once)."""
        if self.finished:
            return
        self.finished = True
        self.cost_usd = self._actual_cost()
        try:
            await self.hold.settle(self.cost_usd)
        except Exception as e:  # noqa: BLE001 - a settlement fault must not lose the log row
            error = f"{error + '; ' if error else ''}settlement failed: {type(e).__name__}: {e}"
        self._count(status)
        row = self.row(status, error)
        self.ctx.log_writer.submit(row)
        log_access(row, self.tenant)
        if self.ctx.learning is not None:
            await self.ctx.learning.after_request(self.served(status))
        if self.answered is not None:  # tokens per minute
            await self.ctx.reliability.used_tokens(
                self.tenant, (self.prompt_tokens or 0) + (self.completion_tokens or 0))

    def _count(self, status: int) -> None:
        m, route = self.ctx.metrics, (self.plan and self.plan.route) or "passthrough"
        model = self.answered.model_name if self.answered else "none"
        stream = str(bool(self.plan and self.plan.request.stream)).lower()
        m.requests.labels(route, model, str(status), stream).inc()
        m.latency.labels(route, stream).observe(time.perf_counter() - self.t0)
        for backend, usd in self.timeout_charges:
            m.timeout_charges.labels(backend).inc()
            m.timeout_charged_usd.labels(backend).inc(usd)
            m.cost.labels(backend).inc(usd)
        if self.answered is not None:
            m.cost.labels(model).inc(self._answer_cost())
            m.tokens.labels(model, "prompt").inc(self.prompt_tokens or 0)
            m.tokens.labels(model, "completion").inc(self.completion_tokens or 0)

    def served(self, status: int) -> Served:
        """The record the learning loop gets of this request."""
        plan, b = self.plan, self.answered
        routed = plan.routed if plan else None
        return Served(
            request_id=self.rid,
            tenant_id=getattr(self.tenant, "id", None),
            status=status,
            route=plan.route if plan else None,
            messages=plan.request.messages if plan else [],
            phi=plan.phi if plan else None,
            pool=tuple(routed.by_router_model.values()) if routed else (),
            backend=b.model_name if b else None,
            router_model=b.router_model if b else None,
            cost_usd=self._answer_cost(),  # the answer's own cost (no timeout charges)
            answer_text=self.answer_text,
        )

    def row(self, status: int, error: str | None) -> dict[str, Any]:
        """The request-log row (keys fixed in docs/architecture.md)."""
        plan = self.plan
        routed = plan.routed if plan else None
        d = routed.decision if routed else None
        by_rm = routed.by_router_model if routed else {}
        priors = routed.priors if routed else frozenset()  # cold start: marked "prior"
        candidates = ([{**c, "backend": by_rm.get(c["model"]),
                        **({"known": "prior"} if c["model"] in priors else {})}
                       for c in d.to_dict()["candidates"]] if d else [])
        prompt_text = None
        if self.ctx.settings.log_prompts and plan is not None:
            prompt_text = embed_text(plan.request.messages, self.ctx.settings.encoder_max_chars)
        chosen = self.answered.model_name if self.answered else None
        if chosen is None and plan is not None and plan.candidates:
            chosen = plan.candidates[0]
        return {
            "id": self.rid,
            "tenant_id": getattr(self.tenant, "id", None),
            "created_at": self.created_at,
            "route": plan.route if plan else None,
            "lam": plan.lam if plan else None,
            "router_version": plan.router_version if routed else None,
            "candidates": candidates,
            "equivalent": [by_rm.get(m, m) for m in d.equivalent] if d else [],
            "reason": d.reason if d else ("passthrough" if plan else None),
            "chosen_model": chosen,
            "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "reserved_usd": self.hold.held,
            "latency_ms": round((time.perf_counter() - self.t0) * 1000, 3),
            "ttft_ms": self.ttft_ms,
            "stream": bool(plan.request.stream) if plan else False,
            "status": status,
            "error": error,
            "prompt_text": prompt_text,
        }
