"""litellm's call setup runs on the loop only where it cannot block
(gateway/provider/litellm_inline.py): real ``litellm.acompletion`` calls through
chat calls through ``LitellmTransport`` to the fake upstream over HTTP, with
``InlineSetupExecutor`` as the loop's default executor: its count of setups run inline, and the pool
threads it started (lazily, on the first submit it hands them) for the rest."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
from litellm.integrations.custom_logger import CustomLogger

from gateway.config import settings_from_dict
from gateway.provider import litellm_callbacks, request_json
from gateway.provider.failures import UpstreamFailure
from gateway.provider.litellm_inline import (
    MAX_PARTS,
    MAX_VALUES,
    InlineSetupExecutor,
    may_run_inline,
)
from gateway.provider.litellm_transport import LitellmTransport
from gateway.provider.transport import ProviderRequest
from gateway.serving.forwarding.deployments import chat_completion, over_deployments
from tests.fakes.upstream import FakeBackend, FakeUpstream

PREFIX = "inline-test-pool"
MSG = [{"role": "user", "content": "hi"}]

async def _complete(b, messages, params):
    """One non-streamed chat call through the real transport (gateway/provider/)."""
    return (await chat_completion(LitellmTransport(), b, messages, params)).body


async def _open_stream(b, messages, params):
    """One streamed chat call through the real transport: its OpenStream."""
    group = await over_deployments(
        LitellmTransport(), ProviderRequest("chat", b, {**params, "messages": messages}, stream=True))
    return group.reply.body



@pytest.fixture(scope="module")
def up() -> Iterator[FakeUpstream]:
    with FakeUpstream([FakeBackend("fake-a", reply="hello there")]) as u:
        yield u


def _pool_threads() -> int:
    return sum(t.name.startswith(PREFIX) for t in threading.enumerate())


async def _with_executor(work) -> tuple[object, int, int]:
    """``work()`` on a loop whose default executor is a fresh InlineSetupExecutor: its result,
    the setups run inline and the pool threads started."""
    executor = InlineSetupExecutor(thread_name_prefix=PREFIX)
    asyncio.get_running_loop().set_default_executor(executor)
    try:
        result = await work()
        return result, executor.inline_runs, _pool_threads()
    finally:
        executor.shutdown(wait=True)


def _backend(up: FakeUpstream):
    return settings_from_dict({"model_list": [up.model_entry("fake-a")]}).backend("fake-a")


def test_an_openai_wire_call_sets_up_on_the_loop_streamed_or_not(up: FakeUpstream) -> None:
    b = _backend(up)

    async def work():
        replies = [await _complete(b, MSG, {"max_tokens": 16}) for _ in range(3)]
        stream = await _open_stream(b, MSG, {"max_tokens": 16})
        pieces = [c.choices[0].delta.content or "" async for c in stream.chunks() if c.choices]
        return [r.choices[0].message.content for r in replies], "".join(pieces)

    (replies, streamed), inline, _ = asyncio.run(_with_executor(work))
    assert replies == ["hello there"] * 3 and streamed == "hello there"
    assert inline == 4  # every setup ran on the loop


def test_other_work_still_goes_to_the_pool(up: FakeUpstream) -> None:
    """A DNS lookup (asyncio's getaddrinfo) and a call with a litellm callback configured (it
    may run user code in the setup) keep their thread."""
    b = _backend(up)

    async def lookup():
        return await asyncio.get_running_loop().getaddrinfo("localhost", 80)

    _, inline, threads = asyncio.run(_with_executor(lookup))
    assert inline == 0 and threads >= 1

    undo = litellm_callbacks.install({"callbacks": [CustomLogger()]})
    try:
        async def call():
            return await _complete(b, MSG, {"max_tokens": 16})

        reply, inline, threads = asyncio.run(_with_executor(call))
    finally:
        undo()  # litellm's lists as they were (it copies callbacks into its async lists)
    assert reply.choices[0].message.content == "hello there"
    assert inline == 0 and threads >= 1


def test_an_armed_setup_that_raises_fails_as_it_would_in_a_thread(up: FakeUpstream) -> None:
    """Content litellm's setup cannot read is still the request's 400, never sent."""
    b = _backend(up)
    bad = [{"role": "user", "content": 5}]  # request validation refuses it before, in service

    async def work():
        with pytest.raises(UpstreamFailure) as exc:
            await _complete(b, bad, {"max_tokens": 16})
        return exc.value

    failure, inline, _ = asyncio.run(_with_executor(work))
    assert (failure.status, failure.kind, failure.retryable) == (400, "not_sent", False)
    assert inline == 1


def test_what_is_armed() -> None:
    client = object.__new__(request_json.OrjsonAsyncOpenAI)  # never sends
    assert may_run_inline({"client": client, "messages": MSG})
    assert not may_run_inline({"messages": MSG})  # litellm builds (or fetches) its own client
    many = [{"role": "user", "content": "x"}] * (MAX_PARTS + 1)
    assert not may_run_inline({"client": client, "messages": many})
    parts = [{"role": "user", "content": [{"type": "text", "text": "x"}] * MAX_PARTS}]
    assert not may_run_inline({"client": client, "messages": parts})


def _tools(n: int) -> list[dict]:
    return [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "looks a thing up",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
        for i in range(n)]


def test_a_request_with_many_tools_sets_up_in_a_thread(up: FakeUpstream) -> None:
    """Issue 35: 15,000 tools and one message held the loop 146-1,027 ms in litellm's setup,
    which counted messages and parts only. The setup's work is every value of the call, so
    this one goes to a pool thread (no setup inline), and a small one stays on the loop."""
    b = _backend(up)

    async def work():
        big = await _complete(b, MSG, {"max_tokens": 16, "tools": _tools(15_000)})
        return len(big.choices)

    answered, inline, threads = asyncio.run(_with_executor(work))
    assert answered == 1  # the upstream answered over HTTP
    assert inline == 0 and threads >= 1

    async def small():
        return await _complete(b, MSG, {"max_tokens": 16, "tools": _tools(3)})

    _, inline, _ = asyncio.run(_with_executor(small))
    assert inline == 1


def test_every_value_counts_toward_the_inline_bound() -> None:
    client = object.__new__(request_json.OrjsonAsyncOpenAI)  # never sends
    schema = {"type": "json_schema", "json_schema": {"schema": {"enum": list(range(MAX_VALUES))}}}
    assert not may_run_inline({"client": client, "messages": MSG, "response_format": schema})
    assert not may_run_inline({"client": client, "messages": MSG, "functions": _tools(MAX_VALUES)})
    text = [{"role": "user", "content": "x" * (2 << 20)}]
    assert not may_run_inline({"client": client, "messages": text})
    assert may_run_inline({"client": client, "messages": MSG, "tools": _tools(20)})
