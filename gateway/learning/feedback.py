"""``POST /v1/feedback``: a tenant scores an answer it received; each call is an observation.

Body: ``{"request_id": str, "score": float in [0, 1]}`` or ``{"request_id": str, "correct":
bool}``, optionally ``"comment": str``. Only the key that made the request may score it, or
its team's admin or the admin key (``gateway.auth.may_act_on_request``; issue 48, item 14):
any other key, a teammate's included, gets the same 404 as an unknown id, so ids cannot be
probed.
A tenant has one feedback per request: a later one replaces it (``"replaced": true`` in the
answer, counted in ``tollgate_feedback_replaced``), so one client cannot weigh a prompt many
times. Limits: the body is at most ``MAX_BODY_BYTES``, the comment ``MAX_COMMENT_CHARS`` with no
NUL character, the call counts against the tenant's request rate limit, and an id that is not
one the gateway issues is answered 404 at once (a well-formed unknown id waits at most
``SERVED_WAIT_S``).
Feedback teaches the router, so only a routed, answered request takes it: a passthrough request
(a backend named by the client) gets a 400 ``not_routed`` at once, as soon as its log row
exists.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import anyio.to_thread
import sqlalchemy as sa
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from gateway.auth import (
    Principal,
    authenticate,
    bearer_key,
    is_admin_key,
    may_act_on_request,
    tenant_principal,
)
from gateway.context import GatewayContext
from gateway.errors import GatewayError, invalid
from gateway.learning import tables as ldb
from gateway.learning.feedback_rows import record_feedback
from gateway.serving.body_limit import too_large
from gateway.serving.request.validation import json_body
from gateway.store.records import Tenant

# The served-request row is written after the response is sent; a client that posts
# feedback at once may arrive first, so an unknown id is re-read for this long (a bound
# well under a client's usual timeout, since a truly unknown id waits all of it).
SERVED_WAIT_S = 3.0
MAX_BODY_BYTES = 64 * 1024
MAX_COMMENT_CHARS = 4000
REQUEST_ID = re.compile(r"tg-[0-9a-f]{32}")  # what gateway/serving/endpoint.py issues


def parse_feedback(body: Any) -> tuple[str, float, str | None]:
    """(request_id, quality ∈ [0, 1], comment) or a 400 naming the bad field."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    rid = body.get("request_id")
    if not isinstance(rid, str) or not rid:
        raise invalid("request_id is required (the x-tollgate-request-id header)", "request_id")
    has_score, has_correct = "score" in body, "correct" in body
    if has_score == has_correct:
        raise invalid("give exactly one of score (0 to 1) or correct (true/false)", "score")
    if has_correct:
        if not isinstance(body["correct"], bool):
            raise invalid("correct must be true or false", "correct")
        quality = 1.0 if body["correct"] else 0.0
    else:
        score = body["score"]
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            raise invalid("score must be a number from 0 to 1", "score")
        quality = float(score)
    comment = body.get("comment")
    if comment is not None and not isinstance(comment, str):
        raise invalid("comment must be a string", "comment")
    if comment is not None and (len(comment) > MAX_COMMENT_CHARS or "\x00" in comment):
        raise invalid(f"comment must be at most {MAX_COMMENT_CHARS} characters, without NUL",
                      "comment")
    return rid, quality, comment


def logged_request(engine: sa.Engine, request_id: str) -> dict | None:
    """The request log's route, tenant, key, status and model for ``request_id`` (None until
    the log writer has written the row)."""
    from gateway.store.models import request_logs as t

    with engine.connect() as conn:
        row = conn.execute(sa.select(t.c.route, t.c.tenant_id, t.c.key_id, t.c.status,
                                     t.c.chosen_model)
                           .where(t.c.id == request_id)).first()
    return None if row is None else dict(row._mapping)


async def _logged_waiting(ctx: GatewayContext, request_id: str) -> dict | None:
    """The request's log row, waiting up to ``SERVED_WAIT_S`` for the writer (the served record
    can be remembered before the row is written)."""
    loop = asyncio.get_running_loop()
    deadline, pause = loop.time() + SERVED_WAIT_S, 0.05
    while True:
        logged = await anyio.to_thread.run_sync(logged_request, ctx.store.engine, request_id)
        if logged is not None or loop.time() > deadline:
            return logged
        if ctx.log_writer.pending:
            await ctx.log_writer.flush(pause)
        else:
            await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


async def _may_score(ctx: GatewayContext, who: Principal, served: dict) -> bool:
    """Whether ``who`` may score the served request: the key that made it (read from its
    log row), its team's admin or the admin key."""
    if who.admin:
        return True
    if not who.can_see(served["tenant_id"]):
        return False
    logged = await _logged_waiting(ctx, served["request_id"])
    if logged is None:
        return False
    return await may_act_on_request(ctx, who, logged["tenant_id"], logged["key_id"])


async def _served(ctx: GatewayContext, request_id: str) -> tuple[dict | None, dict | None]:
    """(the served request, its log row): the served request from this replica's memory,
    else the database (any replica).

    Re-read until ``SERVED_WAIT_S``: the request is remembered after its response was sent
    (once its cost is settled), so an eager client can arrive first. A logged request that
    was not routed or not answered will never be served: no wait for it.
    """
    if not REQUEST_ID.fullmatch(request_id):
        return None, None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SERVED_WAIT_S
    pause = 0.05
    while True:
        if ctx.learning is not None and (row := ctx.learning.recent(request_id)) is not None:
            return row, None
        row = await anyio.to_thread.run_sync(ldb.get_served, ctx.store.engine, request_id)
        if row is not None:
            return row, None
        logged = await anyio.to_thread.run_sync(logged_request, ctx.store.engine, request_id)
        never = logged is not None and (logged["route"] is None or logged["status"] != 200)
        if never or loop.time() > deadline:
            return None, logged
        await asyncio.sleep(pause)
        pause = min(pause * 2, 0.5)


def _not_served(rid: str, tenant: Tenant, logged: dict | None) -> GatewayError:
    mine = (logged is not None and logged["tenant_id"] == tenant.id
            and logged.get("key_id") in (None, tenant.key_id))
    if mine and logged["route"] is None:
        return invalid(
            f"request {rid!r} was a passthrough to {logged['chosen_model']!r}: feedback "
            "teaches the router, which did not choose that model; give feedback on requests "
            "sent to a route (e.g. model=\"auto\")", "request_id", code="not_routed")
    return GatewayError(
        404,
        f"no routed request {rid!r} was made with this API key",
        "invalid_request_error",
        code="request_not_found",
        param="request_id",
    )


async def feedback(request: Request) -> Response:
    ctx: GatewayContext = request.app.state.ctx
    try:
        tenant = await authenticate(ctx, request)
        if ctx.reliability is not None:
            await ctx.reliability.admit(tenant)
        if len(await request.body()) > MAX_BODY_BYTES:
            raise too_large(MAX_BODY_BYTES)
        rid, quality, comment = parse_feedback(await json_body(request))
        served, logged = await _served(ctx, rid)
        key = bearer_key(request)
        who = (Principal(admin=True) if key is not None and is_admin_key(ctx.settings, key)
               else tenant_principal(tenant))
        if served is None or not await _may_score(ctx, who, served):
            raise _not_served(rid, tenant, logged if served is None else None)
        obs_id, replaced = await anyio.to_thread.run_sync(
            lambda: record_feedback(
                ctx.store.engine,
                key=served["prompt_key"],
                model=served["model"],
                quality=quality,
                cost_usd=served["cost_usd"],
                request_id=rid,
                tenant_id=served["tenant_id"],
                comment=comment,
            )
        )
    except GatewayError as e:
        return e.response()
    if replaced:
        ctx.metrics.feedback_replaced.inc()
    return JSONResponse(
        {
            "object": "feedback",
            "id": obs_id,
            "request_id": rid,
            "model": served["backend"],
            "router_model": served["model"],
            "quality": quality,
            "replaced": replaced,
        }
    )


def build_router() -> APIRouter:
    r = APIRouter()
    r.add_api_route("/v1/feedback", feedback, methods=["POST"])
    return r
