"""POST /v1/completions (OpenAI's legacy text completions): a passthrough to the named backend
through ``litellm.atext_completion`` (for an OpenAI-wire backend, its own /v1/completions).

The chat flow on the request's chat view (as /v1/responses does, gateway/serving/
responses_handler.py): each prompt a user message (a token-id prompt as its ids in text, which
bounds its tokens), the reservation N_prompt of everything sent plus max(n, best_of) × the
number of prompts × the output cap (``max_tokens``, else the backend's max_output_tokens,
always sent); settled at the reported usage before the response; fallbacks, circuit breakers,
rate limits and the log row are chat's. A route name is a 400 (routes choose among chat
backends for chat and Responses requests); the backend must be of litellm's ``completion`` or
``chat`` mode. Not streamed: ``stream: true`` is a 400.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import anyio
from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from gateway.auth import authenticate
from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import GatewayError, invalid
from gateway.serving.access_log import log_access
from gateway.serving.attempts import Attempts
from gateway.serving.chat_request import (
    LITELLM_KEYS,
    ChatRequest,
    _check_params,
    _fallbacks,
    _int,
    _options,
)
from gateway.serving.handler import new_request_id
from gateway.serving.outcome import Outcome
from gateway.serving.planning import (
    Plan,
    admissible,
    measure,
    priced,
    start_plan,
    with_plan_fallbacks,
)
from gateway.serving.response_headers import RATELIMIT_STATE
from gateway.serving.responses_handler import named_backend
from gateway.serving.upstream import UpstreamFailure, text_completion
from gateway.serving.validation import json_body

MODES = frozenset({"completion", "chat"})  # what litellm's text completion serves
FORWARDED = frozenset({
    "best_of", "echo", "frequency_penalty", "logit_bias", "logprobs", "max_tokens", "n",
    "presence_penalty", "seed", "stop", "suffix", "temperature", "top_p", "user",
})
GATEWAY_KEYS = frozenset({"model", "prompt", "stream", "stream_options", "tollgate"})


@dataclass(frozen=True)
class CompletionsRequest:
    prompt: Any
    params: dict[str, Any]  # forwarded as they came
    chat: ChatRequest  # the chat view: planning, budget and log only


def _ids(x: Any) -> bool:
    return isinstance(x, list) and bool(x) and all(
        isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in x)


def _prompts(raw: Any) -> list[str]:
    """Each prompt's text (a token-id prompt: its ids, one word each); 400 otherwise."""
    if isinstance(raw, str):
        return [raw]
    if _ids(raw):
        return [" ".join(map(str, raw))]
    if isinstance(raw, list) and raw and all(isinstance(x, str) or _ids(x) for x in raw):
        return [x if isinstance(x, str) else " ".join(map(str, x)) for x in raw]
    raise invalid("'prompt' must be a string, an array of strings, an array of token ids or "
                  "an array of token-id arrays", param="prompt")


def parse_completions_request(body: Any) -> CompletionsRequest:
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    unknown = sorted(set(body) - FORWARDED - GATEWAY_KEYS - LITELLM_KEYS)
    if unknown:
        raise invalid(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required and must be a string", param="model")
    if body.get("stream"):
        raise invalid("streamed text completions are not served; use stream: false or "
                      "/v1/chat/completions", param="stream", code="unsupported_parameter")
    texts = _prompts(body.get("prompt"))
    params = {k: v for k, v in body.items() if k in FORWARDED and v is not None}
    _check_params({k: v for k, v in params.items() if k not in ("logprobs", "best_of")})
    if "logprobs" in params:
        _int(params["logprobs"], "logprobs", 0, 5)
    if "best_of" in params:
        _int(params["best_of"], "best_of", 1, 20)
    for name in ("echo",):
        if name in params and not isinstance(params[name], bool):
            raise invalid(f"'{name}' must be a boolean", param=name)
    if "suffix" in params and not isinstance(params["suffix"], str):
        raise invalid("'suffix' must be a string", param="suffix")
    if body.get("drop_params") is not None and not isinstance(body["drop_params"], bool):
        raise invalid("'drop_params' must be a boolean", param="drop_params")
    n_out = max(int(params.get("n") or 1), int(params.get("best_of") or 1)) * len(texts)
    view = {k: v for k, v in params.items() if k not in ("n", "best_of", "max_tokens")}
    chat = ChatRequest(model=model, messages=[{"role": "user", "content": t} for t in texts],
                       stream=False, include_usage=False, params={**view, "n": n_out},
                       max_tokens=params.get("max_tokens"),
                       options=_options(body.get("tollgate")),
                       fallbacks=_fallbacks(body.get("fallbacks")))
    if body.get("drop_params"):
        params["drop_params"] = True
    return CompletionsRequest(body["prompt"], params, chat)


async def plan_completion(ctx: GatewayContext, plan: Plan) -> Plan:
    """The named backend (known and allowed: 404; of a text-completion mode: 400; priced:
    503), measured, with the request's or the config's fallbacks."""
    pool, model = plan.pool, plan.request.model
    if plan.route is not None:
        raise invalid(f"{model!r} is a route: routes serve /v1/chat/completions and "
                      "/v1/responses; /v1/completions takes a backend name", param="model",
                      code="model_not_supported")
    backend = named_backend(plan)
    mode = pool.modes.get(model, "chat")
    if mode not in MODES:
        raise invalid(f"{model!r} is a model of mode {mode!r}, not a text completion model",
                      param="model", code="model_not_supported")
    backend = priced(plan, backend)
    n_prompt, size = await measure(plan.request, backend)
    return with_plan_fallbacks(replace(plan, candidates=(backend.model_name,),
                                       prompt_tokens=n_prompt, prompt_size=size))


class CompletionAttempts(Attempts):
    """Chat's attempt loop calling litellm's text completion."""

    def __init__(self, outcome: Outcome, plan: Plan, req: CompletionsRequest) -> None:
        super().__init__(outcome, plan)
        self.req = req

    def _deployment(self, index: int) -> None:
        self.out.deployment = index

    async def respond(self) -> Response:
        plan, last = self.plan, None
        async for b, params in self._attempts(plan):
            call = {**self.req.params, "prompt": self.req.prompt, "max_tokens": params["max_tokens"]}
            started = time.perf_counter()
            try:
                reply = await text_completion(b, call, billed=self._billed(b, plan),
                                              answered=self._deployment)
            except UpstreamFailure as f:
                last = f
                self._upstream_result(b, f, started)
                if not f.retryable:
                    break
                continue
            self._upstream_result(b, None, started)
            self.out.answered = b
            return await self._complete(b, reply)
        raise self._final_error(last)

    async def _complete(self, b: Backend, resp: Any) -> Response:
        body = resp.model_dump(exclude_none=True)
        body["model"] = b.model_name
        choices = body.get("choices") or [{}]
        self.out.answer_text = str(choices[0].get("text") or "")
        self.out.take_usage(body.get("usage") or {})
        await self.out.settle()
        headers = {**self.out.headers(), "x-tollgate-cost-usd": f"{self.out.cost_usd:.10f}"}
        return JSONResponse(body, headers=headers,
                            background=BackgroundTask(self.out.finish, 200, None))


async def completions(request: Request) -> Response:
    """OpenAI's legacy text completions (``client.completions.create``)."""
    ctx: GatewayContext = request.app.state.ctx
    t0, rid = time.perf_counter(), new_request_id()
    try:
        tenant = await authenticate(ctx, request)
    except GatewayError as e:
        ctx.metrics.requests.labels("unknown", "none", str(e.status), "unknown").inc()
        log_access({"id": rid, "status": e.status,
                    "latency_ms": (time.perf_counter() - t0) * 1000}, None)
        return e.response({"x-tollgate-request-id": rid})
    out = Outcome(ctx, tenant, rid, t0)
    out.hold.client_gone = request.is_disconnected
    try:
        setattr(request.state, RATELIMIT_STATE, await ctx.reliability.admit(tenant))
        req = parse_completions_request(await json_body(request))
        out.plan = start_plan(ctx.pool.current, tenant, req.chat)
        out.plan = await plan_completion(ctx, out.plan)
        out.plan = admissible(out.plan)
        return await CompletionAttempts(out, out.plan, req).respond()
    except GatewayError as e:
        await out.finish(e.status, e.message)
        return e.response(out.headers())
    except BaseException as e:  # cancelled or a bug: still release the money and log
        with anyio.CancelScope(shield=True):
            cancelled = isinstance(e, anyio.get_cancelled_exc_class())
            await out.finish(499 if cancelled else 500,
                            "cancelled" if cancelled else f"internal error: {type(e).__name__}")
        raise

