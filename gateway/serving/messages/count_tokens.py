"""POST /v1/messages/count_tokens (Anthropic's token counting, which Claude Code calls): the
input tokens of a Messages body, counted by the gateway, never by a provider.

Anthropic's endpoint is free and sends nothing to a model, so this one holds no budget and
logs no request row; it is authenticated and limited as any request (issue 48.6: it was free
CPU that slowed everyone): the key's and tenant's requests per minute, a slot of their
``max_parallel_requests`` while it counts, and the tokens it counted added to their tokens
per minute (a window already full refuses the next). A body is at most
``reliability.count_tokens_max_bytes`` (2 MiB; 413 above); it is parsed in a worker thread
and counted in the replica's counting process (``Reliability.apart``), one at a time per
replica, so however many arrive the tokenizer never holds this process's GIL. The body is a
Messages body (gateway/serving/messages/messages_request.py, the same checks; ``max_tokens`` may be
left out), counted on its chat view with the tokenizer litellm selects for the backend
``model`` names, or for a route's first backend (gateway/prompt_tokens.py ``count_prompt_tokens``,
the work grows with the body). The count is the tokenizer's, an
estimate for a provider whose tokenizer litellm does not have.
"""

from __future__ import annotations

from typing import Any

import anyio.to_thread
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from gateway.auth import authenticate, require_model
from gateway.context import GatewayContext
from gateway.errors import GatewayError, invalid
from gateway.prompt_tokens import count_prompt_tokens
from gateway.serving.endpoint import new_request_id
from gateway.serving.messages.messages_request import parse_messages_request
from gateway.serving.plan.backend_named import known_backend
from gateway.serving.request.anthropic_errors import anthropic_error
from gateway.serving.request.validation import load_json
from gateway.serving.response_headers import RATELIMIT_STATE


async def _counted_body(ctx: GatewayContext, request: Request) -> Any:
    """The JSON body, at most ``count_tokens_max_bytes`` (413 above), parsed in the counting
    thread (one at a time per replica, as the count)."""
    limits = ctx.reliability.settings
    declared = request.headers.get("content-length", "")
    too_big = declared.isdigit() and int(declared) > limits.count_tokens_max_bytes
    if too_big:  # paused, its body unread: a loop of 7 MB bodies otherwise runs at wire speed
        await ctx.reliability.pause_refusal()
    raw = b"" if too_big else await request.body()  # refused before it is read
    if too_big or len(raw) > limits.count_tokens_max_bytes:
        raise GatewayError(413, f"A count_tokens body is limited to "
                           f"{limits.count_tokens_max_bytes} bytes.", "invalid_request_error",
                           code="request_too_large")
    return await anyio.to_thread.run_sync(load_json, raw, limits.max_messages,
                                          limits.max_content_parts, limits.max_tool_values,
                                          limiter=ctx.reliability.counting)


async def count_tokens_endpoint(request: Request) -> Response:
    """``client.messages.count_tokens``: ``{"input_tokens": n}``."""
    ctx: GatewayContext = request.app.state.ctx
    headers = {"x-tollgate-request-id": new_request_id()}
    slot = None
    try:
        tenant = await authenticate(ctx, request)
        setattr(request.state, RATELIMIT_STATE, await ctx.reliability.admit(tenant))
        slot = await ctx.reliability.take_slot(tenant, headers["x-tollgate-request-id"])
        body = await _counted_body(ctx, request)
        if isinstance(body, dict) and "max_tokens" not in body:
            body = {**body, "max_tokens": 1}  # not asked for here
        req = parse_messages_request(body)
        pool = ctx.pool.current
        name = pool.settings.resolve_alias(req.model)
        require_model(tenant, req.model, name)
        allowed = tenant.policy.allowed_models
        if name in pool.routes:
            backends = [b for b in pool.settings.route_backends(name)
                        if allowed is None or b.model_name in allowed]
            if not backends:
                raise invalid(f"route {name!r} has no backend this key may use",
                              param="model")
            backend = backends[0]
        else:
            backend = known_backend(pool, tenant.policy, name)  # 404
        n = await ctx.reliability.apart(count_prompt_tokens, backend, req.chat.messages,
                                        req.chat.params.get("tools"))
        await ctx.reliability.used_tokens(tenant, n)  # counted in TPM as if sent
    except GatewayError as e:
        return anthropic_error(e, headers)
    finally:
        with anyio.CancelScope(shield=True):
            await ctx.reliability.free_slot(slot)
    return JSONResponse({"input_tokens": n}, headers=headers)
