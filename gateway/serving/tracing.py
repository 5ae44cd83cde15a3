"""Tollgate's own OpenTelemetry spans: one per request, a child for its routing decision and
one per attempt, when the OpenTelemetry SDK is installed; nothing otherwise.

Why spans of our own beside litellm's ``otel`` callback: litellm sees one upstream call at a
time; the route, the candidates, p̂ and the expected cost of the choice, the failed attempts
before a fallback and what the request was charged exist only here.

Where the spans go: to the process's global ``TracerProvider`` (OpenTelemetry's own registry),
which the operator sets up (``opentelemetry-instrument tollgate serve``, their code, or
litellm's ``otel`` callback, which installs one when none exists). With no provider, the API
hands out non-recording spans and nothing here does any work past ``is_recording()``; without
the SDK installed the ``opentelemetry`` package is never imported (``_otel``).

Parenting: a request span nests under the span that is current when the handler starts, the
HTTP server span of FastAPI's own telemetry (FastAPI ≥ 0.165 makes one whenever a provider
records, continuing the caller's ``traceparent``) or of an ASGI instrumentation; with none
(FastAPI's tracing turned off), it is the server span itself and continues the caller's
``traceparent`` (W3C trace context, through the global propagator). It is current while the
request is planned and attempted, so litellm's own spans nest under it too (a stream's, which
litellm logs once it is relayed, after the handler, nest under the HTTP server span).

Timing: the routing span covers planning (Φ(x), measuring, ranking); an attempt span is
placed from its attempt-log record (``latency_ms``, ended when the record was made;
gateway/serving/forwarding/attempts.py); the answering attempt of a stream and the request end when
the request finishes (``Outcome.finish``), after the last byte.

Attribute names follow OpenTelemetry's GenAI semantic conventions where one exists
(https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-spans/: span name
``{gen_ai.operation.name} {gen_ai.request.model}``, kind CLIENT for a call to a model;
``gen_ai.operation.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.response.model``, ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``,
``error.type``) and the HTTP ones for the request (https://opentelemetry.io/docs/specs/
semconv/http/http-spans/: ``http.request.method``, ``url.path``,
``http.response.status_code``); the rest are ``tollgate.*``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.serving.plan.planning import Plan
    from gateway.serving.record.outcome import Outcome

TRACER = "tollgate"
# gen_ai.operation.name by endpoint (GenAI conventions' values: chat, text_completion,
# embeddings; a Responses call generates a chat turn); an endpoint without a well-known value
# (images, speech ...) is named by its own label, a custom value as the conventions allow
# (https://opentelemetry.io/docs/specs/semconv/registry/attributes/gen-ai/)
OPERATIONS = {"/v1/chat/completions": "chat", "/v1/responses": "chat",
              "/v1/completions": "text_completion", "/v1/embeddings": "embeddings"}
# litellm's provider → gen_ai.provider.name's well-known value (GenAI conventions' registry,
# https://opentelemetry.io/docs/specs/semconv/registry/attributes/gen-ai/); others as litellm
# names them
PROVIDERS = {"azure": "azure.ai.openai", "azure_ai": "azure.ai.inference",
             "bedrock": "aws.bedrock", "vertex_ai": "gcp.vertex_ai", "gemini": "gcp.gemini",
             "mistral": "mistral_ai", "xai": "x_ai", "watsonx": "ibm.watsonx.ai"}


@functools.cache
def _otel() -> Any:
    """``opentelemetry.trace`` when the SDK is installed (looked up once, importing nothing
    of it when absent), else None."""
    try:
        if importlib.util.find_spec("opentelemetry.sdk") is None:
            return None
    except (ImportError, ValueError):
        return None
    from opentelemetry import trace
    return trace


def provider_name(litellm_model: str) -> str:
    """gen_ai.provider.name of a litellm model (``azure/gpt-4o`` → ``azure.ai.openai``)."""
    provider = litellm_model.split("/", 1)[0] if "/" in litellm_model else "openai"
    return PROVIDERS.get(provider, provider)


def error_type(status: int, error: str | None) -> str:
    """error.type of a failed attempt: the failure's kind (``UpstreamFailure.__str__`` is
    ``kind (status): message``), the budget or an open circuit for one never forwarded."""
    text = error or ""
    if text.startswith("budget"):
        return "budget"
    if text.startswith("circuit open"):
        return "circuit_open"
    return text.split(" (", 1)[0] if " (" in text else str(status)


class RequestTrace:
    """The spans of one request; every method is a no-op when nothing records."""

    def __init__(self, trace: Any = None, span: Any = None, operation: str = "chat") -> None:
        self.trace, self.span, self.operation = trace, span, operation
        self.recording = span is not None and span.is_recording()
        self.attempt_ends: list[tuple[int, dict]] = []  # (ended, ns; the attempt-log record)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        """The request span as the current span (its children, litellm's included)."""
        if not self.recording:
            yield
            return
        with self.trace.use_span(self.span, end_on_exit=False):
            yield

    def routed(self, plan: Plan, started_ns: int, encoder: str) -> None:
        """The routing decision's span (a routed request only), from ``started_ns`` to now."""
        routed = plan.routed
        if not self.recording or routed is None:
            return
        d = routed.decision
        chosen = next((c for c in d.candidates if c.model == d.chosen), None)
        attrs = {"tollgate.route": plan.route or "", "tollgate.routing.chosen": routed.backends[0],
                 "tollgate.routing.candidates": list(routed.backends),
                 "tollgate.routing.equivalent": [routed.by_router_model.get(m, m)
                                                 for m in d.equivalent],
                 "tollgate.routing.reason": d.reason or "",
                 "tollgate.routing.router_version": routed.router_version,
                 "tollgate.routing.encoder": d.encoder or encoder}  # a cascade's, or Φ's
        if plan.lam is not None:
            attrs["tollgate.routing.cost_weight"] = float(plan.lam)
        if chosen is not None:
            attrs["tollgate.routing.estimated_quality"] = float(chosen.quality)
            if chosen.cost_usd is not None:
                attrs["tollgate.routing.estimated_cost_usd"] = float(chosen.cost_usd)
        promise = plan.pool.promises.get(plan.route) if routed.promise else None
        if promise is not None:
            attrs["tollgate.routing.promise"] = promise.describe()
            attrs["tollgate.routing.reference"] = routed.promise["reference"]["backend"]
        span = self.trace.get_tracer(TRACER).start_span(
            f"route {plan.route}", context=self.trace.set_span_in_context(self.span),
            start_time=started_ns, attributes=attrs)
        span.end()

    def attempted(self, record: dict) -> None:
        """An attempt-log record was made (its attempt ended, or began streaming)."""
        if self.recording:
            self.attempt_ends.append((time.time_ns(), record))

    def finished(self, out: Outcome, status: int, error: str | None) -> None:
        """The attempt spans, then the request span's outcome; ends the request span."""
        if not self.recording:
            return
        now = time.time_ns()
        answered = out.answered.model_name if out.answered is not None else None
        logged = out.attempt_log()  # the records with what was learnt of them since
        for i, (ended, made) in enumerate(self.attempt_ends):
            record = logged[i] if i < len(logged) else made
            last_answer = (record["status"] == 200 and record["model"] == answered
                           and i == len(self.attempt_ends) - 1)
            end = now if last_answer and _streamed(out) else ended
            self._attempt_span(out, record, ended - int(record["latency_ms"] * 1e6), end,
                               last_answer)
        model = out.plan.request.model if out.plan is not None else out.named
        if model:  # the GenAI span name, now that the model is known
            self.span.update_name(f"{self.operation} {model}")
        self.end(status, error, _request_attributes(out))

    def _attempt_span(self, out: Outcome, record: dict, start: int, end: int,
                      answer: bool) -> None:
        pool = out.plan.pool if out.plan else out.ctx.pool.current  # a unit call: no plan
        backend = pool.backends.get(record["model"])
        deployment = out.deployment if answer and out.deployment is not None else 0
        model = (backend.deployment_params()[deployment]["model"] if backend is not None
                 else record["model"])
        attrs: dict[str, Any] = {
            "gen_ai.operation.name": self.operation,
            "gen_ai.provider.name": provider_name(str(model)),
            "gen_ai.request.model": str(model).split("/", 1)[-1],
            "tollgate.backend": record["model"], "tollgate.attempt.status": record["status"]}
        if answer:
            attrs.update({"gen_ai.response.model": record["model"],
                          "tollgate.deployment": deployment,
                          "gen_ai.usage.input_tokens": out.prompt_tokens or 0,
                          "gen_ai.usage.output_tokens": out.completion_tokens or 0,
                          "tollgate.cost_usd": out.answer_cost()})
        elif record.get("charged_usd"):
            attrs["tollgate.cost_usd"] = float(record["charged_usd"])
        if record["status"] != 200 or record.get("error"):
            attrs["error.type"] = error_type(record["status"], record.get("error"))
        span = self.trace.get_tracer(TRACER).start_span(
            f"{self.operation} {record['model']}",
            context=self.trace.set_span_in_context(self.span),
            kind=self.trace.SpanKind.CLIENT, start_time=start, attributes=attrs)
        if "error.type" in attrs:
            span.set_status(self.trace.Status(self.trace.StatusCode.ERROR,
                                              str(record.get("error") or "")[:500]))
        span.end(end_time=end)

    def end(self, status: int, error: str | None, attrs: dict[str, Any] | None = None) -> None:
        """End the request span with its HTTP status (an error status from 400 on)."""
        if not self.recording:
            return
        self.span.set_attributes({**(attrs or {}), "http.response.status_code": status})
        if status >= 400:
            self.span.set_attribute("error.type", str(status))
            self.span.set_status(self.trace.Status(self.trace.StatusCode.ERROR,
                                                   (error or "")[:500]))
        self.span.end()


NO_TRACE = RequestTrace()


def _streamed(out: Outcome) -> bool:
    return bool(out.plan and out.plan.request.stream)


def _request_attributes(out: Outcome) -> dict[str, Any]:
    """What the request span says once the request is over."""
    attrs: dict[str, Any] = {"tollgate.tenant_id": out.tenant.id,
                             "tollgate.cost_usd": float(out.cost_usd or 0.0),
                             "tollgate.reserved_usd": float(out.hold.held or 0.0),
                             "tollgate.attempts": len(out.attempts)}
    if out.unit is not None:
        attrs.update({"tollgate.route": out.unit, "gen_ai.request.model": out.named or ""})
    if out.plan is not None:
        attrs.update({"gen_ai.request.model": out.plan.request.model,
                      "tollgate.route": out.plan.route or "passthrough",
                      "tollgate.stream": bool(out.plan.request.stream)})
    if out.answered is not None:
        attrs.update({"gen_ai.response.model": out.answered.model_name,
                      "gen_ai.usage.input_tokens": out.prompt_tokens or 0,
                      "gen_ai.usage.output_tokens": out.completion_tokens or 0})
    return attrs


def start_request_trace(method: str, path: str, headers: Any, request_id: str,
                        operation: str | None = None) -> RequestTrace:
    """The request's span, started now: a child of the current (HTTP server) span if there
    is one, else the server span continuing the caller's ``traceparent``; NO_TRACE without
    the SDK. ``operation``: its gen_ai.operation.name when the path has no well-known one."""
    trace = _otel()
    if trace is None:
        return NO_TRACE
    from opentelemetry import propagate

    nested = trace.get_current_span().get_span_context().is_valid  # a server span exists
    operation = OPERATIONS.get(path) or operation or "chat"
    span = trace.get_tracer(TRACER).start_span(
        f"{operation} {path}", context=None if nested else propagate.extract(headers),
        kind=trace.SpanKind.INTERNAL if nested else trace.SpanKind.SERVER,
        attributes={"http.request.method": method, "url.path": path,
                    "gen_ai.operation.name": operation, "tollgate.request_id": request_id})
    return RequestTrace(trace, span, operation)
