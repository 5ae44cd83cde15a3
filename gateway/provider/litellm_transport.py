"""``LitellmTransport``: the gateway's one real transport (gateway/provider/transport.py), one
litellm call per ``ProviderRequest``.

Chat goes through ``litellm.acompletion`` with the gateway's own handling: parameters litellm
does not map for an OpenAI-wire deployment ride in ``extra_body`` (``wire_params``), bodies are
written by orjson (request_json.py), litellm's setup runs on the loop where it cannot block
(litellm_inline.py) and its logging is skipped where nothing reads it (litellm_unlogged.py).
Embeddings, Responses, text completions, Anthropic's Messages and the unit endpoints go to
litellm's entry point of the same name with the deployment's parameters. No call retries on
its own (``num_retries``/``max_retries`` 0): fallback across deployments and backends is the
gateway's. Every litellm error comes out classified (litellm_errors.py).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from gateway.config import Backend
from gateway.provider import request_json
from gateway.provider.deployments import attempt_timeout, output_cap
from gateway.provider.failures import UpstreamFailure
from gateway.provider.litellm_errors import classify
from gateway.provider.litellm_inline import inline_setup
from gateway.provider.litellm_unlogged import unlogged
from gateway.provider.open_stream import OpenStream
from gateway.provider.transport import (
    Operation,
    ProviderReply,
    ProviderRequest,
    Transport,
    token_usage,
)
from router_core.env.litellm_env import litellm

litellm.suppress_debug_info = True

# Providers that speak OpenAI's wire format: parameters litellm does not map for them are sent
# verbatim in the body (extra_body) instead of being dropped, so e.g. ``user`` reaches a
# self-hosted OpenAI-compatible server. Other providers get litellm's own mapping.
OPENAI_WIRE_PROVIDERS = frozenset({"openai", "custom_openai"})


@functools.lru_cache(maxsize=1024)
def wire_params(model: str, api_base: str | None) -> frozenset[str] | None:
    """The parameters litellm maps for a deployment of an OpenAI-wire provider, None for any
    other provider. Cached: a pure function of the deployment's model and api_base, and two
    litellm look-ups per attempt were a measurable share of passthrough's CPU
    (bench/forwarding_profile.py)."""
    try:
        _, provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
    except litellm.BadRequestError:
        return None
    if provider not in OPENAI_WIRE_PROVIDERS:
        return None
    return frozenset(litellm.get_supported_openai_params(
        model=model.split("/", 1)[-1], custom_llm_provider=provider) or ())


def chat_kwargs(backend: Backend, deployment: dict[str, Any], messages: list[dict],
                params: dict[str, Any]) -> dict[str, Any]:
    """``litellm.acompletion``'s keyword arguments for one deployment (module docstring)."""
    call = backend.call_params(deployment)
    params = dict(params)
    # per request (the body's drop_params) over per deployment (litellm_params / config)
    drop = bool(params.pop("drop_params", None) or call.pop("drop_params", False))
    supported = wire_params(str(call["model"]), call.get("api_base"))
    if supported is not None:
        extra = {k: params.pop(k) for k in list(params) if k not in supported}
        if extra and not drop:
            call["extra_body"] = {**(call.get("extra_body") or {}), **extra}
    call.update(params)
    if drop:
        call["drop_params"] = True  # litellm leaves out what this provider does not support
    call["messages"] = messages
    call["timeout"] = attempt_timeout(backend, deployment, cap=output_cap(call))
    call["num_retries"] = 0  # fallback across backends is ours; no hidden retries
    call["max_retries"] = 0
    client = request_json.sdk_client(call)  # bodies serialised with orjson (request_json.py)
    if client is not None:
        call["client"] = client
    return call


async def first_event(started: Awaitable[Any], timeout: float) -> OpenStream:
    """An OpenStream of a started stream call once its first item came."""
    it: AsyncIterator[Any] | None = None
    try:
        stream = await asyncio.wait_for(started, timeout)
        it = stream.__aiter__()
        try:
            first = await asyncio.wait_for(anext(it), timeout)
        except StopAsyncIteration:
            first = None
    except BaseException as e:
        if it is not None:
            await OpenStream(None, it, timeout).close()
        if not isinstance(e, Exception):
            raise
        raise classify(e) from e
    return OpenStream(first=first, rest=it, timeout=timeout, classify=classify)


async def chat(backend: Backend, deployment: dict[str, Any], params: dict[str, Any],
               stream: bool) -> Any:
    """One chat call (``params`` hold ``messages``): the reply, or an opened stream."""
    params = dict(params)
    kwargs = chat_kwargs(backend, deployment, params.pop("messages"), params)
    if stream:
        kwargs["timeout"] = attempt_timeout(backend, deployment, True, output_cap(kwargs))
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}  # we settle from it
    # litellm's setup on the loop where it cannot block; its logging where unread
    with inline_setup(kwargs), unlogged():
        if stream:
            return await first_event(litellm.acompletion(**kwargs), kwargs["timeout"])
        return await litellm.acompletion(**kwargs)


async def embedding(backend: Backend, deployment: dict[str, Any], params: dict[str, Any],
                    stream: bool) -> Any:
    """One embeddings call (``params`` hold ``input``)."""
    return await litellm.aembedding(**{**backend.call_params(deployment), **params,
                                       "timeout": attempt_timeout(backend, deployment)})


def entry_point(name: str) -> Callable[..., Awaitable[Any]]:
    """A litellm entry point called with the deployment's parameters, the request's, a
    timeout and no retries of its own; streamed, an OpenStream once the first item came."""

    async def call(backend: Backend, deployment: dict[str, Any], params: dict[str, Any],
                   stream: bool) -> Any:
        kwargs = {**backend.call_params(deployment), **params,
                  "timeout": attempt_timeout(backend, deployment, stream, output_cap(params)),
                  "num_retries": 0, "max_retries": 0}
        fn = getattr(litellm, name)  # looked up per call: a test may patch litellm's module
        if stream:
            return await first_event(fn(**kwargs), kwargs["timeout"])
        return await fn(**kwargs)

    return call


SENDERS: dict[Operation, Callable[..., Awaitable[Any]]] = {
    "chat": chat,
    "embedding": embedding,
    "responses": entry_point("aresponses"),
    "text_completion": entry_point("atext_completion"),
    "anthropic_messages": entry_point("anthropic_messages"),
    "image_generation": entry_point("aimage_generation"),
    "speech": entry_point("aspeech"),
    "transcription": entry_point("atranscription"),
    "moderation": entry_point("amoderation"),
    "rerank": entry_point("arerank"),
}


class LitellmTransport(Transport):
    """Each request one litellm call to its deployment (module docstring)."""

    async def send(self, request: ProviderRequest) -> ProviderReply:
        deployment = request.backend.deployment_params()[request.deployment]
        try:
            body = await SENDERS[request.operation](request.backend, deployment,
                                                    dict(request.params), request.stream)
        except UpstreamFailure:
            raise
        except Exception as e:
            raise classify(e) from e
        return ProviderReply(body, request.deployment,
                             None if request.stream else token_usage(body))
