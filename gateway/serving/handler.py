"""POST /v1/chat/completions: authenticate, route, reserve, forward with fallback, settle, log.

One ``Exchange`` object carries one request through these steps and builds its log row.

Budget rule (the hard budget is never exceeded by design, not by luck):
- The reservation for a backend h is ĉ_h = n_prompt·p_in + n·m·p_out, with m the client's
  max_tokens (or max_completion_tokens) or, when the client gives none, h's
  ``max_output_tokens``; the upstream always receives that m as its output cap, so the settled
  cost cannot pass the reservation (up to the prompt-token estimate).
- No client max_tokens and ĉ_h does not fit the remaining budget: m is lowered to what the
  remaining budget pays (``Price.affordable_output_tokens``) unless that is below
  ``min_output_tokens``, in which case h does not fit.
- A routed request tries its ranked candidates in order and skips one that does not fit
  (recorded as an attempt with status 429); passthrough has one candidate. 429
  ``budget_exceeded`` when no candidate fits.
- A fallback to a dearer backend tops up the reservation; settlement charges the actual cost
  across the reservations and releases the rest.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.background import BackgroundTask

from gateway.auth import authenticate
from gateway.config import Backend
from gateway.context import GatewayContext, call
from gateway.errors import (
    GatewayError,
    budget_exceeded,
    error_body,
    invalid,
    model_not_found,
    store_unavailable,
)
from gateway.pricing import count_prompt_tokens, count_text_tokens
from gateway.reliability.guards import circuit_open_error
from gateway.serving.chat_request import ChatRequest, parse_chat_request
from gateway.serving.routing import Routed, embed, embed_text, route_request, router_model_map
from gateway.serving.upstream import OpenStream, UpstreamFailure, classify, complete, open_stream
from gateway.serving.validation import check_text, fit_candidates
from router_core.decision import NoEligibleModel

PASSTHROUGH_VERSION = "passthrough"


def new_request_id() -> str:
    return "tg-" + uuid.uuid4().hex


def _store_errors() -> tuple[type[BaseException], type[BaseException]]:
    from gateway.store.errors import BudgetExceeded, StoreUnavailable

    return BudgetExceeded, StoreUnavailable


class BudgetHold:
    """Money held for one request: one reservation, topped up when a fallback costs more."""

    def __init__(self, ctx: GatewayContext, tenant: Any, request_id: str) -> None:
        self._ctx, self._tenant, self._rid = ctx, tenant, request_id
        self.reservations: list[Any] = []
        self.held = 0.0
        self.refusal: Any = None  # the last BudgetExceeded
        self.settled = False

    async def ensure(self, usd: float) -> bool:
        """Hold at least ``usd`` in total; False (and ``refusal`` set) when it does not fit."""
        if usd <= self.held:
            return True
        exceeded, unavailable = _store_errors()
        try:
            r = await call(self._ctx.store.reserve, self._tenant, usd - self.held, self._rid)
        except exceeded as e:
            self.refusal = e
            return False
        except unavailable as e:
            raise store_unavailable() from e
        self.reservations.append(r)
        self.held += usd - self.held
        return True

    def room_usd(self) -> float:
        """What this request could hold in total, from the last refusal's ledger numbers."""
        e = self.refusal
        if e is None:
            return self.held
        return self.held + max(0.0, e.budget_usd - e.spent_usd - e.reserved_usd)

    async def settle(self, actual_usd: float) -> None:
        """Charge ``actual_usd`` across the reservations (in order), release the rest."""
        if self.settled:
            return
        self.settled = True
        left = max(0.0, actual_usd)
        for i, r in enumerate(self.reservations):
            amount = float(getattr(r, "amount_usd", 0.0))
            last = i == len(self.reservations) - 1
            part = left if last else min(left, amount)
            left -= part
            await call(self._ctx.store.settle, r, part)


class Exchange:
    """One chat completion request from authentication to its log row."""

    def __init__(self, ctx: GatewayContext, tenant: Any, request_id: str, t0: float) -> None:
        self.ctx, self.tenant, self.rid, self.t0 = ctx, tenant, request_id, t0
        self.created_at = datetime.now(UTC)
        self.req: ChatRequest | None = None
        self.route: str | None = None
        self.lam: float | None = None
        self.routed: Routed | None = None
        self.router_version = PASSTHROUGH_VERSION
        self.candidates: list[str] = []
        self.hold = BudgetHold(ctx, tenant, request_id)
        self.attempts: list[dict] = []
        self.answered: Backend | None = None
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.cost_usd: float | None = None
        self.ttft_ms: float | None = None
        self.first_attempt_at: float | None = None
        self.circuit_open: GatewayError | None = None
        self.text: str = ""
        self.finished = False
        self.phi: Any = None  # Φ(x) of a routed request

    # planning ---------------------------------------------------------------------------
    def _policy(self) -> dict:
        return dict(getattr(self.tenant, "policy", None) or {})

    def _allowed_backends(self, pool: list[str]) -> list[str]:
        """The route's pool ∩ the tenant policy's allowed_models ∩ the request's."""
        req = self.req
        assert req is not None
        names = {b.model_name for b in self.ctx.settings.model_list}
        out = list(pool)
        policy_allowed = self._policy().get("allowed_models")
        if policy_allowed is not None:
            out = [n for n in out if n in set(policy_allowed)]
        if req.options.allowed_models is not None:
            unknown = sorted(set(req.options.allowed_models) - names)
            if unknown:
                raise invalid(
                    f"unknown model(s) in tollgate.allowed_models: {unknown}",
                    param="tollgate.allowed_models",
                )
            out = [n for n in out if n in set(req.options.allowed_models)]
        if not out:
            raise invalid(
                "no backend is allowed for this request (route, tenant policy and "
                "tollgate.allowed_models leave none)",
                param="tollgate.allowed_models",
            )
        return out

    def _cost_weight(self, route_lam: float) -> float:
        lam = self.req.options.cost_weight if self.req.options.cost_weight is not None else None
        policy = self._policy()
        if lam is None:
            lam = float(policy.get("cost_weight", route_lam))
        lo = float(policy.get("min_cost_weight", 0.0))
        hi = float(policy.get("max_cost_weight", float("inf")))
        return min(max(lam, lo), hi)

    def _max_cost(self) -> float | None:
        caps = [self.req.options.max_cost_usd, self._policy().get("max_cost_usd")]
        caps = [float(c) for c in caps if c is not None]
        return min(caps) if caps else None

    def _expected_cost(self, name: str) -> float:
        """USD this request is expected to cost on backend ``name``: what λ trades against
        and max_cost_usd caps. n_prompt·p_in + n·min(m, routing_output_tokens)·p_out, with m
        the output cap; the budget reserves the worst case (m), routing compares the typical
        case, so one backend's larger max_output_tokens does not make it look dearer."""
        b = self.ctx.settings.backend(name)
        out = min(self._max_out(b), self.ctx.settings.routing_output_tokens) * self._n()
        return self.ctx.prices[name].cost(self.prompt_tokens, out)

    def _max_out(self, b: Backend) -> int:
        return self.req.max_tokens or b.model_info.max_output_tokens

    def _n(self) -> int:
        return int(self.req.params.get("n") or 1)

    async def plan(self, body: Any) -> None:
        """Validate, resolve the model name, route: sets candidates (ranked backends)."""
        s = self.ctx.settings
        self.req = req = parse_chat_request(body)
        if req.model in s.routes:
            self.route = req.model
            route = s.routes[req.model]
            pool = self._allowed_backends([b.model_name for b in s.route_backends(req.model)])
            await self._route(pool, route.cost_weight, route.delta)
            self.candidates = fit_candidates(s, self.candidates, self.prompt_tokens, req.max_tokens)
            return
        backend = s.backend(req.model)
        policy_allowed = self._policy().get("allowed_models")
        if backend is None or (policy_allowed is not None and req.model not in policy_allowed):
            raise model_not_found(req.model)
        self.route = None
        self.candidates = [backend.model_name]
        self.prompt_tokens = await anyio.to_thread.run_sync(
            lambda: count_prompt_tokens(backend, req.messages, req.params.get("tools"))
        )
        fit_candidates(s, self.candidates, self.prompt_tokens, req.max_tokens)  # 400 if not
        cap = self._max_cost()
        if cap is not None and self._expected_cost(backend.model_name) > cap:
            raise invalid(
                f"the predicted cost of {backend.model_name} exceeds max_cost_usd={cap}",
                param="tollgate.max_cost_usd",
            )

    async def _route(self, pool: list[str], route_lam: float, delta: float | None) -> None:
        ctx, req = self.ctx, self.req
        router = ctx.router.current  # one reference for the whole request
        self.router_version = router.version
        self.lam = self._cost_weight(route_lam)
        by_rm = router_model_map(ctx.settings, router, pool)
        if not by_rm:
            raise GatewayError(
                503,
                f"route {self.route!r} has no backend the router knows",
                "service_unavailable",
                code="no_deployable_backend",
            )
        first = ctx.settings.backend(next(iter(by_rm.values())))
        text = embed_text(req.messages, ctx.settings.encoder_max_chars)
        started = time.perf_counter()
        phi = await embed(ctx.encoder, text)
        self.phi = phi  # kept for the learning loop (gateway/learning/loop.py)
        self.prompt_tokens = count_prompt_tokens(first, req.messages, req.params.get("tools"))
        costs = {name: self._expected_cost(name) for name in by_rm.values()}
        cap = self._max_cost()
        try:
            self.routed = route_request(
                router,
                phi,
                lam=self.lam,
                delta=delta,
                backends_by_router_model=by_rm,
                costs_usd_by_backend=costs,
                max_cost_usd=cap,
            )
        except NoEligibleModel as e:
            raise invalid(
                f"no backend fits max_cost_usd={cap} for this request",
                param="tollgate.max_cost_usd",
            ) from e
        ctx.metrics.routing.observe(time.perf_counter() - started)
        self.candidates = list(self.routed.backends)

    # budget -------------------------------------------------------------------------------
    async def _fit(self, b: Backend) -> int | None:
        """Reserve for backend b; the output cap to send upstream, or None if it does not fit."""
        price = self.ctx.prices[b.model_name]
        n, want = self._n(), self._max_out(b)
        if await self.hold.ensure(price.cost(self.prompt_tokens, want * n)):
            return want
        if self.req.max_tokens is not None:
            return None
        room = self.hold.room_usd()
        cap = min(want, price.affordable_output_tokens(room, self.prompt_tokens) // n)
        if cap < self.ctx.settings.min_output_tokens:
            return None
        if await self.hold.ensure(price.cost(self.prompt_tokens, cap * n)):
            return cap
        return None

    def _params(self, cap: int) -> dict[str, Any]:
        params = dict(self.req.params)
        params[self.req.max_tokens_field or "max_tokens"] = cap
        return params

    def _record(self, b: Backend, status: int, error: str | None, started: float) -> None:
        self.attempts.append(
            {
                "model": b.model_name,
                "status": status,
                "error": error,
                "latency_ms": round((time.perf_counter() - started) * 1000, 3),
            }
        )
        outcome = str(status) if error is None or status != 502 else "502"
        self.ctx.metrics.attempts.labels(b.model_name, outcome).inc()

    async def _attempts(self) -> AsyncIterator[tuple[Backend, dict[str, Any]]]:
        """Candidates in rank order with their upstream params, skipping unaffordable ones;
        at most ``max_attempts`` of them are forwarded to."""
        forwarded = 0
        for name in self.candidates:
            if forwarded >= self.ctx.settings.max_attempts:
                break
            b = self.ctx.settings.backend(name)
            started = time.perf_counter()
            if not self.ctx.reliability.circuits.allow(name):  # issue 4: backend cooling down
                self._record(b, 503, "circuit open: backend in cooldown", started)
                self.circuit_open = circuit_open_error(self.ctx.reliability, self.candidates)
                continue
            cap = await self._fit(b)
            if cap is None:
                self.ctx.reliability.circuits.release(name)
                self._record(b, 429, "budget: does not fit the remaining budget", started)
                continue
            if self.first_attempt_at is None:
                self.first_attempt_at = time.perf_counter()
                self.ctx.metrics.overhead.labels(self.route or "passthrough").observe(
                    self.first_attempt_at - self.t0
                )
            forwarded += 1
            yield b, self._params(cap)

    def _final_error(self, last: UpstreamFailure | None) -> GatewayError:
        if last is None and self.circuit_open is not None:
            return self.circuit_open
        if last is None:  # nothing was tried: every candidate was over budget
            e = self.hold.refusal
            detail = (
                f" (budget ${e.budget_usd:.6f}, spent ${e.spent_usd:.6f}, reserved "
                f"${e.reserved_usd:.6f})"
                if e is not None
                else ""
            )
            return budget_exceeded(
                f"This request's predicted cost does not fit the remaining budget{detail}."
            )
        if not last.retryable:
            return GatewayError(last.status, f"upstream refused the request: {last.message}",
                                "invalid_request_error", code="upstream_bad_request")
        status = {504: 504, 429: 503}.get(last.status, 502)
        tried = ", ".join(
            a["model"] for a in self.attempts if not (a["error"] or "").startswith("budget")
        )
        return GatewayError(
            status,
            f"every upstream attempt failed ({tried}); last: {last.kind}: {last.message}",
            "upstream_error",
            code={504: "upstream_timeout", 503: "upstream_unavailable"}.get(status, "bad_gateway"),
        )

    # settling and logging -----------------------------------------------------------------
    def _actual_cost(self) -> float:
        """c = usage.prompt_tokens · p_in + usage.completion_tokens · p_out (0 if unanswered)."""
        if self.answered is None or self.prompt_tokens is None:
            return 0.0
        price = self.ctx.prices[self.answered.model_name]
        return price.cost(self.prompt_tokens, self.completion_tokens or 0)

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
        m = self.ctx.metrics
        model = self.answered.model_name if self.answered else "none"
        stream = str(bool(self.req and self.req.stream)).lower()
        m.requests.labels(self.route or "passthrough", model, str(status), stream).inc()
        m.latency.labels(self.route or "passthrough", stream).observe(time.perf_counter() - self.t0)
        if self.answered is not None:
            m.cost.labels(model).inc(self.cost_usd)
            m.tokens.labels(model, "prompt").inc(self.prompt_tokens or 0)
            m.tokens.labels(model, "completion").inc(self.completion_tokens or 0)
        self.ctx.log_writer.submit(self.row(status, error))
        if self.ctx.learning is not None:
            await self.ctx.learning.after_request(self, status)
        if self.answered is not None:  # issue 4: tokens per minute
            await self.ctx.reliability.used_tokens(
                self.tenant, (self.prompt_tokens or 0) + (self.completion_tokens or 0))

    def row(self, status: int, error: str | None) -> dict[str, Any]:
        """The request-log row (keys fixed in docs/architecture.md)."""
        d = self.routed.decision if self.routed else None
        by_rm = self.routed.by_router_model if self.routed else {}
        candidates = (
            [{**c, "backend": by_rm.get(c["model"])} for c in d.to_dict()["candidates"]]
            if d
            else []
        )
        prompt_text = None
        if self.ctx.settings.log_prompts and self.req is not None:
            prompt_text = embed_text(self.req.messages, self.ctx.settings.encoder_max_chars)
        return {
            "id": self.rid,
            "tenant_id": getattr(self.tenant, "id", None),
            "created_at": self.created_at,
            "route": self.route,
            "lam": self.lam,
            "router_version": self.router_version if self.routed else None,
            "candidates": candidates,
            "equivalent": [by_rm.get(m, m) for m in d.equivalent] if d else [],
            "reason": d.reason if d else ("passthrough" if self.req else None),
            "chosen_model": (
                self.answered.model_name
                if self.answered
                else (self.candidates[0] if self.candidates else None)
            ),
            "attempts": self.attempts,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "reserved_usd": self.hold.held,
            "latency_ms": round((time.perf_counter() - self.t0) * 1000, 3),
            "ttft_ms": self.ttft_ms,
            "stream": bool(self.req.stream) if self.req else False,
            "status": status,
            "error": error,
            "prompt_text": prompt_text,
        }

    def headers(self) -> dict[str, str]:
        h = {"x-tollgate-request-id": self.rid, "x-tollgate-router-version": self.router_version}
        if self.answered is not None:
            h["x-tollgate-model"] = self.answered.model_name
        return h

    # forwarding ---------------------------------------------------------------------------
    def _attempt_failed(self, b: Backend, f: UpstreamFailure, started: float) -> bool:
        """Record a failed attempt with the breaker and the log; True if the next may follow."""
        self.ctx.reliability.upstream_result(b.model_name, f)
        self._record(b, f.status, str(f), started)
        return f.retryable

    def _attempt_succeeded(self, b: Backend, started: float) -> None:
        self.ctx.reliability.upstream_result(b.model_name, None)
        self._record(b, 200, None, started)
        self.answered = b

    async def complete(self) -> Response:
        last: UpstreamFailure | None = None
        async for b, params in self._attempts():
            started = time.perf_counter()
            try:
                resp = await complete(b, self.req.messages, params)
            except UpstreamFailure as f:
                last = f
                if not self._attempt_failed(b, f, started):
                    break
                continue
            self._attempt_succeeded(b, started)
            body = resp.model_dump(exclude_none=True)
            body["model"] = b.model_name
            self.answer_text = _first_content(body)  # what a shadow judge grades
            for ch in body.get("choices", []):
                (ch.get("message") or {}).pop("provider_specific_fields", None)
            usage = body.get("usage") or {}
            self.prompt_tokens = int(usage.get("prompt_tokens") or self.prompt_tokens or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
            self.cost_usd = self._actual_cost()
            headers = self.headers()
            headers["x-tollgate-cost-usd"] = f"{self.cost_usd:.10f}"
            # settle and log after the response is sent: off the client's latency
            return JSONResponse(body, headers=headers, background=BackgroundTask(
                self.finish, 200, None))
        raise self._final_error(last)

    async def stream(self) -> Response:
        last: UpstreamFailure | None = None
        async for b, params in self._attempts():
            started = time.perf_counter()
            try:
                opened = await open_stream(b, self.req.messages, params)
            except UpstreamFailure as f:
                last = f
                if not self._attempt_failed(b, f, started):
                    break
                continue
            self._attempt_succeeded(b, started)
            self.ttft_ms = round((time.perf_counter() - self.t0) * 1000, 3)
            return _SettlingStream(
                self,
                self._relay(b, opened),
                media_type="text/event-stream",
                headers={**self.headers(), "cache-control": "no-cache"},
            )
        raise self._final_error(last)

    def _chunk_json(self, b: Backend, chunk: Any) -> str | None:
        obj = chunk.model_dump(exclude_none=True)
        obj["model"] = b.model_name
        usage = obj.pop("usage", None)
        if usage:
            self.prompt_tokens = int(usage.get("prompt_tokens") or self.prompt_tokens or 0)
            self.completion_tokens = int(usage.get("completion_tokens") or 0)
        for ch in obj.get("choices", []):
            delta = ch.get("delta") or {}
            delta.pop("provider_specific_fields", None)
            if isinstance(delta.get("content"), str):
                self.text += delta["content"]
            for tc in delta.get("tool_calls") or []:
                self.text += json.dumps(tc.get("function") or {})
        if usage and self.req.include_usage:
            obj["usage"] = usage
        elif not obj.get("choices"):
            return None  # the usage-only chunk the client did not ask for
        return json.dumps(obj)

    async def _relay(self, b: Backend, opened: OpenStream) -> AsyncIterator[bytes]:
        """SSE to the client; settles and logs whatever way the stream ends."""
        status, error = 200, None
        try:
            async for chunk in opened.chunks():
                data = self._chunk_json(b, chunk)
                if data is not None:
                    yield f"data: {data}\n\n".encode()
            yield b"data: [DONE]\n\n"
        except Exception as e:  # noqa: BLE001 - mid-stream failure: the client already has bytes
            f = classify(e)
            self.ctx.reliability.upstream_result(b.model_name, f)
            status = 504 if f.kind == "timeout" else 502  # the upstream broke, not the client
            error = f"stream broken after first byte: {f}"
            self.attempts[-1]["error"] = error
            body = error_body(error, "upstream_error", code="stream_interrupted")
            yield f"data: {json.dumps(body)}\n\n".encode()
        except BaseException:  # client went away (cancellation): settle what was streamed
            status, error = 499, "client disconnected"
            raise
        finally:
            if self.completion_tokens is None:
                self.completion_tokens = count_text_tokens(b, self.text)
            with anyio.CancelScope(shield=True):
                await self.finish(status, error)


def _first_content(body: dict) -> str:
    choices = body.get("choices") or [{}]
    return str((choices[0].get("message") or {}).get("content") or "")


class _SettlingStream(StreamingResponse):
    """A StreamingResponse that finishes its exchange even when the client leaves before the
    body generator ever started (then the generator's own ``finally`` never runs)."""

    def __init__(self, exchange: Exchange, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._exchange = exchange

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            if not self._exchange.finished:
                with anyio.CancelScope(shield=True):
                    await self._exchange.finish(499, "client disconnected before the stream")


async def chat_completions(request: Request) -> Response:
    """The OpenAI chat completions endpoint."""
    ctx: GatewayContext = request.app.state.ctx
    t0 = time.perf_counter()
    rid = new_request_id()
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:
        ctx.metrics.requests.labels("unknown", "none", str(e.status), "unknown").inc()
        return e.response({"x-tollgate-request-id": rid})
    ex = Exchange(ctx, tenant, rid, t0)
    try:
        await ctx.reliability.admit(tenant)  # issue 4: 429 + Retry-After over the rate limit
        try:
            body = json.loads(await request.body())
        except (ValueError, UnicodeDecodeError) as e:
            raise invalid(f"the request body is not valid JSON: {e}") from e
        check_text(body)
        await ex.plan(body)
        return await (ex.stream() if ex.req.stream else ex.complete())
    except GatewayError as e:
        await ex.finish(e.status, e.message)
        return e.response(ex.headers())
    except BaseException as e:  # cancelled (client gone, shutdown past its grace) or a bug:
        with anyio.CancelScope(shield=True):  # still release the money and log the request
            cancelled = isinstance(e, anyio.get_cancelled_exc_class())
            await ex.finish(499 if cancelled else 500,
                            "cancelled" if cancelled else f"internal error: {type(e).__name__}")
        raise
