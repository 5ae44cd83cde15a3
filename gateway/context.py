"""Everything a request handler needs, built once per app and passed explicitly (app.state).

The store's methods may be synchronous (SQLAlchemy in a thread) or coroutines; ``call``
awaits either without blocking the event loop.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from gateway.config import Settings
from gateway.seams import LearningHooks, LogSink, Reliability, Store

if TYPE_CHECKING:  # the rooms that fill these fields import this module, not the reverse
    from gateway.auth import FailedLogins
    from gateway.pool import PoolHolder
    from gateway.pool.explore_share import PriorShare
    from gateway.provider.transport import Transport
    from gateway.review.metrics import GatewayMetrics
    from gateway.serving.budget.bound_factors import BoundFactors
    from gateway.serving.budget.budget_gate import BudgetGate
    from gateway.serving.forwarding.response_cache import ResponseCache
    from gateway.serving.plan.embedding import EmbeddingBatcher
    from gateway.serving.plan.session_affinity import SessionAffinity
    from router_core.encoders.minilm import Encoder


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Await ``fn(*args)``: directly if it is a coroutine function, else in a worker thread."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await anyio.to_thread.run_sync(partial(fn, *args, **kwargs))
    if inspect.isawaitable(result):
        return await result
    return result


@dataclass
class GatewayContext:
    """The per-app state. ``settings`` is the config as loaded (server-wide options); what a
    request is routed over (backends, routes, prices, router) is ``pool.current``, taken
    once per request and swapped whole by the learning loop."""

    settings: Settings
    store: Store  # authenticate / reserve / settle (gateway/seams.py)
    log_writer: LogSink  # submit(row), non-blocking
    pool: PoolHolder
    encoder: Encoder
    metrics: GatewayMetrics
    embedder: EmbeddingBatcher  # Φ(x) of concurrent requests, batched on the encoder thread
    prior_share: PriorShare  # cold-start traffic caps per route (this process's counts)
    budget_gate: BudgetGate  # tenants' lines for the budget, trusted backends (this process)
    reliability: Reliability  # rate limits, parallel slots, circuit breakers (gateway/seams.py)
    bound_factors: BoundFactors  # backends' learned reservation factors (this process)
    failed_logins: FailedLogins  # wrong keys per client address (gateway/auth.py)
    transport: Transport  # every call to a provider goes through it (gateway/provider/transport.py)
    ready: bool = False
    learning: LearningHooks | None = None  # feedback, hot swap, retraining (learning/loop.py)
    response_cache: ResponseCache | None = None  # when configured (``cache:``)
    # litellm_settings callbacks, resolved (gateway/provider/litellm_callbacks.py); installed on start
    litellm_callbacks: dict[str, list[Any]] = field(default_factory=dict)
    # conversation → the backend holding its prompt cache (serving/plan/session_affinity.py)
    affinity: SessionAffinity | None = None
