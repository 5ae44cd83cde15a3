"""What the bodies forwarded in another API's shape (Anthropic's Messages:
gateway/serving/messages/messages_request.py; OpenAI's Responses: responses_request.py) share on
their way to a chat view: the ``stream`` flag, the parameters forwarded as they came, a message's
translation, and the ``ChatRequest`` that planning, the budget and the log work on (never
sent). One place, so the two endpoints read their bodies alike and a fix to one is a fix to
both.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from gateway.errors import invalid
from gateway.serving.request.chat_request import ChatRequest, body_fallbacks, tollgate_options


def stream_flag(body: dict[str, Any]) -> bool:
    """The body's ``stream``: absent, null or false is False; anything but a boolean is a 400."""
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean", param="stream")
    return stream


def forwarded_params(body: dict[str, Any], names: Collection[str]) -> dict[str, Any]:
    """The body's parameters among ``names`` that are not null, as they came."""
    return {k: v for k, v in body.items() if k in names and v is not None}


def chat_message(m: dict[str, Any], where: str, roles: Collection[str],
                 parts: Callable[[Any, str], list[dict]], *, roles_named: str,
                 parts_named: str) -> dict:
    """One message of ``roles`` as chat: a string content as it is, an array's each item as
    ``parts`` translates it (400 naming the field otherwise, in the endpoint's own words)."""
    role = m.get("role")
    if role not in roles:
        raise invalid(f"'{where}.role' must be {roles_named}, got {role!r}",
                      param=f"{where}.role")
    content = m.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise invalid(f"'{where}.content' must be a string or an array of {parts_named}",
                      param=f"{where}.content")
    return {"role": role, "content": [p for j, b in enumerate(content)
                                      for p in parts(b, f"{where}.content[{j}]")]}


def chat_view(body: dict[str, Any], model: str, stream: bool, params: dict[str, Any], *,
              messages: list[dict], system: str, tools: list[dict] | None,
              max_tokens: int | None) -> ChatRequest:
    """The request as chat: ``messages`` (the ``system`` parameter's text among them), the
    other forwarded parameters with ``tools`` in chat's function shape, the output cap, and
    Tollgate's options and LiteLLM's fallbacks from the body (400 when invalid)."""
    view = {k: v for k, v in params.items() if k not in (system, "tools")}
    if tools is not None:
        view["tools"] = tools
    return ChatRequest(model=model, messages=messages, stream=stream, include_usage=True,
                       params=view, max_tokens=max_tokens,
                       options=tollgate_options(body.get("tollgate")),
                       fallbacks=body_fallbacks(body.get("fallbacks")))


def with_drop_params(body: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    """The forwarded parameters, with LiteLLM's ``drop_params`` when the body sets it true."""
    return {**params, "drop_params": True} if body.get("drop_params") else params
