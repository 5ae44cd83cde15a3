"""The fake upstream's ``/v1/messages``: Anthropic's Messages API on the wire, answered by the
same backends, failure modes and word-count usage as its chat completions
(gateway/sandbox/upstream_handler.py dispatches here). A gateway backend reaches it as
``litellm_params.model: anthropic/NAME`` with ``api_base`` the upstream's root.

The answer is one ``text`` content block, cut to ``max_tokens`` words (``stop_reason``
``max_tokens`` then, else ``end_turn``); streamed, the events Anthropic sends: message_start
(with the input usage), content_block_start, ping, a content_block_delta per word,
content_block_stop, message_delta (stop reason, output usage), message_stop. The words of
system blocks marked ``cache_control`` are reported as ``cache_read_input_tokens``.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from gateway.sandbox.upstream_wire import (
    StreamEnd,
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
    """The body as chat messages (system, then the messages' text): what a backend's reply
    function reads and what the prompt is counted on."""
    messages = [{"role": "system", "content": text_of(body["system"])}] \
        if body.get("system") else []
    messages += [{"role": m.get("role"), "content": text_of(m.get("content"))}
                 for m in body.get("messages") or [] if isinstance(m, dict)]
    return {**body, "messages": messages}


def _cached_system_tokens(body: dict) -> int:
    """Words of the system blocks that carry ``cache_control`` (billed as cache reads)."""
    system = body.get("system")
    return sum(word_count(str(b.get("text", ""))) for b in system
               if isinstance(b, dict) and b.get("cache_control")) \
        if isinstance(system, list) else 0


def answer_messages(h: UpstreamHandler, raw: bytes) -> None:
    """POST /v1/messages: a message (or its event stream) with usage."""
    call = h.answerable(raw)
    if call is None:
        return
    body, b = call.body, call.backend
    view = chat_view(body)
    words, cut = capped_words(b.text_for(view), body.get("max_tokens"))
    text = " ".join(words)
    usage = {"input_tokens": count_prompt_tokens(view, h.up.count_tokens),
             "output_tokens": (h.up.count_tokens or word_count)(text)}
    cached = _cached_system_tokens(body)
    if cached:  # a system block marked for caching: read from the cache, as Anthropic bills
        usage.update(input_tokens=max(1, usage["input_tokens"] - cached),
                     cache_read_input_tokens=cached, cache_creation_input_tokens=0)
    message = {"id": "msg_fake_" + uuid.uuid4().hex[:16], "type": "message",
               "role": "assistant", "model": b.name,
               "content": [{"type": "text", "text": text}],
               "stop_reason": "max_tokens" if cut else "end_turn", "stop_sequence": None,
               "usage": usage}
    if call.stream:
        _stream_message(h, message, words, call.mode)
    else:
        send_json(h, 200, message)


def _stream_message(h: UpstreamHandler, message: dict, words: list[str], mode: str) -> None:
    """Anthropic's events, word by word; ``StreamEnd`` records how many words were sent
    (what the provider generated) and how the stream ended ("end_mid_stream": cleanly, half
    way, with no final usage)."""
    open_event_stream(h)
    delay = h.up.backends[message["model"]].chunk_delay_s

    split = h.up.backends[message["model"]].split_frames

    def event(kind: str, **fields: Any) -> None:
        data = f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, ensure_ascii=False)}"
        raw = (data + "\n\n").encode()
        for piece in ((raw[:len(raw) - 5], raw[len(raw) - 5:]) if split else (raw,)):
            h.wfile.write(piece)
            h.wfile.flush()
            if split:
                h.wait(0.005)  # two reads on the caller's side, most likely

    usage, name, sent = message["usage"], message["model"], [0]
    cut = len(words) // 2 if mode == "end_mid_stream" else None
    try:
        event("message_start", message={**message, "content": [], "stop_reason": None,
                                        "usage": {**usage, "output_tokens": 1}})
        event("content_block_start", index=0, content_block={"type": "text", "text": ""})
        event("ping")
        for i, w in enumerate(words):
            if i and delay and h.wait_watching(delay):
                h.up.stream_ended(StreamEnd(name, sent[0], "peer_closed"))
                return
            if i == cut:  # ends cleanly mid-way: no message_delta, no message_stop
                h.up.stream_ended(StreamEnd(name, sent[0], "ended_early"))
                return
            event("content_block_delta", index=0,
                  delta={"type": "text_delta", "text": w if i == 0 else " " + w})
            sent[0] += 1
        event("content_block_stop", index=0)
        event("message_delta", delta={"stop_reason": message["stop_reason"],
                                      "stop_sequence": None},
              usage={"output_tokens": usage["output_tokens"]})
        event("message_stop")
    except (BrokenPipeError, ConnectionResetError):
        h.up.stream_ended(StreamEnd(name, sent[0], "peer_closed"))
        return
    h.up.stream_ended(StreamEnd(name, sent[0], "done"))
