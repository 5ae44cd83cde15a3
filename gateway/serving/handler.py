"""POST /v1/chat/completions: authenticate → admit → parse → plan → attempts → response.

The frame (authentication, the ``Outcome`` created right after it, the rate limit, finishing
once on a refusal or a cancellation) is gateway/serving/endpoint.py's, shared with the other
endpoints; what is chat's own is here: the body parsed as a chat request, chat's planning, and
the attempt loop, built only from a complete plan.
"""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from gateway.serving.attempts import Attempts
from gateway.serving.chat_request import parse_chat_request
from gateway.serving.endpoint import planned, serve
from gateway.serving.outcome import Outcome
from gateway.serving.planning import plan_request


async def answer_chat(out: Outcome, body: Any) -> Response:
    """A chat completion body, planned and attempted."""
    req = parse_chat_request(body)
    return await Attempts(out, await planned(out, req, plan_request)).respond()


async def chat_completions(request: Request) -> Response:
    """The OpenAI chat completions endpoint."""
    return await serve(request, answer_chat)
