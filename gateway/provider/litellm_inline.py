"""litellm's call setup run on the event loop for the calls where it cannot block.

Why: ``litellm.acompletion`` runs its synchronous ``completion()`` (parameter mapping, the
logging object; for an OpenAI-wire deployment it returns the coroutine that makes the call)
in the loop's default executor (litellm/main.py, ``loop.run_in_executor(None, ...)``). On
two cores that thread hop costs a good share of the setup itself: the GIL passed to a pool
thread and back, the thread woken and put to sleep, on every call. Measured with litellm's
call alone, 32 in flight (``python -m bench.serving.forwarding_profile --bare inline``: the
gateway's client and the setup inline, against ``--bare bare``, interleaved): a median 12%
less CPU per call over 9 pairs (from 31% less to 2% more). The loop is not held longer for
it: in a thread the setup held the GIL, which the loop needs, for all but the switch
interval's slices anyway; and its work grows with the number of values in the request
(messages, parts, tools and their schemas: litellm walks and copies them), which
``MAX_PARTS`` and ``MAX_VALUES`` bound. Tools count too: 15,000 tools (5.4 MB) with only a
message or two held the loop 146-1,027 ms in the setup (issue 35), so the measure is every
JSON value of the call, not its messages.

When the hop is kept: a thread exists there so that a setup that blocks (a credential fetched
over the network, a user's pre-call callback, a cache lookup) does not hold the loop. So the
setup runs inline only for the calls ``inline_setup`` arms: an OpenAI-wire deployment called
through the gateway's own SDK client (gateway/provider/request_json.py: nothing to build
or fetch), no litellm callback or cache configured, and a bounded request: at most ``MAX_PARTS``
messages and parts, ``MAX_VALUES`` JSON values in all (tools, functions, schemas, every
parameter) and ``MAX_TEXT_CHARS`` characters of text (the setup walks each value). Everything else the default executor is given (DNS lookups,
litellm's other entry points, a setup this module does not recognise, say after a litellm
upgrade) goes to the pool's threads as before: ``InlineSetupExecutor`` recognises litellm's
``completion`` by identity and otherwise behaves as the ``ThreadPoolExecutor`` it is.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from gateway.provider import litellm_callbacks
from gateway.provider.request_json import OrjsonAsyncOpenAI
from router_core.env.litellm_env import litellm

MAX_PARTS = 256  # messages plus content parts: the setup's work grows with them, not bytes
# JSON values (objects, arrays, strings, numbers) in the whole call, tools and schemas among
# them, and characters of text: past either the setup goes to a thread. The count stops at
# the bound, so measuring costs at most MAX_VALUES steps on the loop.
MAX_VALUES = 4096
MAX_TEXT_CHARS = 1 << 20
_NOT_WALKED = frozenset({"client"})  # the SDK client object, not request data

_armed: contextvars.ContextVar[bool] = contextvars.ContextVar("tollgate_inline_setup",
                                                              default=False)


def _parts(messages: Any) -> int:
    if not isinstance(messages, list):
        return MAX_PARTS + 1
    return len(messages) + sum(len(m["content"]) for m in messages
                               if isinstance(m, dict) and isinstance(m.get("content"), list))


def small_work(call: Mapping[str, Any]) -> bool:
    """Whether the call holds at most ``MAX_VALUES`` JSON values and ``MAX_TEXT_CHARS``
    characters of text; an iterative walk that stops as soon as either is passed."""
    stack = [v for k, v in call.items() if k not in _NOT_WALKED]
    values = chars = 0
    while stack:
        v = stack.pop()
        values += 1
        if values > MAX_VALUES:
            return False
        if isinstance(v, str):
            chars += len(v)
            if chars > MAX_TEXT_CHARS:
                return False
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
    return True


def may_run_inline(call: Mapping[str, Any]) -> bool:
    """Whether ``litellm.acompletion(**call)``'s setup cannot block (module docstring)."""
    return (isinstance(call.get("client"), OrjsonAsyncOpenAI)
            and getattr(litellm, "cache", None) is None
            and litellm_callbacks.none_installed()  # else user code may run in the setup
            and _parts(call.get("messages")) <= MAX_PARTS
            and small_work(call))


@contextlib.contextmanager
def inline_setup(call: Mapping[str, Any]) -> Iterator[None]:
    """Around ``await litellm.acompletion(**call)``: its setup may run on the loop."""
    if not may_run_inline(call):
        yield
        return
    token = _armed.set(True)
    try:
        yield
    finally:
        _armed.reset(token)


def _is_litellm_setup(fn: Any) -> bool:
    """``fn`` is what litellm's acompletion hands the executor: ``partial(ctx.run,
    partial(completion, **kwargs))`` (litellm/main.py)."""
    inner = fn.args[0] if isinstance(fn, functools.partial) and fn.args else None
    target = getattr(sys.modules.get("litellm.main"), "completion", None)
    return isinstance(inner, functools.partial) and target is not None and inner.func is target


class InlineSetupExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor: an armed litellm setup runs at once, in the caller's
    thread; anything else in the pool's threads. ``inline_runs`` counts the former."""

    inline_runs = 0

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        if not (_armed.get() and _is_litellm_setup(fn)):
            return super().submit(fn, *args, **kwargs)
        self.inline_runs += 1
        done: concurrent.futures.Future = concurrent.futures.Future()
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as e:  # noqa: BLE001 - as a pool thread hands it back
            done.set_exception(e)
        return done


def install_inline_setup() -> None:
    """Make ``InlineSetupExecutor`` the running loop's default executor. At startup, before
    anything has used the default one (asyncio would not shut a replaced one down); the loop
    shuts this one down, as its own, when it stops."""
    asyncio.get_running_loop().set_default_executor(
        InlineSetupExecutor(thread_name_prefix="asyncio"))
