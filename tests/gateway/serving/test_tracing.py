"""Tollgate's OpenTelemetry spans (gateway/serving/tracing.py) through a real gateway: the
OpenAI SDK calls it over HTTP, it forwards over HTTP to the fake upstream, and the spans land
in the OpenTelemetry SDK's own in-memory exporter on the process's global TracerProvider.

A routed ``auto`` request whose chosen backend fails once gives a request span (continuing the
caller's ``traceparent``) with a routing child and one attempt span per attempt; a streamed
request's answering attempt ends with the stream. Without the SDK, nothing is imported.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import openai
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.config import settings_from_dict
from gateway.serving import tracing
from router_core.runtime.router import Router
from tests.fakes.upstream import FakeUpstream
from tests.gateway.conftest import Gateway, gateway_config, run_gateway

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
PROMPT = "Prove that the square root of two is irrational."
EMBED = "embed-cheap"  # an embedding backend (the fake answers /v1/embeddings for any)


@pytest.fixture(scope="module")
def exporter() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on the global SDK provider (set here unless a test already did:
    OpenTelemetry allows setting it once per process)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    exp = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exp))
    yield exp
    exp.shutdown()


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream, test_router: Router,
       encoder, exporter: InMemorySpanExporter) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("tracing")
    cfg = gateway_config(upstream, tmp / "spool", database_url=f"sqlite:///{tmp / 'tg.db'}")
    cfg["model_list"].append(upstream.model_entry("fake-cheap", model_name=EMBED,
                                                  mode="embedding"))
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


def request_spans(exporter: InMemorySpanExporter, request_id: str) -> list[ReadableSpan]:
    """The request's spans once its request span has ended (it ends after the response)."""
    deadline = time.monotonic() + 30
    while True:
        spans = exporter.get_finished_spans()
        root = [s for s in spans if s.attributes.get("tollgate.request_id") == request_id]
        if root:
            return [s for s in spans if s.context.trace_id == root[0].context.trace_id]
        assert time.monotonic() < deadline, f"no request span for {request_id}"
        time.sleep(0.02)


def ancestors(spans: list[ReadableSpan], span: ReadableSpan) -> list[str]:
    """The span ids above ``span``, nearest first (the last may be the caller's, remote)."""
    ids = {s.context.span_id: s for s in spans}
    out, parent = [], span.parent
    while parent is not None:
        out.append(f"{parent.span_id:016x}")
        parent = ids[parent.span_id].parent if parent.span_id in ids else None
    return out


def by_parent(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.parent and s.parent.span_id == parent.context.span_id
                   and s.context.trace_id == parent.context.trace_id),
                  key=lambda s: s.start_time)


def test_a_routed_request_with_a_fallback_gives_request_routing_and_attempt_spans(
    gw: Gateway, upstream: FakeUpstream, exporter: InMemorySpanExporter
) -> None:
    key, tenant_id = gw.tenant()
    client = gw.client(key)
    chosen = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": PROMPT}]).headers["x-tollgate-model"]
    upstream.set_mode(chosen, "error_500", times=1)  # the same prompt routes the same way
    raw = client.chat.completions.with_raw_response.create(
        model="auto", messages=[{"role": "user", "content": PROMPT}],
        extra_headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"})
    rid, answered = raw.headers["x-tollgate-request-id"], raw.headers["x-tollgate-model"]
    assert answered != chosen
    spans = request_spans(exporter, rid)

    [req] = [s for s in spans if s.attributes.get("tollgate.request_id") == rid]
    assert f"{req.context.trace_id:032x}" == TRACE_ID  # the caller's trace continues
    # under FastAPI's own server span, which continues the caller's traceparent
    assert PARENT_ID in ancestors(spans, req)
    assert req.name == "chat auto" and req.kind is SpanKind.INTERNAL
    a = req.attributes
    assert a["gen_ai.operation.name"] == "chat" and a["gen_ai.request.model"] == "auto"
    assert a["gen_ai.response.model"] == answered and a["http.response.status_code"] == 200
    assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0
    assert a["tollgate.cost_usd"] == pytest.approx(float(raw.headers["x-tollgate-cost-usd"]))
    assert a["tollgate.tenant_id"] == tenant_id and a["tollgate.attempts"] == 2

    route, first, second = by_parent(spans, req)
    assert route.name == "route auto"
    r = route.attributes
    assert r["tollgate.route"] == "auto" and r["tollgate.routing.chosen"] == chosen
    assert set(r["tollgate.routing.candidates"]) == {"fake-strong", "fake-mid", "fake-cheap"}
    assert r["tollgate.routing.candidates"][0] == chosen
    assert 0 <= r["tollgate.routing.estimated_quality"] <= 1
    assert r["tollgate.routing.estimated_cost_usd"] > 0
    assert r["tollgate.routing.encoder"] == gw.app.state.ctx.encoder.kind
    assert r["tollgate.routing.cost_weight"] == 0.5

    assert first.name == f"chat {chosen}" and first.kind is SpanKind.CLIENT
    assert first.attributes["tollgate.attempt.status"] == 500
    assert first.attributes["error.type"] == "server_error"
    assert first.status.status_code is StatusCode.ERROR
    assert second.name == f"chat {answered}" and second.start_time >= first.end_time
    s = second.attributes
    assert s["tollgate.attempt.status"] == 200 and "error.type" not in s
    assert s["gen_ai.provider.name"] == "openai" and s["gen_ai.request.model"] == answered
    assert s["tollgate.deployment"] == 0
    assert s["gen_ai.usage.input_tokens"] == a["gen_ai.usage.input_tokens"]
    assert s["tollgate.cost_usd"] == pytest.approx(a["tollgate.cost_usd"])
    assert route.end_time <= first.start_time and second.end_time <= req.end_time


def test_a_streamed_passthrough_attempt_ends_with_its_stream(
    gw: Gateway, exporter: InMemorySpanExporter
) -> None:
    key, _ = gw.tenant()
    with gw.client(key).chat.completions.with_streaming_response.create(
            model="fake-cheap", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_usage": True}) as r:
        rid = r.headers["x-tollgate-request-id"]
        usage = next(c.usage for c in r.parse() if c.usage)
    spans = request_spans(exporter, rid)
    [req] = [s for s in spans if s.attributes.get("tollgate.request_id") == rid]
    assert f"{req.context.trace_id:032x}" != TRACE_ID  # no traceparent: a trace of its own
    [attempt] = by_parent(spans, req)  # a passthrough has nothing to route
    assert attempt.attributes["gen_ai.usage.output_tokens"] == usage.completion_tokens
    assert req.attributes["tollgate.stream"] is True
    # its log record was made at the first chunk; its span lasts until the stream is over
    first_chunk_ns = gw.log_row(rid)["attempts"][0]["latency_ms"] * 1e6
    assert attempt.end_time - attempt.start_time > first_chunk_ns
    assert attempt.end_time <= req.end_time


def test_an_embeddings_request_has_its_request_and_attempt_spans(
    gw: Gateway, exporter: InMemorySpanExporter
) -> None:
    """Embeddings run in the frame every endpoint runs in: a request span named by the
    GenAI operation ``embeddings`` and the backend, with its one attempt as a client span."""
    key, tenant_id = gw.tenant()
    raw = gw.client(key).embeddings.with_raw_response.create(model=EMBED, input="hi there")
    rid, usage = raw.headers["x-tollgate-request-id"], raw.parse().usage
    spans = request_spans(exporter, rid)
    [req] = [s for s in spans if s.attributes.get("tollgate.request_id") == rid]
    assert req.name == f"embeddings {EMBED}"
    a = req.attributes
    assert a["gen_ai.operation.name"] == "embeddings" and a["tollgate.route"] == "embeddings"
    assert a["http.response.status_code"] == 200 and a["tollgate.tenant_id"] == tenant_id
    assert a["gen_ai.response.model"] == EMBED
    assert a["gen_ai.usage.input_tokens"] == usage.prompt_tokens
    assert a["tollgate.cost_usd"] == pytest.approx(float(raw.headers["x-tollgate-cost-usd"]))
    [attempt] = by_parent(spans, req)
    assert attempt.name == f"embeddings {EMBED}" and attempt.kind is SpanKind.CLIENT
    assert attempt.attributes["tollgate.attempt.status"] == 200
    # the deployment's own model and provider, as for chat's attempts
    assert attempt.attributes["gen_ai.request.model"] == "fake-cheap"
    assert attempt.attributes["gen_ai.provider.name"] == "openai"


def test_an_embeddings_request_refused_before_its_tenant_is_known_has_its_span(
    gw: Gateway, exporter: InMemorySpanExporter
) -> None:
    with pytest.raises(openai.AuthenticationError) as e:
        gw.client("sk-not-a-key").embeddings.create(model=EMBED, input="hi")
    rid = e.value.response.headers["x-tollgate-request-id"]
    [req] = [s for s in request_spans(exporter, rid)
             if s.attributes.get("tollgate.request_id") == rid]
    assert req.attributes["gen_ai.operation.name"] == "embeddings"
    assert req.attributes["http.response.status_code"] == 401
    assert req.status.status_code is StatusCode.ERROR


def test_without_the_sdk_nothing_is_imported_and_nothing_fails() -> None:
    """The SDK made unfindable (as when it is not installed): no tracer, no OpenTelemetry
    module imported, every hook a no-op."""
    code = (
        "import sys; sys.modules['opentelemetry.sdk'] = None\n"
        "from gateway.serving import tracing\n"
        "t = tracing.start_request_trace('POST', '/v1/chat/completions', {}, 'tg-1')\n"
        "assert t is tracing.NO_TRACE and not t.recording\n"
        "with t.current():\n"
        "    t.attempted({'model': 'm', 'status': 200})\n"
        "t.end(200, None)\n"
        "assert 'opentelemetry.trace' not in sys.modules, 'imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr



def test_with_no_server_span_the_request_span_continues_the_callers_traceparent(
    exporter: InMemorySpanExporter,
) -> None:
    """FastAPI's tracing off (no span current): the request span is the server span, a
    child of the caller's ``traceparent``."""
    headers = {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"}
    t = tracing.start_request_trace("POST", "/v1/completions", headers, "tg-direct")
    assert t.recording and t.operation == "text_completion"
    t.end(404, "model 'nope' not found")
    [span] = [s for s in exporter.get_finished_spans()
              if s.attributes.get("tollgate.request_id") == "tg-direct"]
    assert span.kind is SpanKind.SERVER and span.parent.is_remote
    assert f"{span.context.trace_id:032x}" == TRACE_ID
    assert f"{span.parent.span_id:016x}" == PARENT_ID
    assert span.attributes["http.response.status_code"] == 404
    assert span.attributes["error.type"] == "404" and span.status.status_code is StatusCode.ERROR


@pytest.fixture(scope="module")
def otel_gw(tmp_path_factory: pytest.TempPathFactory, upstream: FakeUpstream,
            test_router: Router, encoder, exporter: InMemorySpanExporter) -> Iterator[Gateway]:
    """A gateway whose config turns on litellm's own ``otel`` callback (LiteLLM Proxy's
    ``litellm_settings.callbacks: ["otel"]``)."""
    tmp = tmp_path_factory.mktemp("tracing-otel")
    cfg = gateway_config(upstream, tmp / "spool", database_url=f"sqlite:///{tmp / 'tg.db'}",
                         litellm_settings={"callbacks": ["otel"]})
    yield from run_gateway(settings_from_dict(cfg), test_router, encoder)


@pytest.mark.parametrize("stream", [False, True])
def test_litellms_otel_spans_nest_under_the_request_span(
    otel_gw: Gateway, exporter: InMemorySpanExporter, stream: bool
) -> None:
    """litellm's ``otel`` callback uses the process's provider (here the test's) and the span
    current when it logs: its span of the upstream call is in the request's trace, under
    Tollgate's request span (a stream's, logged once relayed, under the HTTP server span)."""
    key, _ = otel_gw.tenant()
    with otel_gw.client(key).chat.completions.with_streaming_response.create(
            model="fake-cheap", messages=[{"role": "user", "content": "hi"}],
            stream=stream) as raw:
        rid = raw.headers["x-tollgate-request-id"]
        raw.read()
    deadline = time.monotonic() + 30
    while True:
        spans = request_spans(exporter, rid)
        [req] = [s for s in spans if s.attributes.get("tollgate.request_id") == rid]
        theirs = [s for s in spans if s.instrumentation_scope.name != "tollgate"
                  and "litellm" in s.instrumentation_scope.name.lower()]
        if theirs or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert theirs, sorted({s.instrumentation_scope.name for s in spans})
    if stream:  # litellm logs a stream as it ends, after the handler: under the HTTP span
        root = ancestors(spans, req)[-1]
        assert all(ancestors(spans, s)[-1] == root for s in theirs)
    else:
        assert all(f"{req.context.span_id:016x}" in ancestors(spans, s) for s in theirs)
