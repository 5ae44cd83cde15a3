"""litellm's own logging is left out of the gateway's chat calls only while no litellm callback
would read it (gateway/provider/litellm_unlogged.py): real ``litellm.acompletion`` calls
through ``LitellmTransport`` to the fake upstream over HTTP. litellm's logging object is wrapped by
a counting spy that calls through (nothing of litellm is replaced): it is the only place that
shows whether litellm logged a call no callback reads."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from litellm.integrations.custom_logger import CustomLogger
from litellm.litellm_core_utils.litellm_logging import Logging

from gateway.config import settings_from_dict
from gateway.provider import litellm_callbacks, litellm_unlogged
from gateway.provider.failures import UpstreamFailure
from gateway.provider.litellm_transport import LitellmTransport
from gateway.provider.transport import ProviderRequest
from gateway.serving.forwarding.deployments import chat_completion, over_deployments
from tests.fakes.upstream import FakeBackend, FakeUpstream

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


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """How often litellm ran its success and failure logging (a spy that calls through)."""
    seen: Counter = Counter()
    for name in ("success_handler", "async_success_handler", "failure_handler",
                 "async_failure_handler"):
        real = getattr(Logging, name)

        def spy(self, *a, _real=real, _name=name, **kw):
            seen[_name] += 1
            return _real(self, *a, **kw)

        monkeypatch.setattr(Logging, name, spy)
    return seen


def _backend(up: FakeUpstream):
    return settings_from_dict({"model_list": [up.model_entry("fake-a")]}).backend("fake-a")


async def _calls(up: FakeUpstream, n: int, fail_last: bool = False,
                 logged_when: Callable[[], bool] | None = None) -> list:
    """``n`` chat calls (the last one a 500 when ``fail_last``), then time for the logging
    tasks litellm schedules after returning: 0.3 s, then until ``logged_when()`` holds (at
    most 10 s more: the control tests below see the same tasks run under a loaded machine)."""
    b, out = _backend(up), []
    for i in range(n):
        if fail_last and i == n - 1:
            up.set_mode("fake-a", "error_500", times=1)
        try:
            out.append(await _complete(b, MSG, {"max_tokens": 16}))
        except UpstreamFailure as failure:
            out.append(failure)
    await asyncio.sleep(0.3)
    deadline = time.monotonic() + 10
    while logged_when is not None and not logged_when() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return out


def test_with_no_callback_litellm_logs_nothing_and_errors_are_the_same(
        up: FakeUpstream, logged: Counter) -> None:
    up.reset()
    *replies, failure = asyncio.run(_calls(up, 3, fail_last=True))
    assert [r.choices[0].message.content for r in replies] == ["hello there"] * 2
    assert isinstance(failure, UpstreamFailure) and failure.status == 500
    assert sum(logged.values()) == 0


def test_a_litellm_without_the_mark_logs_every_call(
        up: FakeUpstream, logged: Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control for the test above: the same calls logged, as with a litellm release that
    has no ``internal_sub_call``."""
    up.reset()
    monkeypatch.setattr(litellm_unlogged, "internal_sub_call", None)
    seen = lambda: logged["async_success_handler"] + logged["async_failure_handler"] >= 3
    *replies, failure = asyncio.run(_calls(up, 3, fail_last=True, logged_when=seen))
    assert len(replies) == 2 and failure.status == 500
    assert logged["async_success_handler"] == 2 and logged["async_failure_handler"] == 1


class _Recorder(CustomLogger):
    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self.events.append("success")

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self.events.append("failure")


def test_an_installed_callback_sees_every_call(up: FakeUpstream) -> None:
    up.reset()
    recorder = _Recorder()
    undo = litellm_callbacks.install({"callbacks": [recorder]})
    try:
        assert not litellm_callbacks.none_installed()
        asyncio.run(_calls(up, 3, fail_last=True, logged_when=lambda: len(recorder.events) >= 3))
    finally:
        undo()
    assert litellm_callbacks.none_installed()
    assert sorted(recorder.events) == ["failure", "success", "success"]
