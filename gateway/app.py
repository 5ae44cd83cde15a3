"""The FastAPI app factory: ``create_app(settings, ...)`` builds one gateway.

All state (settings, store, log writer, router, encoder, metrics) lives in one
``GatewayContext`` on ``app.state.ctx``; nothing is module-global, so tests and replicas can
run several gateways in one process. The lifespan starts the store and the log writer, warms
the encoder (so the first request does not pay for loading MiniLM) and stops them in order.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from gateway import __version__
from gateway.admin import api as admin_api
from gateway.admin import litellm_keys, litellm_management
from gateway.auth import (
    FailedLogins,
    bearer_key,
    checked_secret,
    client_address,
    may_read_metrics,
)
from gateway.config import ConfigError, Settings
from gateway.context import GatewayContext
from gateway.errors import GatewayError, as_gateway_error, unauthorized
from gateway.learning import feedback
from gateway.learning.loop import build_learning
from gateway.pool import PoolHolder, build_pool
from gateway.pool.explore_share import PriorShare
from gateway.pool.known import table_text
from gateway.pricing import resolve_prices
from gateway.provider import litellm_callbacks
from gateway.provider.litellm_inline import install_inline_setup
from gateway.provider.litellm_transport import LitellmTransport
from gateway.provider.transport import Transport
from gateway.reliability.guards import Reliability, guard_store
from gateway.reliability.heap_freeze import freeze_startup_heap
from gateway.reliability.loop_watch import LoopWatch
from gateway.review import explain
from gateway.review import metrics as observability
from gateway.review.dashboard import routes as dashboard_routes
from gateway.review.metrics import GatewayMetrics
from gateway.seams import LogSink, Store
from gateway.serving import more_routes
from gateway.serving.body_limit import BodyLimit
from gateway.serving.budget.bound_factors import BoundFactors
from gateway.serving.budget.budget_gate import BudgetGate
from gateway.serving.chat.handler import chat_completions
from gateway.serving.completions.completions_handler import completions
from gateway.serving.embeddings.embeddings_handler import embeddings
from gateway.serving.forwarding.response_cache import build_response_cache, close_response_cache
from gateway.serving.models_endpoint import list_models, retrieve_model
from gateway.serving.plan.embedding import EmbeddingBatcher
from gateway.serving.plan.routing import warm_cascade
from gateway.serving.plan.session_affinity import SessionAffinity
from gateway.serving.request.validation import CHAT_COMPLETIONS_OPENAPI
from gateway.serving.response_headers import ResponseHeaders
from gateway.serving.responses.responses_handler import responses_endpoint
from router_core.artifact import load_router
from router_core.encoders import encoder_for_router
from router_core.encoders.minilm import Encoder
from router_core.runtime.router import Router

log = logging.getLogger(__name__)


def build_store(settings: Settings) -> tuple[Store, LogSink]:
    """The database side for ``settings.database_url``: (Store, LogWriter). Its identity is a
    slot in the spool directory (gateway/store/replica_slot.py), named after ``replica_id``
    when one is configured."""
    from gateway.store import open_store

    return open_store(settings.database_url, log_prompts=settings.log_prompts,
                      reservation_ttl_s=settings.budget_reservation_ttl_s,
                      replica_id=settings.replica_id or os.environ.get("TOLLGATE_REPLICA_ID"),
                      replica_dir=settings.reliability.resolved().spool_dir,
                      leases=settings.budget.leases)


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    log_writer: LogSink | None = None,
    router: Router | None = None,
    encoder: Encoder | None = None,
    registry: CollectorRegistry | None = None,
    freeze_heap: bool = False,
    transport: Transport | None = None,
) -> FastAPI:
    """Build a gateway. Parts not given are built from ``settings`` (the store from
    ``database_url``, the router from ``router_path`` or the packaged artifact). With
    ``freeze_heap`` (a serving process's own gateway) the startup heap is frozen once started
    (gateway/reliability/heap_freeze.py). ``transport``: what every provider call goes
    through (default ``LitellmTransport``; a test's ``MockTransport``)."""
    ctx = build_context(settings, store=store, log_writer=log_writer, router=router,
                        encoder=encoder, registry=registry, transport=transport)
    app = FastAPI(title="Tollgate", version=__version__,
                  lifespan=_lifespan(ctx, freeze_heap))
    app.state.ctx = ctx
    _install_error_handlers(app)
    app.add_middleware(BodyLimit, max_bytes=ctx.reliability.settings.max_body_bytes,
                       timeout_s=ctx.reliability.settings.body_timeout_s)
    app.add_middleware(ResponseHeaders)  # x-request-id, x-ratelimit-*
    for routes in (
        build_router(),  # /v1/chat/completions, /v1/models[/{id}], /health, /ready, /metrics
        more_routes.build_router(),  # /v1/messages, images, audio, moderations, rerank
        admin_api.build_router(),  # /admin: tenants, keys, budgets
        litellm_keys.build_router(),  # LiteLLM's /key/* on the admin key
        litellm_management.build_router(),  # LiteLLM's /team, /user, /spend/logs, /model/info
        feedback.build_router(),  # POST /v1/feedback
        explain.build_router(),  # GET /v1/routing/{request_id}
        dashboard_routes.build_router(),  # /dashboard
    ):
        app.include_router(routes)
    return app


def build_context(settings: Settings, *, store: Store | None, log_writer: LogSink | None,
                  router: Router | None, encoder: Encoder | None,
                  registry: CollectorRegistry | None,
                  transport: Transport | None = None) -> GatewayContext:
    """The gateway's state: every part given or built from ``settings``, wired together."""
    loaded = router is None
    router = router if router is not None else load_router(settings.router_path)
    check_encoder(settings, router)  # before the store: a config error opens nothing
    if store is None or log_writer is None:
        built_store, built_writer = build_store(settings)
        store = store if store is not None else built_store
        log_writer = log_writer if log_writer is not None else built_writer
    store = guard_store(store, settings.reliability)  # the outage policy and the log spool
    if encoder is None:
        encoder = encoder_for_router(router.config, threads=settings.encoder_threads)
    prices = resolve_prices(settings, strict=False)  # unpriced: warned about, never used
    callbacks = litellm_callbacks.resolve(settings)  # an import that fails: a config error
    pool = PoolHolder(build_pool(settings, prices, router,
                                 reference_phi(settings, encoder) if loaded else None))
    metrics = GatewayMetrics(registry)
    reliability = Reliability.build(settings.reliability, metrics.registry)
    ctx = GatewayContext(
        settings=settings,
        store=store,
        log_writer=log_writer,
        pool=pool,
        encoder=encoder,
        metrics=metrics,
        embedder=EmbeddingBatcher(encoder.encode, max_batch=settings.encoder_batch_size,
                                  max_wait_s=settings.encoder_batch_wait_ms / 1000),
        prior_share=PriorShare(),
        budget_gate=BudgetGate(),
        reliability=reliability,
        bound_factors=BoundFactors(),  # what providers' miscounts taught (this process)
        failed_logins=FailedLogins(),
        transport=transport if transport is not None else LitellmTransport(),
        response_cache=build_response_cache(settings.cache, reliability.settings, metrics),
        litellm_callbacks=callbacks,
        affinity=SessionAffinity(),
    )
    # histograms fed from log rows, and scrape-time budget / router / queue gauges
    observability.install(
        ctx, store_owns_writer=ctx.log_writer is ctx.store.logs)
    ctx.learning = build_learning(ctx)
    return ctx


REFERENCE_PROMPTS = 96  # probe prompts the quality estimates are levelled on
# texts per encoder call for them: in batches of 32 their activations took a worker's peak
# to ~1.4 GB, and it kept ~220 MB of it after; one at a time, +56 MB peak (+240 in 4s), and
# on this CPU a batch is no faster (settings.py ``encoder_batch_size``)
REFERENCE_BATCH = 1


def reference_phi(settings: Settings, encoder: Encoder) -> Any:
    """Φ(x) of an evenly spaced sample of the artifact's probe prompts (none: None): the
    reference prompts a backend's quality level is read on (gateway/pool/promise.py). At
    startup, before serving; a hot swap keeps them (Φ is frozen)."""
    from router_core.artifact import DEFAULT_ROUTER_DIR, load_probes

    try:
        probes = load_probes(settings.router_path or DEFAULT_ROUTER_DIR)
    except (OSError, ValueError):
        return None
    if not probes:
        return None
    step = max(1, len(probes) // REFERENCE_PROMPTS)
    return encoder.encode([str(p["prompt"]) for p in probes[::step][:REFERENCE_PROMPTS]],
                          batch_size=REFERENCE_BATCH)


def check_encoder(settings: Settings, router: Router) -> None:
    """The gateway embeds as its router was trained (the artifact records the encoder); a
    config that names another encoder kind is a startup error, not a silent choice of one."""
    wanted = settings.encoder
    trained = str((router.config.get("encoder") or {}).get("kind", "minilm"))
    if wanted is None or wanted == trained:
        return
    where = settings.router_path or "the packaged router_core/default_router"
    raise ConfigError(
        f"encoder: {wanted!r}, but the router {router.version} ({where}) was trained on "
        f"{trained!r} embeddings. Build a router on {wanted!r} (`tollgate train --encoder "
        f"{wanted} --out DIR`) and set router_path: DIR, or set encoder: {trained} (or "
        "leave it out: the router's encoder is used)")


def _lifespan(ctx: GatewayContext, freeze_heap: bool = False) -> Any:
    """Start the store, the log writer, the warm encoder and the learning loop; stop them
    in the reverse order."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        install_inline_setup()  # first: the loop's default executor (litellm_inline.py)
        own_writer = ctx.log_writer is not ctx.store.logs
        await ctx.store.start()  # the store starts (and closes) its own writer
        if own_writer:
            await ctx.log_writer.start()
        await ctx.embedder.encode_now(["warm up the encoder"])
        await warm_cascade(ctx.pool.current.router)
        _limit_torch_threads(ctx.settings.encoder_threads)
        await _warm_litellm(ctx.settings)
        uninstall_callbacks = litellm_callbacks.install(ctx.litellm_callbacks)
        if ctx.learning is not None:
            await ctx.learning.start()
        print(table_text(list(ctx.pool.current.known.values())),
              file=sys.stderr, flush=True)  # how each backend is known, once per start
        if freeze_heap:  # last: the startup heap, out of every later full collection
            freeze_startup_heap()
        watch = LoopWatch(ctx.metrics.loop_stalls)
        watch.start()
        ctx.ready = True
        try:
            yield
        finally:
            ctx.ready = False
            watch.stop()
            uninstall_callbacks()
            if ctx.learning is not None:
                await ctx.learning.close()
            if own_writer:
                await ctx.log_writer.close()
            await ctx.store.close()
            await ctx.reliability.close()
            await close_response_cache(ctx.response_cache)
            ctx.embedder.close()

    return lifespan


def build_router() -> APIRouter:
    """The serving routes and the process's own endpoints."""
    r = APIRouter()
    r.add_api_route("/v1/chat/completions", chat_completions, methods=["POST"],
                    openapi_extra=CHAT_COMPLETIONS_OPENAPI)
    r.add_api_route("/chat/completions", chat_completions, methods=["POST"],
                    include_in_schema=False)
    r.add_api_route("/v1/embeddings", embeddings, methods=["POST"])
    r.add_api_route("/embeddings", embeddings, methods=["POST"], include_in_schema=False)
    r.add_api_route("/v1/responses", responses_endpoint, methods=["POST"])
    r.add_api_route("/responses", responses_endpoint, methods=["POST"], include_in_schema=False)
    r.add_api_route("/v1/completions", completions, methods=["POST"])
    r.add_api_route("/completions", completions, methods=["POST"], include_in_schema=False)
    r.add_api_route("/v1/models", list_models, methods=["GET"])
    r.add_api_route("/v1/models/{model_id:path}", retrieve_model, methods=["GET"])
    r.add_api_route("/health", health, methods=["GET"])
    r.add_api_route("/ready", ready, methods=["GET"])
    # LiteLLM Proxy's probe paths, so an existing load balancer or k8s probe keeps working
    r.add_api_route("/health/liveliness", health, methods=["GET"], include_in_schema=False)
    r.add_api_route("/health/readiness", ready, methods=["GET"], include_in_schema=False)
    r.add_api_route("/metrics", metrics, methods=["GET"])
    return r


async def _warm_litellm(settings: Settings) -> None:
    """One offline mock completion: litellm's first call pays ~0.6 s of lazy imports and
    setup, which would otherwise land on the first client's request; and the hub's
    reachability decided once (router_core.env.hub_reach: offline, each hub tokenizer would cost
    ~24 s of retries when a count needs one). No tokenizer is loaded: most requests need
    none (gateway/pricing.py), and each costs 40-100 MB per worker."""
    from gateway.provider import litellm_maps
    from router_core.env.hub_reach import hub_offline_if_unreachable

    if not settings.model_list:
        return
    try:
        await anyio.to_thread.run_sync(hub_offline_if_unreachable)
        await litellm_maps.mock_completion(settings.model_list[0].litellm_model)
    except Exception:  # a warm-up must never stop the gateway from starting
        log.warning("litellm warm-up failed", exc_info=True)


def _limit_torch_threads(n: int) -> None:
    """Process-wide torch thread count (see Settings.encoder_threads), when the encoder loaded
    torch: an encoder that does not need it must not pay its ~200 MB to set a number."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)


def _install_error_handlers(app: FastAPI) -> None:
    """Every failure leaves as an OpenAI error body, through ``GatewayError``."""

    async def answer(_: Request, exc: Exception) -> JSONResponse:
        err = as_gateway_error(exc)
        if err is None:
            log.exception("unhandled error")
            err = GatewayError(500, f"internal error: {type(exc).__name__}", "server_error")
        return err.response()

    # ClientDisconnect by name: a handler of its own class answers without the traceback and
    # the re-raise Starlette gives every exception only ``Exception``'s handler catches
    for raised in (GatewayError, RequestValidationError, StarletteHTTPException,
                   ClientDisconnect, Exception):
        app.add_exception_handler(raised, answer)


async def health() -> dict[str, str]:
    """Liveness: the process answers."""
    return {"status": "ok"}


async def ready(request: Request) -> Response:
    """Readiness: started, router loaded, encoder warm, database reachable."""
    ctx: GatewayContext = request.app.state.ctx
    checks: dict[str, Any] = {"started": ctx.ready, "router_version": ctx.pool.current.version}
    ok = ctx.ready
    try:
        db_ok = bool(await ctx.store.ping())
    except Exception:  # noqa: BLE001 - any fault means "not ready", never a crash
        db_ok = False
    checks["database"] = db_ok
    ok = ok and db_ok
    return JSONResponse({"status": "ready" if ok else "not ready", **checks},
                        status_code=200 if ok else 503)


async def metrics(request: Request) -> Response:
    """Prometheus text, for operators only (the admin key or ``metrics_token``): per-tenant
    budget and spend gauges are in it. Wrong tokens are throttled per client address with
    wrong keys (gateway/auth.py)."""
    ctx: GatewayContext = request.app.state.ctx
    key = bearer_key(request)
    try:
        allowed = key is not None and checked_secret(
            ctx, key, client_address(request), lambda k: may_read_metrics(ctx.settings, k))
    except GatewayError as e:
        return e.response()
    if not allowed:
        return unauthorized("/metrics needs the admin key or the metrics token "
                            "(Authorization: Bearer <token>).").response()
    # in a thread: the budget gauges read the database at scrape time
    body = await anyio.to_thread.run_sync(generate_latest, ctx.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE_LATEST)
