"""Bad input refused before anything is reserved, forwarded or half-written.

- The body's size and deadline are checked before any of this, by ``BodyLimit``
  (gateway/serving/body_limit.py).
- ``load_json``: the body parsed as strict JSON (orjson): ``NaN``/``Infinity`` and numbers
  that overflow to infinity are refused (they fail later, in the upstream call, as the
  gateway's own error), and so is nesting deeper than ``MAX_DEPTH`` (Python's recursive
  walkers, litellm's among them, would hit ``RecursionError``, a 500). Run it in a worker
  thread: a body of several MB still takes milliseconds to parse.
  Strings that cannot be encoded as UTF-8 (lone surrogates written as JSON ``\\ud800``
  escapes) would fail later, at the upstream call; refused here with 400 too.
- ``check_counts``: at most ``max_messages`` messages (Responses: ``input`` items) and
  ``max_content_parts`` content parts in all, checked before anything walks them (400
  ``array_above_max_length``, OpenAI's code). litellm walks every message and part on the
  event loop before it sends (``_truncate_base64_in_value``, ``_remove_thought_signatures_
  from_messages``): 40,000 messages held the loop ~0.6 s, 2,048 take ~3 ms. 2,048 is
  OpenAI's own bound on ``messages`` (Azure OpenAI's error "``$.messages`` exceeds the maximum
  length of 2048 items", portkey.ai/error-library/length-limit-error-10026), enough for
  real agents; both are ``reliability:`` settings.
- ``check_tools``: at most 128 tools or functions (OpenAI's bound) and
  ``max_tool_values`` JSON values in tools, functions and response schemas (litellm
  sanitises each schema on the event loop: 15,000 tools held it ~1 s, issue 35).
- ``fit_candidates``: a request with file parts goes only to backends declaring
  ``max_file_tokens`` (issue 35: a file read by id passed through and was billed 100k
  tokens on a reservation of its id's bytes); a backend whose context window (``max_input_tokens``) cannot hold the
  prompt, or whose output
  cap is below the client's ``max_tokens``, is dropped from the ranked candidates; when none
  is left the request is a 400 naming the problem (``context_length_exceeded`` on
  ``messages``, or ``max_tokens`` too large), as OpenAI answers for one model.
- ``CHAT_COMPLETIONS_OPENAPI``: the request body schema of ``POST /v1/chat/completions`` in
  the app's OpenAPI document (the handler reads the raw body itself, so FastAPI cannot
  derive it); the schemathesis fuzz in tests/gateway/reliability generates requests from it.
"""

from __future__ import annotations

import json
import json.scanner
import math
import re
from typing import Any

import anyio
import anyio.to_thread
import orjson
from starlette.requests import Request

from gateway.errors import GatewayError, invalid

MAX_DEPTH = 32  # objects and arrays nested inside each other, the body itself counting 1


NON_NUMBERS = re.compile(rb"\b(?:NaN|-?Infinity)\b")


# A body with more objects than this is parsed by the stdlib's Python scanner, which gives the
# GIL back every switch interval: orjson holds it for a whole parse (a 4.7 MB body of 15,000
# tools: 330-550 ms on this loaded machine, the event loop held throughout).
MANY_OBJECTS = 20_000


def _loads_fast(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        reason = str(e)
        if "depth limit" in reason:
            raise too_deep() from e
        if "surrogate" in reason or "UTF-8" in reason:
            reason += " (the request body contains text that is not valid UTF-8)"
        elif NON_NUMBERS.search(raw):
            reason += " (NaN and Infinity are not JSON numbers)"
        raise invalid(f"the request body is not valid JSON: {reason}") from e


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _loads_yielding(raw: bytes) -> Any:
    """``raw`` parsed by Python's own JSON scanner (slower, never holding the GIL for long);
    the same refusals as ``_loads_fast`` (the walk after it checks strings and numbers)."""
    decoder = json.JSONDecoder(parse_constant=_not_a_number)
    decoder.scan_once = json.scanner.py_make_scanner(decoder)  # type: ignore[attr-defined]
    try:
        return decoder.decode(raw.decode("utf-8"))
    except RecursionError as e:
        raise too_deep() from e
    except UnicodeDecodeError as e:
        raise invalid("the request body is not valid JSON: the request body contains text "
                      "that is not valid UTF-8") from e
    except ValueError as e:  # JSONDecodeError, NaN / Infinity
        raise invalid(f"the request body is not valid JSON: {e}") from e


def load_json(raw: bytes, max_messages: int | None = None,
              max_content_parts: int | None = None, max_tool_values: int | None = None) -> Any:
    """The body as JSON, or a 400 naming why not (see the module docstring); with limits,
    its counts are checked (``check_counts``) between the parse and the walk of every value,
    which is the costly part (~0.2 s for 36,000 messages, with the GIL contended)."""
    if len(raw) > INLINE_JSON_BYTES and raw.count(b"{") > MANY_OBJECTS:
        body = _loads_yielding(raw)
    else:
        body = _loads_fast(raw)
    try:
        if max_messages is not None and max_content_parts is not None:
            check_counts(body, max_messages, max_content_parts)
        if max_tool_values is not None:
            check_tools(body, max_tool_values)
        check_shape(body)
    except GatewayError as e:
        # freed here, in the worker thread: the checks' frames in the traceback hold the
        # body, and the error ends in a reference cycle on its way out, so a refused
        # 15,000-tool body (~80,000 objects) waited for a full collection (heap_freeze.py)
        del body
        raise e.with_traceback(None) from None
    return body


# Bodies up to this size are parsed on the event loop (tens of microseconds: less than a
# thread hop costs); larger ones in a worker thread.
INLINE_JSON_BYTES = 64 * 1024


async def json_body(request: Request) -> Any:
    """The request's body as strict JSON (``load_json``) within the app's message counts
    (``check_counts``); a body over ``INLINE_JSON_BYTES`` is parsed in a worker thread
    (several MB would hold the event loop for tens of ms; the parse itself holds the GIL, but
    the walk after it gives it back between values)."""
    raw = await request.body()
    limits = request.app.state.ctx.reliability.settings
    counts = (limits.max_messages, limits.max_content_parts,  # checked before any walk
              limits.max_tool_values)
    if len(raw) <= INLINE_JSON_BYTES:
        return load_json(raw, *counts)
    return await anyio.to_thread.run_sync(load_json, raw, *counts)


def too_deep() -> GatewayError:
    return invalid(f"the request body is nested deeper than {MAX_DEPTH} levels")


def check_shape(body: Any) -> None:
    """400 for nesting deeper than ``MAX_DEPTH``, a non-finite number or a string that is
    not UTF-8. An iterative walk, which gives the GIL back between values
    (a ``json.dumps`` of a multi-MB body would hold it throughout)."""
    stack: list[tuple[Any, int]] = [(body, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            _check_string(value)
        elif isinstance(value, float) and not math.isfinite(value):
            raise invalid("the request body contains a number out of range (not finite)")
        elif isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise too_deep()
            if isinstance(value, dict):
                stack.extend((k, depth) for k in value)
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items)


def _check_string(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:
            raise invalid("the request body contains text that is not valid UTF-8 "
                          f"(e.g. an unpaired surrogate): {e.reason}") from e


def check_counts(body: Any, max_messages: int, max_content_parts: int) -> None:
    """400 when a chat body's ``messages`` (a Responses body's ``input``) has more than
    ``max_messages`` items or more than ``max_content_parts`` content parts in all
    (``count_parts``: nested tool results and system blocks of /v1/messages included); the
    parts are counted only once the message count is known to be within bounds."""
    if not isinstance(body, dict):
        return
    name = "messages" if "messages" in body else "input"
    items = body.get(name)
    if not isinstance(items, list):
        return
    if len(items) > max_messages:
        raise invalid(f"Invalid '{name}': array too long. Expected an array with maximum "
                      f"length {max_messages}, but got an array with length {len(items)} "
                      "instead.", param=name, code="array_above_max_length")
    parts = count_parts(items, body.get("system"), max_content_parts)
    if parts > max_content_parts:
        raise invalid(f"Invalid '{name}': {parts} content parts in all, more than the "
                      f"maximum of {max_content_parts}.", param=name,
                      code="array_above_max_length")


def count_parts(items: list, system: Any, limit: int) -> int:
    """The content parts of ``items`` in all, each block nested in a block's own ``content``
    array counted too (Anthropic's ``tool_result`` holds blocks, and ``/v1/messages``
    translates every level of them), and the blocks of an array ``system`` (Anthropic's);
    the count stops once past ``limit``, so a refused body costs at most ``limit`` steps."""
    stack = [m["content"] for m in items
             if isinstance(m, dict) and isinstance(m.get("content"), list)]
    if isinstance(system, list):
        stack.append(system)
    parts = 0
    while stack and parts <= limit:
        blocks = stack.pop()
        parts += len(blocks)
        if parts > limit:
            break
        stack.extend(b["content"] for b in blocks
                     if isinstance(b, dict) and isinstance(b.get("content"), list))
    return parts


def unbounded_files(files: int, names: list[str]) -> GatewayError:
    return invalid(
        f"This request has {files} file part(s) (chat 'file' content parts, Responses "
        "'input_file' items). The provider reads a file by its id or URL, or decodes it, so "
        "the request's bytes do not bound what it bills, and none of the models that could "
        f"answer ({', '.join(names)}) declares a bound for files. Send the document's text "
        "instead; an operator can allow files on a model by setting its "
        "model_info.max_file_tokens (the most prompt tokens one file may count).",
        param="messages", code="unbounded_file_input")


MAX_TOOLS = 128  # OpenAI's bound on ``tools`` ("A max of 128 functions are supported.")
TOOL_KEYS = ("tools", "functions", "response_format", "text")  # text: Responses' format


def check_tools(body: Any, max_values: int) -> None:
    """400 for more than ``MAX_TOOLS`` tools (or functions), or more than ``max_values`` JSON
    values in the tools, functions and response schema together: litellm walks every schema
    on the event loop before it sends. The count stops at the bound."""
    if not isinstance(body, dict):
        return
    for name in ("tools", "functions"):
        items = body.get(name)
        if isinstance(items, list) and len(items) > MAX_TOOLS:
            raise invalid(f"Invalid '{name}': array too long. Expected an array with maximum "
                          f"length {MAX_TOOLS}, but got an array with length {len(items)} "
                          "instead.", param=name, code="array_above_max_length")
    stack, values = [body.get(k) for k in TOOL_KEYS if body.get(k) is not None], 0
    while stack:
        v = stack.pop()
        values += 1
        if values > max_values:
            raise invalid(f"The tools, functions and response_format schema hold more than "
                          f"{max_values} JSON values in all (reliability.max_tool_values).",
                          param="tools", code="array_above_max_length")
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def fit_candidates(settings: Any, candidates: list[str], prompt_tokens: int | None,
                   max_tokens: int | None, files: int = 0) -> list[str]:
    """The candidates whose context window and output cap fit this request, in order; with
    ``files`` file parts, only those declaring ``max_file_tokens`` (400 when none does)."""
    backends = [settings.backend(n) for n in candidates]
    if files:
        bounded = [b for b in backends if b.model_info.max_file_tokens is not None]
        if not bounded:
            raise unbounded_files(files, candidates)
        backends = bounded
    n_prompt = int(prompt_tokens or 0)
    fit_ctx = [b for b in backends
               if b.model_info.max_input_tokens is None
               or n_prompt <= b.model_info.max_input_tokens]
    if not fit_ctx:
        window = max(int(b.model_info.max_input_tokens or 0) for b in backends)
        raise invalid(
            f"This request has {n_prompt} prompt tokens, more than the largest context window "
            f"among the candidate models ({window} input tokens). Please reduce the length of "
            "the messages.", param="messages", code="context_length_exceeded")
    if max_tokens is not None:
        fit_out = [b for b in fit_ctx if max_tokens <= b.model_info.max_output_tokens]
        if not fit_out:
            most = max(b.model_info.max_output_tokens for b in fit_ctx)
            raise invalid(
                f"max_tokens is too large: {max_tokens}. The candidate models support at most "
                f"{most} completion tokens.", param="max_tokens", code="invalid_value")
        fit_ctx = fit_out
    return [b.model_name for b in fit_ctx]


_CONTENT = {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "object"}},
                      {"type": "null"}]}
CHAT_COMPLETIONS_OPENAPI: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {"application/json": {"schema": {
            "type": "object",
            "required": ["model", "messages"],
            "properties": {
                "model": {"type": "string", "examples": ["auto"]},
                "messages": {"type": "array", "minItems": 1, "items": {
                    "type": "object",
                    "required": ["role"],
                    "properties": {
                        "role": {"type": "string", "enum": ["system", "developer", "user",
                                                            "assistant", "tool"]},
                        "content": _CONTENT,
                        "name": {"type": "string"},
                        "tool_call_id": {"type": "string"},
                    },
                }},
                "stream": {"type": "boolean"},
                "stream_options": {"type": "object",
                                   "properties": {"include_usage": {"type": "boolean"}}},
                "max_tokens": {"type": "integer", "minimum": 1},
                "max_completion_tokens": {"type": "integer", "minimum": 1},
                "temperature": {"type": "number", "minimum": 0, "maximum": 2},
                "top_p": {"type": "number", "minimum": 0, "maximum": 1},
                "n": {"type": "integer", "minimum": 1},
                "stop": {"anyOf": [{"type": "string"},
                                   {"type": "array", "items": {"type": "string"}}]},
                "seed": {"type": "integer"},
                "user": {"type": "string"},
                "tools": {"type": "array", "items": {"type": "object"}},
                "tool_choice": {"anyOf": [{"type": "string"}, {"type": "object"}]},
                "response_format": {"type": "object"},
                "tollgate": {"type": "object", "properties": {
                    "cost_weight": {"type": "number", "minimum": 0},
                    "max_cost_usd": {"type": "number", "minimum": 0},
                    "allowed_models": {"type": "array", "items": {"type": "string"}},
                }},
            },
        }}},
    },
    "responses": {
        "200": {"description": "A chat completion (or an SSE stream of chunks)."},
        "400": {"description": "Invalid request (OpenAI error body)."},
        "401": {"description": "Missing or wrong API key."},
        "404": {"description": "Unknown model."},
        "413": {"description": "Body too large."},
        "429": {"description": "Budget exceeded or rate limited (Retry-After)."},
        "502": {"description": "Upstream failure."},
        "503": {"description": "Upstream or database unavailable."},
        "504": {"description": "Upstream timeout."},
    },
}

