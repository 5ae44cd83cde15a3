"""The fake upstream's ``/v1/responses`` (OpenAI's Responses API) and ``/v1/completions``
(legacy text completions), answered by the same backends, failure modes and word-count usage
as its chat completions (gateway/sandbox/upstream_handler.py dispatches here).

A Responses answer is one ``message`` output item with one ``output_text`` part; streamed,
the events OpenAI sends (``event:`` and ``data:`` lines, no ``[DONE]``): created,
in_progress, output_item.added, content_part.added, output_text.delta per word,
output_text.done, content_part.done, output_item.done, completed (with usage).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import TYPE_CHECKING, Any

from gateway.sandbox.upstream_wire import (
    capped_words,
    count_prompt_tokens,
    open_event_stream,
    send_json,
    text_of,
    word_count,
)

if TYPE_CHECKING:
    from gateway.sandbox.upstream_handler import UpstreamHandler


def chat_view(body: dict) -> dict:
    """The body as chat messages (instructions, then the input's messages): what a backend's
    reply function reads and what the prompt is counted on."""
    messages = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": str(body["instructions"])})
    raw = body.get("input")
    if isinstance(raw, str):
        messages.append({"role": "user", "content": raw})
    for item in raw if isinstance(raw, list) else ():
        if isinstance(item, dict) and "role" in item:
            messages.append({"role": item["role"], "content": text_of(item.get("content"))})
        elif isinstance(item, dict) and item.get("type") == "function_call_output":
            messages.append({"role": "tool", "content": str(item.get("output", ""))})
    return {**body, "messages": messages}


def answer_responses(h: UpstreamHandler, raw: bytes) -> None:
    """POST /v1/responses: a completed response (or its event stream) with usage."""
    call = h.answerable(raw)
    if call is None:
        return
    body, b = call.body, call.backend
    view = chat_view(body)
    cap = body.get("max_output_tokens")
    words, _ = capped_words(b.text_for(view), cap)
    text = " ".join(words)
    usage = {"input_tokens": count_prompt_tokens(view, h.up.count_tokens),
             "input_tokens_details": {"cached_tokens": 0},
             "output_tokens": (h.up.count_tokens or word_count)(text),
             "output_tokens_details": {"reasoning_tokens": 0}}
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    rid, mid = "resp_fake_" + uuid.uuid4().hex[:16], "msg_fake_" + uuid.uuid4().hex[:16]
    part = {"type": "output_text", "text": text, "annotations": []}
    item = {"id": mid, "type": "message", "status": "completed", "role": "assistant",
            "content": [part]}
    response = {
        "id": rid, "object": "response", "created_at": int(time.time()), "status": "completed",
        "error": None, "incomplete_details": None, "instructions": body.get("instructions"),
        "max_output_tokens": cap, "model": b.name, "output": [item],
        "parallel_tool_calls": True, "previous_response_id": None, "reasoning": {},
        "store": bool(body.get("store", True)), "temperature": body.get("temperature", 1.0),
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
        "top_p": body.get("top_p", 1.0), "truncation": "disabled", "usage": usage,
        "user": None, "metadata": body.get("metadata") or {},
    }
    if not call.stream:
        send_json(h, 200, response)
        return
    _stream_response(h, response, item, words)


def _stream_response(h: UpstreamHandler, response: dict, item: dict, words: list[str]) -> None:
    open_event_stream(h)
    seq = [0]

    def event(kind: str, **fields: Any) -> None:
        obj = {"type": kind, "sequence_number": seq[0], **fields}
        seq[0] += 1
        h.wfile.write(f"event: {kind}\ndata: {json.dumps(obj)}\n\n".encode())
        h.wfile.flush()

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    try:
        event("response.created", response=pending)
        event("response.in_progress", response=pending)
        event("response.output_item.added", output_index=0,
              item={**item, "status": "in_progress", "content": []})
        event("response.content_part.added", **where,
              part={"type": "output_text", "text": "", "annotations": []})
        for i, w in enumerate(words):
            if i and h.up.backends[response["model"]].chunk_delay_s and h.wait_watching(
                    h.up.backends[response["model"]].chunk_delay_s):
                return
            event("response.output_text.delta", **where, delta=w if i == 0 else " " + w)
        text = item["content"][0]["text"]
        event("response.output_text.done", **where, text=text)
        event("response.content_part.done", **where, part=item["content"][0])
        event("response.output_item.done", output_index=0, item=item)
        event("response.completed", response=response)
    except (BrokenPipeError, ConnectionResetError):
        return


def answer_completions(h: UpstreamHandler, raw: bytes) -> None:
    """POST /v1/completions: OpenAI's legacy text completion (or its stream), usage in words."""
    call = h.answerable(raw)
    if call is None:
        return
    body, b = call.body, call.backend
    prompts = body.get("prompt")
    if isinstance(prompts, str) or (isinstance(prompts, list) and prompts
                                    and all(isinstance(t, int) for t in prompts)):
        prompts = [prompts]
    count = h.up.count_tokens or word_count
    used = sum(len(p) if isinstance(p, list) else count(str(p)) for p in prompts or [""])
    n = int(body.get("n") or 1)
    words = b.text_for({"messages": [{"role": "user", "content": str(p)}
                                     for p in prompts or [""]]}).split()
    cap = body.get("max_tokens")
    if isinstance(cap, int):
        words = words[:cap]
    text = " ".join(words)
    choices = [{"text": text, "index": i, "logprobs": None,
                "finish_reason": "length" if isinstance(cap, int) and cap <= len(words)
                else "stop"} for i in range(n * len(prompts or [""]))]
    completion = count(text) * len(choices)
    answer = {"id": "cmpl-fake-" + uuid.uuid4().hex[:16], "object": "text_completion",
              "created": int(time.time()), "model": b.name, "choices": choices,
              "usage": {"prompt_tokens": max(used, 1), "completion_tokens": completion,
                        "total_tokens": max(used, 1) + completion}}
    if call.stream:
        _stream_completion(h, answer, body)
    else:
        send_json(h, 200, answer)


def _stream_completion(h: UpstreamHandler, answer: dict, body: dict) -> None:
    """A text completion as OpenAI streams it: per choice a chunk per word, then a chunk with
    its finish_reason; with ``stream_options.include_usage`` a last chunk with no choices and
    the usage; then ``data: [DONE]``."""
    open_event_stream(h)
    delay = h.up.backends[answer["model"]].chunk_delay_s

    def chunk(choices: list[dict], usage: dict | None = None) -> None:
        obj = {k: answer[k] for k in ("id", "object", "created", "model")}
        obj["choices"] = choices
        if usage is not None:
            obj["usage"] = usage
        h.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        h.wfile.flush()

    try:
        for c in answer["choices"]:
            for i, w in enumerate(c["text"].split()):
                if i and delay and h.wait_watching(delay):
                    return
                chunk([{"text": w if i == 0 else " " + w, "index": c["index"],
                        "logprobs": None, "finish_reason": None}])
            chunk([{"text": "", "index": c["index"], "logprobs": None,
                    "finish_reason": c["finish_reason"]}])
        if (body.get("stream_options") or {}).get("include_usage"):
            chunk([], usage=answer["usage"])
        h.wfile.write(b"data: [DONE]\n\n")
        h.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        return
