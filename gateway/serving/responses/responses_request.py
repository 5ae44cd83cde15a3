"""The body of ``POST /v1/responses`` (OpenAI's Responses API), validated, and its chat view.

What is forwarded is the body as it came (OpenAI's Responses parameters, each checked for its
type); Tollgate's options come in ``extra_body={"tollgate": {...}}`` and LiteLLM's
``drop_params`` / ``fallbacks`` as on chat completions. Any other key is a 400.

Planning, the budget and the request log work on a ``ChatRequest``
(gateway/serving/request/chat_request.py): ``chat_view`` is the same request as chat messages, used for
those only, never sent: ``instructions`` a system message, a string ``input`` a user message, a
message item its role's message (text parts as text, images as image parts, so the budget bounds
them as images, files as file parts, which only a backend declaring ``max_file_tokens`` takes), any
other item (a function call, its output, a reasoning item) an assistant message holding the item's
JSON, which bounds its tokens; function tools in chat's shape. So ``model="auto"`` is routed on the
system/user text, exactly as chat, and the reservation bound is N_prompt of everything sent with
``max_output_tokens`` as the output cap.

Refused (400), because what they make the provider read or bill is not in the request, so no
reservation could bound it: ``previous_response_id``, ``conversation``, ``prompt`` (a stored
prompt), ``item_reference`` input items, ``background`` (billed after the response), and
hosted tools (web/file search, code interpreter, ...: billed per call, beyond token prices).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gateway.errors import invalid
from gateway.serving.request.chat_request import (
    LITELLM_KEYS,
    MAX_OUTPUT_CAP,
    ChatRequest,
    body_model,
    check_drop_params,
    check_types,
    int_param,
    json_object,
    number_param,
    only_known,
)
from gateway.serving.request.chat_view import (
    chat_message,
    chat_view,
    forwarded_params,
    stream_flag,
    with_drop_params,
)

FORWARDED = frozenset({
    "include", "instructions", "max_output_tokens", "max_tool_calls", "metadata",
    "parallel_tool_calls", "prompt_cache_key", "prompt_cache_retention", "reasoning",
    "safety_identifier", "service_tier", "store", "stream_options", "temperature", "text",
    "tool_choice", "tools", "top_logprobs", "top_p", "truncation", "user",
})
GATEWAY_KEYS = frozenset({"model", "input", "stream", "tollgate"})
UNBOUNDED = {
    "previous_response_id": "send the conversation in 'input' instead",
    "conversation": "send the conversation in 'input' instead",
    "prompt": "send the prompt's text in 'instructions' / 'input' instead",
    "background": "a background response is billed after the request ends",
}
TOOL_TYPES = frozenset({"function", "custom"})  # billed by tokens alone
ROLES = frozenset({"user", "system", "developer", "assistant"})
TEXT_PARTS = frozenset({"input_text", "output_text", "text", "refusal"})
BOOLS = ("parallel_tool_calls", "store")
STRS = ("user", "safety_identifier", "service_tier", "prompt_cache_key",
        "prompt_cache_retention", "instructions")
OBJECTS = ("metadata", "reasoning", "text", "stream_options")


@dataclass(frozen=True)
class ResponsesRequest:
    model: str
    input: str | list
    stream: bool
    params: dict[str, Any]  # forwarded as they came (instructions among them)
    chat: ChatRequest  # the chat view: planning, budget and log only (module docstring)


def _text(part: dict) -> str:
    value = part.get("text", part.get("refusal"))
    return value if isinstance(value, str) else ""


def _chat_parts(part: Any, where: str) -> list[dict]:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise invalid(f"'{where}' must be an object with a 'type'", param=where)
    kind = part["type"]
    if kind in TEXT_PARTS:
        if not isinstance(part.get("text", part.get("refusal")), str):
            raise invalid(f"'{where}.text' must be a string", param=f"{where}.text")
        return [{"type": "text", "text": _text(part)}]
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id")
        if not isinstance(url, str) or not url:
            raise invalid(f"'{where}' needs an 'image_url' or a 'file_id'", param=where)
        return [{"type": "image_url", "image_url": {"url": url}}]
    if kind == "input_file":  # read by id or URL, or decoded: bounded only by max_file_tokens
        return [{"type": "file", "file": {k: v for k, v in part.items() if k != "type"}}]
    # anything else: its JSON bounds what the provider reads of it
    return [{"type": "text", "text": json.dumps(part)}]


def _chat_message(item: Any, where: str) -> dict:
    if not isinstance(item, dict):
        raise invalid(f"'{where}' must be an object", param=where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "item_reference":
        raise invalid(f"'{where}': item references read stored items the budget cannot bound;"
                      " send the items themselves", param=where, code="unsupported_parameter")
    if kind != "message":
        if not isinstance(kind, str):
            raise invalid(f"'{where}' must be a message (with 'role') or an item with a 'type'",
                          param=where)
        return {"role": "assistant", "content": json.dumps(item)}
    return chat_message(item, where, ROLES, _chat_parts, roles_named=f"one of {sorted(ROLES)}",
                        parts_named="parts")


def chat_messages(instructions: str | None, raw: Any) -> list[dict]:
    """The request as chat messages (module docstring); 400 on an invalid ``input``."""
    head = [{"role": "system", "content": instructions}] if instructions else []
    if isinstance(raw, str):
        if not raw:
            raise invalid("'input' must not be empty", param="input")
        return [*head, {"role": "user", "content": raw}]
    if not isinstance(raw, list) or not raw:
        raise invalid("'input' must be a non-empty string or array of input items",
                      param="input")
    return [*head, *(_chat_message(item, f"input[{i}]") for i, item in enumerate(raw))]


def _chat_tools(tools: Any) -> list[dict]:
    """Function tools in chat's shape (what the tokenizer counts); 400 on a hosted tool."""
    if not isinstance(tools, list):
        raise invalid("'tools' must be an array", param="tools")
    out = []
    for i, t in enumerate(tools):
        kind = t.get("type") if isinstance(t, dict) else None
        if kind not in TOOL_TYPES:
            raise invalid(f"'tools[{i}]': tool type {kind!r} is not served here: hosted tools "
                          "are billed per call beyond token prices, which a budget cannot "
                          "bound; function and custom tools are", param=f"tools[{i}].type",
                          code="unsupported_parameter")
        if not isinstance(t.get("name"), str):
            raise invalid(f"'tools[{i}].name' must be a string", param=f"tools[{i}].name")
        spec = {k: v for k, v in t.items() if k != "type"}
        out.append({"type": "function", "function": spec})
    return out


def _check(params: dict[str, Any]) -> None:
    check_types(params, BOOLS, STRS, OBJECTS)
    if "temperature" in params:
        number_param(params["temperature"], "temperature", 0.0, 2.0)
    if "top_p" in params:
        number_param(params["top_p"], "top_p", 0.0, 1.0)
    if "max_output_tokens" in params:
        int_param(params["max_output_tokens"], "max_output_tokens", 1, MAX_OUTPUT_CAP)
    for name, hi in (("top_logprobs", 20), ("max_tool_calls", 1 << 20)):
        if name in params:
            int_param(params[name], name, 0, hi)
    if "include" in params and not (isinstance(params["include"], list) and all(
            isinstance(x, str) for x in params["include"])):
        raise invalid("'include' must be an array of strings", param="include")
    if "tool_choice" in params and not isinstance(params["tool_choice"], (str, dict)):
        raise invalid("'tool_choice' must be a string or an object", param="tool_choice")
    if params.get("truncation", "disabled") not in ("auto", "disabled"):
        raise invalid("'truncation' must be 'auto' or 'disabled'", param="truncation")


def parse_responses_request(body: Any) -> ResponsesRequest:
    """The validated request and its chat view (400 naming the field otherwise)."""
    body = json_object(body)
    for key, instead in UNBOUNDED.items():
        if body.get(key) not in (None, False):
            raise invalid(f"'{key}' is not supported by this gateway: what it makes the "
                          f"provider read or bill cannot be budgeted; {instead}", param=key,
                          code="unsupported_parameter")
    only_known(body, FORWARDED | GATEWAY_KEYS | LITELLM_KEYS | set(UNBOUNDED))
    model = body_model(body)
    stream = stream_flag(body)
    params = forwarded_params(body, FORWARDED)
    _check(params)
    check_drop_params(body)
    messages = chat_messages(params.get("instructions"), body.get("input"))
    tools = _chat_tools(params["tools"]) if "tools" in params else None
    chat = chat_view(body, model, stream, params, messages=messages, system="instructions",
                     tools=tools, max_tokens=params.get("max_output_tokens"))
    return ResponsesRequest(model, body["input"], stream, with_drop_params(body, params), chat)
