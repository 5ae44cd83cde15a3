"""The response cache's parts without HTTP: the local store's bounds and a stream assembled
into the completion it adds up to (and replayed back)."""

from __future__ import annotations

from gateway.serving.forwarding.cached_answer import assembled, replay_events
from gateway.serving.forwarding.response_cache import LocalEntries


def test_local_entries_are_bounded_by_count_bytes_and_time() -> None:
    now = [0.0]
    local = LocalEntries(max_entries=3, max_bytes=100, clock=lambda: now[0])
    for i in range(5):
        local.put(f"k{i}", b"x" * 10, ttl_s=10)
    assert len(local) == 3 and local.get("k0") is None and local.get("k4") == b"x" * 10
    local.get("k2")  # recently used: kept over k3
    local.put("big", b"y" * 80, ttl_s=10)
    assert local.bytes <= 100 and local.get("k2") is not None and local.get("k3") is None
    local.put("huge", b"z" * 101, ttl_s=10)  # larger than the whole cache: not kept
    assert local.get("huge") is None and local.bytes <= 100
    now[0] = 11
    assert local.get("k2") is None and local.get("big") is None


def test_a_stream_assembles_into_its_completion_and_replays_back() -> None:
    base = {"id": "c1", "created": 1, "model": "m", "object": "chat.completion.chunk"}
    events = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}]},
        {**base, "choices": [{"index": 0, "delta": {"content": "lo"}}]},
        {**base, "choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "id": "t",
                              "function": {"name": "f", "arguments": "{\"a\""}}]}}]},
        {**base, "choices": [{"index": 1, "delta": {"tool_calls": [{"index": 0, "function": {
            "arguments": ": 1}"}}]}, "finish_reason": "tool_calls"}]},
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    ]
    usage = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    body = assembled(events, usage)
    assert body is not None and body["usage"] == usage
    c0, c1 = body["choices"]
    assert (c0["message"]["content"], c0["finish_reason"]) == ("Hello", "stop")
    call = c1["message"]["tool_calls"][0]
    assert (call["id"], call["function"]) == ("t", {"name": "f", "arguments": "{\"a\": 1}"})
    again = assembled(replay_events(body, include_usage=True)[:-1], usage)
    assert again is not None and again["choices"] == body["choices"]
    assert replay_events(body, include_usage=True)[-1]["usage"] == usage
    assert assembled([], usage) is None
