"""One call to the backend a request names, for the endpoints billed by what they send
(embeddings, images, speech, transcription, moderations, rerank), recorded on the request's
``Outcome`` (gateway/serving/record/outcome.py) like every endpoint's.

Its story, told by each endpoint in the frame (gateway/serving/endpoint.py ``serve_unit``):
name the backend (gateway/serving/plan/backend_named.py ``unit_backend``) → reserve the
input's tokens (``Outcome.reserve_input``) → hold a bound on what the call can cost and call
(``call_named``) → settle at the cost of what was answered, never past what was held, and log,
before the response is sent (``settled``). The bound is the endpoint's (embeddings: its tokens,
gateway/serving/embeddings/embeddings_request.py; the others: their units,
gateway/serving/units/unit_prices.py). An attempt that failed after the provider had the request
may be billed by it, so it owes what was held (``Outcome.unit_attempt``). Circuit breakers (an
attempt counts as the tenant's ``principal``, as on chat), the upstream error map
(gateway/serving/forwarding/attempts.py ``upstream_error``) and the booking of an overrun
(``Outcome``) are chat's; a deployment group is tried as chat's, through the context's
transport (gateway/serving/forwarding/deployments.py ``over_deployments``,
gateway/provider/transport.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.config import Backend
from gateway.errors import budget_exceeded
from gateway.provider.failures import UpstreamFailure
from gateway.provider.transport import Operation, ProviderRequest, ReplyBody
from gateway.reliability.guards import circuit_open_error
from gateway.serving.forwarding.attempts import upstream_error
from gateway.serving.forwarding.deployments import GroupReply, over_deployments
from gateway.serving.record.outcome import Outcome


def reply_json(reply: ReplyBody) -> dict:
    """litellm's reply as the JSON object sent to the client (without its hidden params)."""
    out = reply if isinstance(reply, dict) else reply.model_dump(exclude_none=True)
    out.pop("_hidden_params", None)
    return out


async def call_named(out: Outcome, backend: Backend, bound_usd: float,
                     send: Callable[[], Awaitable[GroupReply]],
                     refusal: str | None = None) -> GroupReply:
    """Hold ``bound_usd`` (429 with ``refusal`` when the budget cannot), then ``send()`` if
    the backend's circuit allows: its reply, or the upstream's error (502/503/504, or its
    400). The attempt is recorded either way."""
    if not await out.hold.ensure(bound_usd):
        raise budget_exceeded(refusal or f"The most this {out.unit} request can cost "
                              f"(${bound_usd:.6f}) does not fit the remaining budget.")
    if not out.ctx.reliability.circuits.allow(backend.model_name):
        raise circuit_open_error(out.ctx.reliability, [backend.model_name])
    started = time.perf_counter()
    try:
        reply = await send()
    except UpstreamFailure as f:
        out.unit_attempt(f.status, started, f)
        raise upstream_error(f, [backend.model_name]) from f
    out.unit_attempt(200, started, None)
    return reply


async def call_provider(out: Outcome, backend: Backend, bound_usd: float,
                        operation: Operation, params: dict[str, Any],
                        refusal: str | None = None) -> ReplyBody:
    """``operation`` with ``params`` over the backend's deployments through the context's
    transport, ``bound_usd`` held first (``call_named``): the answering deployment's body."""
    request = ProviderRequest(operation, backend, params, stream=bool(params.get("stream")))
    group = await call_named(out, backend, bound_usd,
                             lambda: over_deployments(out.ctx.transport, request), refusal)
    return group.reply.body


async def settled(out: Outcome, b: Backend, cost_usd: float, overrun_usd: float = 0.0,
                  tokens: tuple[int | None, int | None] | None = None,
                  reported: int | None = None) -> dict[str, str]:
    """``b`` answered at ``cost_usd`` (``Outcome.unit_answered``): settled (never past what
    was held) and logged before the client has the answer; the answer's headers."""
    out.unit_answered(b, cost_usd, overrun_usd, tokens, reported)
    await out.finish(200, None)
    return {**out.headers(), "x-tollgate-cost-usd": f"{out.cost_usd or 0.0:.10f}"}
