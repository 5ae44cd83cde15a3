"""The body of ``POST /v1/messages`` (Anthropic's Messages API), validated, and its chat view.

What is forwarded is the body as it came (Anthropic's parameters, each checked for its type);
Tollgate's options come in ``tollgate`` and LiteLLM's ``drop_params`` / ``fallbacks`` as on
chat completions. Any other key is a 400 (as Anthropic answers "Extra inputs are not
permitted"), which also keeps a body from reaching litellm's keyword arguments (``api_base``
...). ``max_tokens`` is required, as Anthropic requires it: it is the output cap the budget
reserves (extended thinking's ``budget_tokens`` counts within it, so the bound holds).

Planning, the budget and the request log work on a ``ChatRequest``
(gateway/serving/request/chat_request.py), never sent: ``system`` a system message, each message its
role's message with text blocks as text parts, images as image parts (so the budget bounds each as
``max_image_tokens``), and any other block (tool use, tool result, thinking, a text
document ...) as its JSON, which bounds its tokens by its bytes; tools in chat's function
shape. So ``model="auto"`` is routed on the system/user text exactly as chat is.

Refused (400), because what they make the provider read or bill is not in the request, so no
reservation could bound it: blocks whose source is read by reference (a ``file_id``) or a PDF
document (billed per page, as text and as an image of each page: its bytes do not bound it),
and Anthropic-defined or server tools (web search and fetch, code execution, bash, text
editor, computer use ...: billed per call, or with a system prompt of their own added to the
input); ``container`` and ``mcp_servers``, for the same reason.

``context_management`` (Claude Code sends it) is accepted when each edit only clears content
before the prompt reaches the model (``clear_tool_uses_*``, ``clear_thinking_*``: "Applied
before the prompt reaches Claude", https://platform.claude.com/en/docs/build-with-claude/
context-editing), so the reservation over the whole request still bounds it; an edit of any
other type (server-side compaction writes a summary with a model call of its own) is refused,
naming it. It is forwarded to Anthropic-wire backends only (``ANTHROPIC_WIRE``).
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
)
from gateway.serving.request.chat_view import (
    chat_message,
    chat_view,
    forwarded_params,
    stream_flag,
    with_drop_params,
)

FORWARDED = frozenset({
    "context_management", "metadata", "stop_sequences", "system", "temperature", "thinking",
    "tool_choice", "tools", "top_k", "top_p",
})
# context_management edits that only clear content before the model reads it (module docstring)
CLEARING_EDITS = ("clear_tool_uses_", "clear_thinking_")
GATEWAY_KEYS = frozenset({"model", "messages", "max_tokens", "stream", "tollgate"})
UNBOUNDED = {
    "container": "a code execution container is billed by the hour",
    "mcp_servers": "remote MCP servers' tool calls add input the request does not hold",
}
ROLES = frozenset({"user", "assistant"})
IMAGE_SOURCES = frozenset({"base64", "url"})


@dataclass(frozen=True)
class MessagesRequest:
    model: str
    messages: list[dict]
    stream: bool
    params: dict[str, Any]  # forwarded as they came (system among them), but max_tokens
    chat: ChatRequest  # the chat view: planning, budget and log only (module docstring)


def _unbounded(where: str, why: str) -> Exception:
    return invalid(f"'{where}' is not supported by this gateway: {why}, which a budget cannot "
                   "bound from the request", param=where, code="unsupported_parameter")


def _image(block: dict, where: str) -> dict:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind not in IMAGE_SOURCES:
        if kind == "file":
            raise _unbounded(f"{where}.source", "a file_id is read by reference")
        raise invalid(f"'{where}.source' must be a base64 or url image source",
                      param=f"{where}.source")
    url = source.get("url") if kind == "url" else \
        f"data:{source.get('media_type')};base64,{source.get('data')}"
    if not isinstance(url, str) or not url:
        raise invalid(f"'{where}.source' has no image", param=f"{where}.source")
    return {"type": "image_url", "image_url": {"url": url}}


def _document(block: dict, where: str) -> dict:
    source = block.get("source")
    kind = source.get("type") if isinstance(source, dict) else None
    if kind == "text" and isinstance(source.get("data"), str):
        return {"type": "text", "text": source["data"]}
    if kind == "content" and isinstance(source.get("content"), (str, list)):
        return {"type": "text", "text": json.dumps(source["content"])}
    raise _unbounded(f"{where}.source", f"a document of source type {kind!r} is billed per "
                     "page (a PDF) or read by reference; send its text (source type 'text')")


def _part(block: Any, where: str) -> list[dict]:
    """The chat parts of one content block (module docstring)."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise invalid(f"'{where}' must be an object with a 'type'", param=where)
    kind = block["type"]
    if kind == "text":
        if not isinstance(block.get("text"), str):
            raise invalid(f"'{where}.text' must be a string", param=f"{where}.text")
        return [{"type": "text", "text": block["text"]}]
    if kind == "image":
        return [_image(block, where)]
    if kind == "document":
        return [_document(block, where)]
    if kind == "tool_result" and isinstance(block.get("content"), list):
        parts = [p for j, b in enumerate(block["content"])
                 for p in _part(b, f"{where}.content[{j}]")]
        rest = {k: v for k, v in block.items() if k != "content"}
        return [{"type": "text", "text": json.dumps(rest)}, *parts]
    return [{"type": "text", "text": json.dumps(block)}]


def _chat_message(m: Any, where: str) -> dict:
    if not isinstance(m, dict):
        raise invalid(f"'{where}' must be an object", param=where)
    return chat_message(m, where, ROLES, _part, roles_named="'user' or 'assistant'",
                        parts_named="content blocks")


def _system(system: Any) -> list[dict]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"role": "system", "content": system}] if system else []
    if not isinstance(system, list) or not all(
            isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
            for b in system):
        raise invalid("'system' must be a string or an array of text blocks", param="system")
    return [{"role": "system", "content": "\n".join(b["text"] for b in system)}]


def chat_messages(system: Any, raw: Any) -> list[dict]:
    """The request as chat messages (module docstring); 400 on invalid ``messages``."""
    if not isinstance(raw, list) or not raw:
        raise invalid("'messages' must be a non-empty array", param="messages")
    return [*_system(system), *(_chat_message(m, f"messages[{i}]") for i, m in enumerate(raw))]


def _chat_tools(tools: Any) -> list[dict]:
    """Client tools in chat's function shape (what the tokenizer counts); 400 on a typed one."""
    if not isinstance(tools, list):
        raise invalid("'tools' must be an array", param="tools")
    out = []
    for i, t in enumerate(tools):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise invalid(f"'tools[{i}]' must be an object with a string 'name'",
                          param=f"tools[{i}]")
        if t.get("type", "custom") != "custom":
            raise _unbounded(f"tools[{i}].type", f"tool type {t['type']!r} is billed per call "
                             "or adds a system prompt of its own; client tools (no 'type', or "
                             "'custom') are served")
        out.append({"type": "function", "function": {
            "name": t["name"], "description": t.get("description", ""),
            "parameters": t.get("input_schema", {})}})
    return out


def _context_management(value: Any) -> None:
    """400 unless every edit only clears content (module docstring), naming the one that
    does not."""
    edits = value.get("edits") if isinstance(value, dict) else None
    if not isinstance(edits, list) or set(value) - {"edits"}:
        raise invalid("'context_management' must be an object with an 'edits' array",
                      param="context_management")
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if not isinstance(kind, str):
            raise invalid(f"'context_management.edits[{i}]' must be an object with a 'type'",
                          param=f"context_management.edits[{i}]")
        if not kind.startswith(CLEARING_EDITS):
            raise _unbounded(f"context_management.edits[{i}].type", f"edit type {kind!r} is "
                             "not a clearing edit (clear_tool_uses_*, clear_thinking_*): it may "
                             "call a model of its own (compaction writes a summary)")


def _check(params: dict[str, Any]) -> None:
    check_types(params, (), (), ("context_management", "metadata", "thinking", "tool_choice"))
    if "context_management" in params:
        _context_management(params["context_management"])
    for name in ("temperature", "top_p"):
        if name in params:
            number_param(params[name], name, 0.0, 1.0)
    if "top_k" in params:
        int_param(params["top_k"], "top_k", 0, 1 << 31)
    meta = params.get("metadata")
    if meta is not None and (set(meta) - {"user_id"} or not isinstance(
            meta.get("user_id", ""), str)):
        raise invalid("'metadata' may hold only 'user_id' (a string), as Anthropic defines it",
                      param="metadata")
    stops = params.get("stop_sequences")
    if stops is not None and not (isinstance(stops, list)
                                  and all(isinstance(s, str) for s in stops)):
        raise invalid("'stop_sequences' must be an array of strings", param="stop_sequences")


def parse_messages_request(body: Any) -> MessagesRequest:
    """The validated request and its chat view (400 naming the field otherwise)."""
    body = json_object(body)
    for key, why in UNBOUNDED.items():
        if body.get(key) is not None:
            raise _unbounded(key, why)
    unknown = sorted(set(body) - FORWARDED - GATEWAY_KEYS - LITELLM_KEYS)
    if unknown:
        raise invalid(f"{unknown[0]}: Extra inputs are not permitted", param=unknown[0])
    model = body_model(body)
    if "max_tokens" not in body:
        raise invalid("max_tokens: Field required", param="max_tokens")
    max_tokens = int_param(body["max_tokens"], "max_tokens", 1, MAX_OUTPUT_CAP)
    stream = stream_flag(body)
    params = forwarded_params(body, FORWARDED)
    _check(params)
    check_drop_params(body)
    messages = chat_messages(params.get("system"), body.get("messages"))
    tools = _chat_tools(params["tools"]) if "tools" in params else None
    chat = chat_view(body, model, stream, params, messages=messages, system="system",
                     tools=tools, max_tokens=max_tokens)
    return MessagesRequest(model, body["messages"], stream, with_drop_params(body, params), chat)
