"""POST /v1/completions (OpenAI's legacy text completions): a passthrough to the named backend
through ``litellm.atext_completion`` (for an OpenAI-wire backend, its own /v1/completions).

The chat flow on the request's chat view (as /v1/responses does, gateway/serving/
responses_handler.py): each prompt a user message (a token-id prompt as its ids in text, which
bounds its tokens), the reservation N_prompt of everything sent plus max(n, best_of) × the
number of prompts × the output cap (``max_tokens``, else the backend's max_output_tokens,
always sent); settled at the reported usage before the response; fallbacks, circuit breakers,
rate limits and the log row are chat's. A route name is a 400 (routes choose among chat
backends for chat and Responses requests); the backend must be of litellm's ``completion`` or
``chat`` mode. ``stream: true`` streams it as OpenAI does (gateway/serving/completions_stream.py:
chat's stream relay, settled from the usage chunk before ``data: [DONE]``; a timed-out attempt
costs what a streamed chat attempt costs, its prompt's input).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fastapi import Request
from fastapi.responses import Response

from gateway.config import Backend
from gateway.context import GatewayContext
from gateway.errors import invalid
from gateway.serving.chat_request import (
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
from gateway.serving.completions_stream import UPSTREAM_STREAM_OPTIONS, TextCompletionStream
from gateway.serving.endpoint import planned, serve
from gateway.serving.outcome import Outcome
from gateway.serving.planning import (
    Plan,
    measure,
    priced,
    with_plan_fallbacks,
)
from gateway.serving.responses_handler import ForwardedAttempts, named_backend
from gateway.serving.upstream import Billed, text_completion

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
    backend = priced(plan, backend)
    n_prompt, size = await measure(plan.request, backend)
    return with_plan_fallbacks(replace(plan, candidates=(backend.model_name,),
                                       prompt_tokens=n_prompt, prompt_size=size))


class CompletionAttempts(ForwardedAttempts):
    """The attempts of a text completion request, each a ``litellm.atext_completion`` call."""

    def __init__(self, outcome: Outcome, plan: Plan, req: CompletionsRequest) -> None:
        super().__init__(outcome, plan)
        self.req = req

    async def _call(self, b: Backend, cap: int, billed: Billed) -> Any:
        call = {**self.req.params, "prompt": self.req.prompt, "max_tokens": cap}
        if self.req.chat.stream:
            call.update(stream=True, stream_options=UPSTREAM_STREAM_OPTIONS)
        return await text_completion(b, call, billed=billed, answered=self._answered)

    async def _answer(self, b: Backend, resp: Any) -> Response:
        if self.req.chat.stream:  # chat's relay (gateway/serving/attempts.py) sends it
            return self._stream(b, TextCompletionStream(resp, self.out))
        body = resp.model_dump(exclude_none=True)
        body["model"] = b.model_name
        choices = body.get("choices") or [{}]
        self.out.answer_text = str(choices[0].get("text") or "")
        self.out.take_usage(body.get("usage") or {})
        return await self._send(body)


async def answer_completion(out: Outcome, body: Any) -> Response:
    """A text completion body, planned on its chat view and attempted as a text completion."""
    req = parse_completions_request(body)
    plan = await planned(out, req.chat, plan_completion)
    return await CompletionAttempts(out, plan, req).respond()


async def completions(request: Request) -> Response:
    """OpenAI's legacy text completions (``client.completions.create``)."""
    return await serve(request, answer_completion)
