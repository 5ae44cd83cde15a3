"""Validation of a chat completion body: what is passed upstream, what Tollgate reads itself.

Every OpenAI chat parameter is forwarded unchanged; a key OpenAI does not define is refused
with 400 (as OpenAI does), which also keeps clients from reaching litellm's own keyword
arguments (``api_base``, ``mock_response`` ...) through the body. Tollgate's own options
come in ``extra_body={"tollgate": {...}}``, which the SDK merges into the JSON top level.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from gateway.errors import invalid
from gateway.serving.budget.fee_params import refuse_fee_params
from gateway.serving.request.cache_control import CacheControl, cache_control

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
# support; forwarded to litellm), ``fallbacks`` (models to try when the asked one fails),
# ``cache`` (response-cache controls, gateway/serving/forwarding/cached_answer.py; never forwarded)
# and ``tags`` / ``litellm_metadata`` (the request's attribution on its log row,
# gateway/serving/record/attribution.py; never forwarded).
LITELLM_KEYS = frozenset({"drop_params", "fallbacks", "cache", "tags", "litellm_metadata"})
ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
# The typed content parts OpenAI defines, each with the object field its payload sits in
# (a text or refusal part carries a string).
PART_PAYLOAD = {"text": str, "refusal": str, "image_url": dict, "input_audio": dict,
                "file": dict}
IMAGE_DETAILS = frozenset({"auto", "low", "high"})
MAX_N = 128  # OpenAI's own bound on choices per request
MAX_OUTPUT_CAP = 1 << 24  # any larger output cap is refused before routing
# Numeric parameters and their OpenAI ranges (inclusive); all must be finite.
NUMBER_RANGES = {"temperature": (0.0, 2.0), "top_p": (0.0, 1.0),
                 "frequency_penalty": (-2.0, 2.0), "presence_penalty": (-2.0, 2.0)}
INT_RANGES = {"n": (1, MAX_N), "top_logprobs": (0, 20), "seed": (-(1 << 63), (1 << 63) - 1),
              "max_tokens": (1, MAX_OUTPUT_CAP), "max_completion_tokens": (1, MAX_OUTPUT_CAP)}
BOOL_PARAMS = ("logprobs", "parallel_tool_calls", "store")
STR_PARAMS = ("user", "prompt_cache_key", "safety_identifier", "service_tier",
              "reasoning_effort", "verbosity")
OBJECT_PARAMS = ("audio", "prediction", "web_search_options", "logit_bias", "metadata")


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
    max_tokens: int | None  # the client's output cap (the smaller of the two fields given)
    options: TollgateOptions
    fallbacks: tuple[str, ...] = ()  # the body's fallbacks (model names), in order
    cache: CacheControl = field(default_factory=CacheControl)  # the body's ``cache`` (LiteLLM)

    @property
    def output_fields(self) -> tuple[str, ...]:
        """Every output-cap field the client sent; the upstream gets the cap in each."""
        return tuple(f for f in ("max_completion_tokens", "max_tokens") if f in self.params)


def number_param(v: Any, name: str, lo: float | None = None, hi: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise invalid(f"'{name}' must be a finite number, got {v!r}", param=name)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise invalid(f"'{name}' must be between {lo} and {hi}, got {v}", param=name)
    return float(v)


def int_param(v: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        big = "is too large; it " if isinstance(v, int) and v > hi else ""
        raise invalid(f"'{name}' {big}must be an integer from {lo} to {hi}, got {v!r}",
                      param=name)
    return v


def tollgate_options(raw: Any) -> TollgateOptions:
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
        cost_weight=None if cw is None else number_param(cw, "tollgate.cost_weight", 0.0, 1e6),
        max_cost_usd=None if mc is None else number_param(mc, "tollgate.max_cost_usd", 0.0, None),
        allowed_models=None if am is None else tuple(am),
    )


def _by_reference(data: Any) -> bool:
    """Audio given as a URL (some providers fetch it) instead of its bytes."""
    return isinstance(data, str) and data[:8].lower().startswith(("http://", "https://",
                                                                  "gs://", "s3://"))


def _part(part: Any, where: str) -> None:
    """A typed content part: an object whose ``type`` OpenAI defines, with its payload."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind not in PART_PAYLOAD:
        raise invalid(f"'{where}' must be an object with 'type' one of "
                      f"{sorted(PART_PAYLOAD)}", param=where)
    if not isinstance(part.get(kind), PART_PAYLOAD[kind]):
        what = "a string" if PART_PAYLOAD[kind] is str else "an object"
        raise invalid(f"'{where}.{kind}' must be {what}", param=f"{where}.{kind}")
    if kind == "input_audio" and _by_reference(part["input_audio"].get("data")):
        raise invalid(f"'{where}.input_audio.data' must be base64-encoded audio: audio read by "
                      "URL is not bounded by the request's bytes, so no reservation could "
                      "bound what the provider bills for it", param=f"{where}.input_audio.data",
                      code="unbounded_file_input")
    if kind == "image_url":
        image = part["image_url"]
        if not isinstance(image.get("url"), str) or not image["url"]:
            raise invalid(f"'{where}.image_url.url' must be a non-empty string",
                          param=f"{where}.image_url.url")
        if image.get("detail", "auto") not in IMAGE_DETAILS:
            raise invalid(f"'{where}.image_url.detail' must be one of {sorted(IMAGE_DETAILS)}",
                          param=f"{where}.image_url.detail")


def _message(m: Any, where: str) -> None:
    if not isinstance(m, dict):
        raise invalid(f"'{where}' must be an object", param=where)
    role = m.get("role")
    if role not in ROLES:
        raise invalid(f"'{where}.role' must be one of {sorted(ROLES)}, got {role!r}",
                      param=f"{where}.role")
    content = m.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise invalid(f"'{where}.content' must be a string or an array of parts",
                      param=f"{where}.content")
    if content is None and role in ("system", "developer", "user", "tool"):
        raise invalid(f"'{where}.content' is required", param=f"{where}.content")
    for j, part in enumerate(content if isinstance(content, list) else ()):
        _part(part, f"{where}.content[{j}]")
    for key in ("name", "tool_call_id"):
        if m.get(key) is not None and not isinstance(m[key], str):
            raise invalid(f"'{where}.{key}' must be a string", param=f"{where}.{key}")
    calls = m.get("tool_calls")
    if calls is not None and not (isinstance(calls, list)
                                  and all(isinstance(c, dict) for c in calls)):
        raise invalid(f"'{where}.tool_calls' must be an array of objects",
                      param=f"{where}.tool_calls")


def _messages(raw: Any) -> list[dict]:
    if not isinstance(raw, list) or not raw:
        raise invalid("'messages' must be a non-empty array", param="messages")
    for i, m in enumerate(raw):
        _message(m, f"messages[{i}]")
    return raw


def _named_objects(v: Any, name: str, inner: str | None) -> None:
    """An array of objects each with a string ``name`` (under ``inner`` when given)."""
    if not isinstance(v, list):
        raise invalid(f"'{name}' must be an array", param=name)
    for i, item in enumerate(v):
        spec = item.get(inner) if inner and isinstance(item, dict) else item
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            field = f"{name}[{i}]" + (f".{inner}" if inner else "")
            raise invalid(f"'{field}' must be an object with a string 'name'", param=field)


def check_types(params: dict[str, Any], bools: Iterable[str], strs: Iterable[str],
                 objects: Iterable[str]) -> None:
    """400 on the first of the named parameters present with the wrong JSON type (booleans,
    then strings, then objects): one check and one wording for every endpoint's body."""
    for names, kind, what in ((bools, bool, "a boolean"), (strs, str, "a string"),
                              (objects, dict, "an object")):
        for name in names:
            if name in params and not isinstance(params[name], kind):
                raise invalid(f"'{name}' must be {what}", param=name)


def json_object(body: Any) -> dict[str, Any]:
    """The body, which must be a JSON object (400 otherwise)."""
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")
    return body


def body_model(body: dict[str, Any]) -> str:
    """The body's ``model``, a non-empty string (400 otherwise)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required and must be a string", param="model")
    return model


def only_known(body: dict[str, Any], known: Collection[str]) -> None:
    """400 naming the first key of ``body`` not in ``known``, in OpenAI's words (a key the
    endpoint does not define never reaches litellm's keyword arguments)."""
    unknown = sorted(set(body) - set(known))
    if unknown:
        raise invalid(f"Unrecognized request argument supplied: {unknown[0]}", param=unknown[0])


def check_drop_params(body: dict[str, Any]) -> None:
    """LiteLLM's ``drop_params``, when given, must be a boolean (400 otherwise)."""
    if body.get("drop_params") is not None and not isinstance(body["drop_params"], bool):
        raise invalid("'drop_params' must be a boolean", param="drop_params")


def check_params(params: dict[str, Any]) -> None:
    """Types and OpenAI's ranges of the forwarded parameters (what litellm would fail on)."""
    for name, (lo, hi) in NUMBER_RANGES.items():
        if name in params:
            number_param(params[name], name, lo, hi)
    for name, (ilo, ihi) in INT_RANGES.items():
        if name in params:
            int_param(params[name], name, ilo, ihi)
    check_types(params, BOOL_PARAMS, STR_PARAMS, OBJECT_PARAMS)
    for token, bias in params.get("logit_bias", {}).items():
        number_param(bias, f"logit_bias.{token}", -100.0, 100.0)
    stop = params.get("stop")
    if stop is not None and not isinstance(stop, str) and not (
            isinstance(stop, list) and len(stop) <= 4 and all(isinstance(x, str) for x in stop)):
        raise invalid("'stop' must be a string or an array of up to 4 strings", param="stop")
    if "tools" in params:
        _named_objects(params["tools"], "tools", "function")
    if "functions" in params:
        _named_objects(params["functions"], "functions", None)
    for name in ("tool_choice", "function_call"):
        if name in params and not isinstance(params[name], (str, dict)):
            raise invalid(f"'{name}' must be a string or an object", param=name)
    fmt = params.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") not in
                            ("text", "json_object", "json_schema")):
        raise invalid("'response_format' must be an object with 'type' text, json_object or "
                      "json_schema", param="response_format")
    if "modalities" in params and not (isinstance(params["modalities"], list) and all(
            isinstance(x, str) for x in params["modalities"])):
        raise invalid("'modalities' must be an array of strings", param="modalities")


def stream_flags(body: dict) -> tuple[bool, bool]:
    """(``stream``, ``stream_options.include_usage``) of a body that may stream (400 if bad)."""
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
    return stream, bool((so or {}).get("include_usage"))


def parse_chat_request(body: Any) -> ChatRequest:
    """Validate ``body``; raises a 400 GatewayError naming the offending field."""
    body = json_object(body)
    model = body_model(body)
    messages = _messages(body.get("messages"))
    only_known(body, PASSTHROUGH_PARAMS | GATEWAY_KEYS | LITELLM_KEYS)
    stream, include_usage = stream_flags(body)
    params = {k: v for k, v in body.items() if k in PASSTHROUGH_PARAMS and v is not None}
    check_drop_params(body)
    if body.get("drop_params") is not None:
        params["drop_params"] = body["drop_params"]
    refuse_fee_params(params)  # fees outside token prices (gateway/serving/budget/fee_params.py)
    check_params(params)
    caps = [params[f] for f in ("max_completion_tokens", "max_tokens") if f in params]
    max_tokens = min(caps) if caps else None
    return ChatRequest(
        model=model,
        messages=messages,
        stream=stream,
        include_usage=include_usage,
        params=params,
        max_tokens=max_tokens,
        options=tollgate_options(body.get("tollgate")),
        fallbacks=body_fallbacks(body.get("fallbacks")),
        cache=cache_control(body.get("cache")),
    )


def body_fallbacks(raw: Any) -> tuple[str, ...]:
    """LiteLLM's body ``fallbacks``: a list of model names (``{"model": name}`` also taken)."""
    if raw is None:
        return ()
    names = [x.get("model") if isinstance(x, dict) else x for x in raw] if isinstance(
        raw, list) else None
    if names is None or not all(isinstance(n, str) and n for n in names):
        raise invalid("'fallbacks' must be a list of model names", param="fallbacks")
    return tuple(names)
