"""Validation of a chat completion body: what is passed upstream, what Tollgate reads itself.

Every OpenAI chat parameter is forwarded unchanged; a key OpenAI does not define is refused
with 400 (as OpenAI does), which also keeps clients from reaching litellm's own keyword
arguments (``api_base``, ``mock_response`` ...) through the body. Tollgate's own options
come in ``extra_body={"tollgate": {...}}``, which the SDK merges into the JSON top level.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import invalid

# OpenAI chat completion parameters forwarded as they are (model, messages, stream and
# stream_options are handled by the gateway).
PASSTHROUGH_PARAMS = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "metadata",
        "modalities",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
GATEWAY_KEYS = frozenset({"model", "messages", "stream", "stream_options", "tollgate"})
# LiteLLM Proxy's request keys: ``drop_params`` (leave out what the provider does not
# support; forwarded to litellm) and ``fallbacks`` (models to try when the asked one fails).
LITELLM_KEYS = frozenset({"drop_params", "fallbacks"})
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})


@dataclass(frozen=True)
class TollgateOptions:
    """Per-request routing options (``extra_body["tollgate"]``)."""

    cost_weight: float | None = None
    max_cost_usd: float | None = None
    allowed_models: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: list[dict]
    stream: bool
    include_usage: bool
    params: dict[str, Any]  # forwarded upstream as they came
    max_tokens: int | None  # the client's output cap (max_completion_tokens or max_tokens)
    max_tokens_field: str | None  # which of the two the client used
    options: TollgateOptions
    fallbacks: tuple[str, ...] = ()  # the body's fallbacks (model names), in order


def _number(v: Any, name: str, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise invalid(f"'{name}' must be a number", param=name)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise invalid(f"'{name}' must be between {lo} and {hi}, got {v}", param=name)
    return float(v)


def _positive_int(v: Any, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise invalid(f"'{name}' must be a positive integer, got {v!r}", param=name)
    return v


def _options(raw: Any) -> TollgateOptions:
    if raw is None:
        return TollgateOptions()
    if not isinstance(raw, dict):
        raise invalid("'tollgate' must be an object", param="tollgate")
    unknown = sorted(set(raw) - {"cost_weight", "max_cost_usd", "allowed_models"})
    if unknown:
        raise invalid(f"unknown tollgate option(s) {unknown}", param=f"tollgate.{unknown[0]}")
    cw = raw.get("cost_weight")
    mc = raw.get("max_cost_usd")
    am = raw.get("allowed_models")
    if am is not None and (
        not isinstance(am, list) or not am or not all(isinstance(x, str) for x in am)
    ):
        raise invalid(
            "'tollgate.allowed_models' must be a non-empty list of model names",
            param="tollgate.allowed_models",
        )
    return TollgateOptions(
        cost_weight=None if cw is None else _number(cw, "tollgate.cost_weight", 0.0, 1e6),
        max_cost_usd=None if mc is None else _number(mc, "tollgate.max_cost_usd", 0.0, None),
        allowed_models=None if am is None else tuple(am),
    )


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise invalid("'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(raw):
        if not isinstance(m, dict):
            raise invalid(f"'messages[{i}]' must be an object", param=f"messages[{i}]")
        role = m.get("role")
        if role not in ROLES:
            raise invalid(
                f"'messages[{i}].role' must be one of {sorted(ROLES)}, got {role!r}",
                param=f"messages[{i}].role",
            )
        content = m.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise invalid(
                f"'messages[{i}].content' must be a string or an array of parts",
                param=f"messages[{i}].content",
            )
        if content is None and role in ("system", "developer", "user", "tool"):
            raise invalid(f"'messages[{i}].content' is required", param=f"messages[{i}].content")
    return raw


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate ``body``; raises a 400 GatewayError naming the offending field."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required and must be a string", param="model")
    messages = _messages(body.get("messages"))
    unknown = sorted(set(body) - PASSTHROUGH_PARAMS - GATEWAY_KEYS - LITELLM_KEYS)
    if unknown:
        raise invalid(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean", param="stream")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise invalid("'stream_options' must be an object", param="stream_options")
    if so and not stream:
        raise invalid("'stream_options' is only allowed when 'stream' is true",
                      param="stream_options")
    params = {k: v for k, v in body.items() if k in PASSTHROUGH_PARAMS and v is not None}
    if body.get("drop_params") is not None:
        if not isinstance(body["drop_params"], bool):
            raise invalid("'drop_params' must be a boolean", param="drop_params")
        params["drop_params"] = body["drop_params"]
    max_field = None
    max_tokens = None
    for name in ("max_completion_tokens", "max_tokens"):
        if name in params:
            max_tokens, max_field = _positive_int(params[name], name), name
            break
    if "n" in params:
        _positive_int(params["n"], "n")
    if "temperature" in params:
        _number(params["temperature"], "temperature", 0.0, 2.0)
    if "top_p" in params:
        _number(params["top_p"], "top_p", 0.0, 1.0)
    if "tools" in params and not isinstance(params["tools"], list):
        raise invalid("'tools' must be an array", param="tools")
    return ChatRequest(
        model=model,
        messages=messages,
        stream=stream,
        include_usage=bool((so or {}).get("include_usage")),
        params=params,
        max_tokens=max_tokens,
        max_tokens_field=max_field,
        options=_options(body.get("tollgate")),
        fallbacks=_fallbacks(body.get("fallbacks")),
    )


def _fallbacks(raw: Any) -> tuple[str, ...]:
    """LiteLLM's body ``fallbacks``: a list of model names (``{"model": name}`` also taken)."""
    if raw is None:
        return ()
    names = [x.get("model") if isinstance(x, dict) else x for x in raw] if isinstance(
        raw, list) else None
    if names is None or not all(isinstance(n, str) and n for n in names):
        raise invalid("'fallbacks' must be a list of model names", param="fallbacks")
    return tuple(names)
