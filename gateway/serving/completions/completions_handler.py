"""POST /v1/completions (OpenAI's legacy text completions): a passthrough to the named backend
through ``litellm.atext_completion`` (for an OpenAI-wire backend, its own /v1/completions).

The chat flow on the request's chat view (as /v1/responses does,
gateway/serving/responses/responses_handler.py): each prompt a user message (a token-id prompt as
its ids in text, which bounds its tokens), the reservation N_prompt of everything sent plus max(n,
best_of) × the number of prompts × the output cap (``max_tokens``, else the backend's
max_output_tokens, always sent); settled at the reported usage before the response; fallbacks,
circuit breakers, rate limits and the log row are chat's. A route name is a 400 (routes choose among
chat backends for chat and Responses requests); the backend must be of litellm's ``completion`` or
``chat`` mode. ``stream: true`` streams it as OpenAI does
(gateway/serving/completions/completions_stream.py: chat's stream relay, settled from the usage
chunk before ``data: [DONE]``; a timed-out attempt costs what a streamed chat attempt costs, its
prompt's input).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from gateway.context import GatewayContext
from gateway.errors import invalid
from gateway.provider.transport import ProviderRequest
from gateway.serving.completions.completions_stream import UPSTREAM_STREAM_OPTIONS, TextRelay
from gateway.serving.delivery import send_body, send_stream
from gateway.serving.endpoint import Frame
from gateway.serving.forwarding.answer import Answer
from gateway.serving.forwarding.attempts import Call
from gateway.serving.plan.backend_named import named_backend
from gateway.serving.plan.planning import (
    Plan,
    admissible,
    named_plan,
    record_routing,
)
from gateway.serving.record.outcome import answered_name
from gateway.serving.request.chat_request import (
    LITELLM_KEYS,
    ChatRequest,
    body_fallbacks,
    body_model,
    check_drop_params,
    check_params,
    check_types,
    int_param,
    json_object,
    only_known,
    stream_flags,
    tollgate_options,
)

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
    body = json_object(body)
    only_known(body, FORWARDED | GATEWAY_KEYS | LITELLM_KEYS)
    model = body_model(body)
    stream, include_usage = stream_flags(body)
    texts = _prompts(body.get("prompt"))
    params = {k: v for k, v in body.items() if k in FORWARDED and v is not None}
    check_params({k: v for k, v in params.items() if k not in ("logprobs", "best_of")})
    if "logprobs" in params:
        int_param(params["logprobs"], "logprobs", 0, 5)
    if "best_of" in params:
        int_param(params["best_of"], "best_of", 1, 20)
    check_types(params, ("echo",), ("suffix",), ())
    check_drop_params(body)
    n_out = max(int(params.get("n") or 1), int(params.get("best_of") or 1)) * len(texts)
    view = {k: v for k, v in params.items() if k not in ("n", "best_of", "max_tokens")}
    chat = ChatRequest(model=model, messages=[{"role": "user", "content": t} for t in texts],
                       stream=stream, include_usage=include_usage,
                       params={**view, "n": n_out},
                       max_tokens=params.get("max_tokens"),
                       options=tollgate_options(body.get("tollgate")),
                       fallbacks=body_fallbacks(body.get("fallbacks")))
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
    return await named_plan(plan, backend)


def forward_completion(req: CompletionsRequest, call: Call) -> ProviderRequest:
    """One text completion attempt, with the attempt's output cap as ``max_tokens``."""
    params = {**req.params, "prompt": req.prompt, "max_tokens": call.cap}
    if req.chat.stream:
        params.update(stream=True, stream_options=UPSTREAM_STREAM_OPTIONS)
    return ProviderRequest("text_completion", call.backend, params,
                           stream=bool(params.get("stream")))


def completion_answer(reply: Any, model: str) -> Answer:
    """A text completion with ``model`` the backend's name; its text the first choice's."""
    body = reply.model_dump(exclude_none=True)
    body["model"] = model
    choices = body.get("choices") or [{}]
    return Answer(body, body.get("usage") or {}, str(choices[0].get("text") or ""))


async def completions(request: Request) -> Response:
    """OpenAI's legacy text completions (``client.completions.create``), top to bottom."""
    async with Frame(request) as frame:  # tracing, timing, errors in OpenAI's shape
        out = await frame.authenticate()  # the tenant; the request's record from here on
        req = parse_completions_request(await frame.admit(out))  # rate limit, slot, body
        plan = await frame.plan(out, req.chat, plan_completion)  # on its chat view: pure
        record_routing(out.ctx, plan)  # (a passthrough: nothing routed to count)
        plan = out.planned(admissible(plan))  # the candidates that can take it (400: none)
        plan = await out.reserve_tokens(plan)  # the tenant's tokens per minute
        tried = await out.attempt(plan, partial(forward_completion, req))  # budget per attempt
        model = answered_name(out)
        if req.chat.stream:  # settled before ``data: [DONE]``, logged when it ends
            return send_stream(out, tried, TextRelay(model, req.chat.include_usage))
        return await send_body(out, completion_answer(tried.reply, model))  # settle, send, log
    return frame.response()  # a refusal, settled and logged
