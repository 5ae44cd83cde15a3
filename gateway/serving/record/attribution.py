"""Who a request is for and which conversation it belongs to: its ``Attribution``.

Read once, when the body is parsed, and written on the request's log row (issue 47, item 5)
so spend is known per key, per developer and per session, and so a session's later turns can
be kept on the backend that holds its prompt cache (gateway/serving/plan/session_affinity.py).

- user: the calling key's LiteLLM ``user_id`` (the developer), never a body field: a client
  cannot book its spend to someone else.
- session: Claude Code's ``x-claude-code-session-id`` header (Claude Code's gateway protocol,
  https://code.claude.com/docs/en/llm-gateway-protocol, "Request headers"), LiteLLM's
  ``x-litellm-session-id`` header or ``metadata.session_id`` / ``litellm_metadata.session_id``
  in the body; the first given wins.
- tags: LiteLLM's ``tags`` (top level, in ``metadata`` or ``litellm_metadata``, or the
  ``x-litellm-tags`` header, comma-separated).

Everything here is the client's own text, so it is bounded: a session id of at most
``MAX_ID_CHARS`` printable characters, at most ``MAX_TAGS`` tags of at most ``MAX_TAG_CHARS``
each; anything else is a 400 naming the field (a tenant can only mislabel its own rows).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.errors import invalid

SESSION_HEADERS = ("x-claude-code-session-id", "x-litellm-session-id")
TAGS_HEADER = "x-litellm-tags"
MAX_ID_CHARS = 200  # request_logs.session_id is String(200)
MAX_TAGS = 32
MAX_TAG_CHARS = 128


@dataclass(frozen=True)
class Attribution:
    user_id: str | None = None
    session_id: str | None = None
    tags: tuple[str, ...] = ()

    def row_fields(self) -> dict[str, Any]:
        """The log row's columns (migration 0008)."""
        return {"user_id": self.user_id, "session_id": self.session_id,
                "tags": list(self.tags) or None}


NONE = Attribution()


def _printable(value: str) -> bool:
    return value.isprintable()


def _session(value: Any, where: str) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str) or len(value) > MAX_ID_CHARS or not _printable(value):
        raise invalid(f"{where} must be a string of at most {MAX_ID_CHARS} printable "
                      "characters", param=where)
    return value


def _tags(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_TAGS or not all(
            isinstance(t, str) and 0 < len(t) <= MAX_TAG_CHARS and _printable(t)
            for t in value):
        raise invalid(f"{where} must be a list of at most {MAX_TAGS} strings of 1 to "
                      f"{MAX_TAG_CHARS} printable characters", param=where)
    return tuple(value)


def _object(body: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = body.get(name)
    return value if isinstance(value, Mapping) else {}


def attribution(user_id: str | None, headers: Mapping[str, str], body: Any) -> Attribution:
    """The request's attribution from its key's user, its headers and its JSON body (400 for
    a session id or tags out of bounds)."""
    body = body if isinstance(body, Mapping) else {}
    meta, lmeta = _object(body, "metadata"), _object(body, "litellm_metadata")
    session = None
    for name in SESSION_HEADERS:
        if session is None:
            session = _session(headers.get(name), name)
    for where, source in (("metadata.session_id", meta),
                          ("litellm_metadata.session_id", lmeta)):
        if session is None:
            session = _session(source.get("session_id"), where)
    tags: tuple[str, ...] = ()
    raw_header = headers.get(TAGS_HEADER)
    if raw_header:
        tags = _tags([t.strip() for t in raw_header.split(",") if t.strip()], TAGS_HEADER)
    for where, value in (("tags", body.get("tags")), ("metadata.tags", meta.get("tags")),
                         ("litellm_metadata.tags", lmeta.get("tags"))):
        if not tags:
            tags = _tags(value, where)
    return Attribution(user_id=user_id, session_id=session, tags=tags)
