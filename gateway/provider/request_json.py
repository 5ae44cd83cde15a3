"""Upstream request bodies as JSON bytes, with orjson: an openai SDK client of our own, passed
to litellm as ``client=`` for the deployments whose calls go through the SDK.

Why: the SDK serialises every request body with ``json.dumps(..., ensure_ascii=False)``
then ``.encode()`` on the event loop; for an 8 MB prompt that is one C call holding the GIL
for 30-60 ms (measured with bench/serving/hostile.py's loop-stall scenario: the largest stall
left), and a worker thread would not help, since the GIL is held throughout. orjson writes the
same bytes about ten times faster (an 8 MB ASCII prompt: ~5 ms), small bodies faster too.

The same JSON: compact separators, UTF-8 (no ``\\u`` escapes), pydantic models dumped as the
SDK dumps them (``exclude_unset``, JSON mode, by alias), datetimes in ISO format; only a float
may be spelled differently (``1e-05`` as ``0.00001``: the same number). Anything orjson refuses
(a lone surrogate, a non-string key, an integer past 64 bits, an unknown type) is left to the
SDK, which serialises it, or raises, as it always did. One difference: orjson writes NaN as
``null`` where the SDK raises; request validation (gateway/serving/request/validation.py) refuses
non-finite numbers before any upstream call.

How, through the SDK's public surface only: ``OrjsonAsyncOpenAI`` overrides ``post`` (every
endpoint's resource calls ``client.post``; litellm's chat handler calls it directly). A mapping
body becomes ``content=`` bytes; the SDK sends bytes content as they are, with the client's
``Content-Type: application/json``. The SDK merges ``extra_body`` (``options["extra_json"]``)
into a mapping body but refuses it beside ``content``, so ``post`` merges it here as the SDK
does (shallow, ``extra_body`` wins, ``Omit`` values dropped) and leaves it out of the options.

Which deployments (``sdk_client``): litellm sends a chat call through the SDK's
``AsyncOpenAI``, and honours ``client=``, for the providers that reach its
``OpenAIChatCompletion`` handler (litellm/main.py ``_complete_custom_openai``):
``SDK_CHAT_PROVIDERS``. Other providers (anthropic, gemini, fireworks_ai, groq, ...) go through
litellm's own HTTP handler and get no client: nothing changes for them. Azure and the
text-completion route also use the SDK, with clients of their own kinds, and keep litellm's
(stdlib JSON, as they would without this module; the gateway's configs use neither).

The client is built as litellm builds its own (``OpenAIChatCompletion._get_openai_client``):
the api_key, api_base and organization litellm resolves for the deployment (argument, then
litellm's globals, then the environment, then the default base), litellm's http client
(``BaseOpenAILLM.get_async_http_client``: its transport, SSL, proxies, HTTP/2 setting),
the call's timeout and max_retries; no default headers (litellm passes headers per request).
One per deployment and event loop (litellm's cache is per loop too: its transport is bound to
the loop), reused by every call; never closed, as litellm keeps its own until evicted: a
deployment's client lives as long as its loop. The resolution is cached per deployment like
``upstream.wire_params`` (an environment fallback, e.g. ``OPENAI_API_KEY`` for a deployment
without ``api_key``, is read once). No client when litellm would not build a plain one: no
static api key (workload identity), a ``client`` already given, or litellm's experimental
base-handler switch.
"""

from __future__ import annotations

import asyncio
import functools
import os
import weakref
from collections.abc import Mapping
from typing import Any

import openai
import orjson
import pydantic

from router_core.env.litellm_env import litellm

# litellm/main.py sends these providers' chat calls to OpenAIChatCompletion (the openai SDK):
# the ones _complete_custom_openai's dispatch names, none caught by an earlier branch. Not
# "bigmodel" (its own api_key/organization rules) nor the long openai_compatible_providers
# tail (several have an earlier branch of their own).
SDK_CHAT_PROVIDERS = frozenset({
    "openai", "custom_openai", "deepinfra", "perplexity", "nvidia_nim", "cerebras", "baseten",
    "sambanova", "volcengine", "anyscale", "nebius", "wandb", "clarifai",
})
_DEFAULT_API_BASE = "https://api.openai.com/v1"


def _default(value: Any) -> Any:
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(exclude_unset=True, mode="json", by_alias=True)
    raise TypeError(f"not serialisable here: {type(value).__name__}")


def request_json(obj: Any) -> bytes:
    """``obj`` as the SDK would send it (module docstring); a TypeError (orjson's
    JSONEncodeError) for what orjson refuses, which ``OrjsonAsyncOpenAI`` leaves to the SDK."""
    return orjson.dumps(obj, default=_default)


def _json_content_type(options: Mapping[str, Any]) -> bool:
    """Whether the request goes as JSON: no Content-Type header given other than JSON's."""
    for name, value in (options.get("headers") or {}).items():
        if name.lower() == "content-type":
            return isinstance(value, str) and value.startswith("application/json")
    return True


class OrjsonAsyncOpenAI(openai.AsyncOpenAI):
    """``AsyncOpenAI`` whose JSON request bodies are written by ``request_json``."""

    @property
    def user_agent(self) -> str:
        """The SDK's, which names the client's class: ``AsyncOpenAI``'s name, not ours."""
        return super().user_agent.replace(type(self).__name__, openai.AsyncOpenAI.__name__, 1)

    async def post(self, path: str, *, cast_to: Any, body: Any = None, content: Any = None,
                   files: Any = None, options: Any = None, **kwargs: Any) -> Any:
        options = {} if options is None else options
        extra = options.get("extra_json")
        if (isinstance(body, Mapping) and content is None and files is None
                and (extra is None or isinstance(extra, Mapping)) and _json_content_type(options)):
            merged = body if extra is None else {  # the SDK's _merge_mappings
                k: v for k, v in {**body, **extra}.items() if not isinstance(v, openai.Omit)}
            try:
                data = request_json(merged)
            except TypeError:  # refused by orjson: the SDK serialises (or raises) as always
                pass
            else:
                options = {k: v for k, v in options.items() if k != "extra_json"}
                return await super().post(path, cast_to=cast_to, content=data, options=options,
                                          **kwargs)
        return await super().post(path, cast_to=cast_to, body=body, content=content,
                                  files=files, options=options, **kwargs)


@functools.lru_cache(maxsize=1024)
def _client_params(model: str, provider: str | None, api_base: str | None, api_key: str | None,
                   organization: str | None) -> tuple[str, str, str | None] | None:
    """(api_key, base_url, organization) as litellm resolves them for an OpenAIChatCompletion
    call (litellm/main.py completion then _complete_custom_openai), None for a deployment that
    does not go there or for which litellm would not build a plain client."""
    try:
        model, provider, dynamic_key, api_base = litellm.get_llm_provider(
            model, custom_llm_provider=provider, api_base=api_base, api_key=api_key)
    except litellm.BadRequestError:  # litellm raises it again on the call
        return None
    if provider not in SDK_CHAT_PROVIDERS:
        return None
    if "ft:babbage-002" in model or "ft:davinci-002" in model:
        return None  # litellm sends these to its text-completion handler
    if dynamic_key is not None:
        api_key = dynamic_key
    api_key = (api_key or litellm.api_key or litellm.openai_key
               or os.environ.get("OPENAI_API_KEY"))
    if not api_key:
        return None  # litellm resolves workload identity, or fails its own way
    base_url = (api_base or litellm.api_base or os.environ.get("OPENAI_BASE_URL")
                or os.environ.get("OPENAI_API_BASE") or _DEFAULT_API_BASE)
    organization = (organization or litellm.organization
                    or os.environ.get("OPENAI_ORGANIZATION") or None)
    return api_key, base_url, organization


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, OrjsonAsyncOpenAI]] = (
    weakref.WeakKeyDictionary())


def sdk_client(call: Mapping[str, Any]) -> OrjsonAsyncOpenAI | None:
    """The client to pass litellm as ``client=`` for a deployment's call parameters (model,
    api_base, api_key, organization, custom_llm_provider, timeout, max_retries), None to let
    litellm build its own (module docstring). Reused per deployment and running event loop."""
    if "client" in call or "base_url" in call:
        return None
    if os.environ.get("EXPERIMENTAL_OPENAI_BASE_LLM_HTTP_HANDLER", "").lower() == "true":
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    str_or_none = [call.get(k) if isinstance(call.get(k), str) else None
                   for k in ("custom_llm_provider", "api_base", "api_key", "organization")]
    params = _client_params(str(call["model"]), *str_or_none)
    if params is None:
        return None
    timeout, max_retries = call.get("timeout"), call.get("max_retries")
    key = (*params, timeout, max_retries)
    per_loop = _clients.setdefault(loop, {})
    client = per_loop.get(key)
    if client is None:
        api_key, base_url, organization = params
        try:  # litellm's shared httpx client; another release may lack it (litellm_compat)
            from litellm.llms.openai.common_utils import BaseOpenAILLM
            http_client = BaseOpenAILLM.get_async_http_client()
        except (ImportError, AttributeError):
            return None  # litellm builds its own client, as it does for other deployments

        client = OrjsonAsyncOpenAI(
            api_key=api_key, base_url=base_url, organization=organization,
            http_client=http_client,
            timeout=timeout if isinstance(timeout, (int, float)) else openai.DEFAULT_TIMEOUT,
            max_retries=max_retries if isinstance(max_retries, int) else openai.DEFAULT_MAX_RETRIES)
        per_loop[key] = client
    return client
