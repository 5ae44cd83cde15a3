"""The Anthropic event stream parser of /v1/messages (gateway/serving/messages/messages_handler.py):
frames split across chunks, several in one chunk, a character split between two chunks, and
a last frame without its blank line (pure; the HTTP relay is tested in test_messages.py)."""

from __future__ import annotations

import json

from gateway.serving.messages.messages_handler import SSEFrames


def stream(*events: dict) -> bytes:
    return b"".join(f"event: {e['type']}\ndata: {json.dumps(e, ensure_ascii=False)}\n\n"
                    .encode() for e in events)


def test_frames_split_anywhere_are_rebuilt_in_order() -> None:
    events = [{"type": "message_start", "message": {"usage": {"input_tokens": 3}}},
              {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "café"}},
              {"type": "message_stop"}]
    raw = stream(*events)
    for size in (1, 2, 3, 7, len(raw)):  # every split point, mid-character included
        sse, got = SSEFrames(), []
        for i in range(0, len(raw), size):
            got += sse.feed(raw[i:i + size])
        got += sse.end()
        assert [d for _, d in got] == events, size
        assert [k for k, _ in got] == [e["type"] for e in events]


def test_a_last_frame_without_its_blank_line_is_kept() -> None:
    sse = SSEFrames()
    raw = stream({"type": "ping"}, {"type": "message_stop"}).rstrip(b"\n")
    assert [k for k, _ in sse.feed(raw)] == ["ping"]
    assert [k for k, _ in sse.end()] == ["message_stop"]
