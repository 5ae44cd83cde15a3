"""How an answer reaches the client, and the one place a request that got one is settled
and logged.

A complete answer (``send_body``) is settled before it is sent (a client's next request must
not meet this one's hold: one settle round trip on the latency) and logged after it is sent.
A stream (``send_stream``) is relayed by its endpoint's ``Relay``, which turns the upstream's
chunks into the client's events and says, in line, what the outcome needs: the text it adds
(``Text``), its usage so far (``Usage``, the last one counts), an upstream error event
(``Failed``) and the point where the request is settled (``SETTLE``: before the client has the
last event). Whatever way a stream ends (done, broken mid-way, the client gone), it is closed,
settled and logged here once. A refusal before any answer is the frame's
(gateway/serving/endpoint.py); an answer from the response cache is ``replay``'s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

import anyio
from fastapi.responses import JSONResponse, Response
from starlette.background import BackgroundTask

from gateway.errors import CLIENT_GONE
from gateway.provider.open_stream import OpenStream
from gateway.serving.forwarding.answer import Answer, SettlingStream
from gateway.serving.forwarding.attempts import Attempted
from gateway.serving.forwarding.cached_answer import RequestCache, replayed
from gateway.serving.plan.planning import Plan
from gateway.serving.record.outcome import Outcome
from gateway.store.records import Tenant


@dataclass(frozen=True)
class Text:
    text: str  # what a chunk adds to the answer


@dataclass(frozen=True)
class Usage:
    counts: dict  # {prompt_tokens, completion_tokens}: the stream's usage so far


@dataclass(frozen=True)
class Failed:
    status: int  # the upstream sent an error event: the request's status and error
    error: str


class Settle:
    """Settle now: the next event is the client's last."""


SETTLE = Settle()
Event = bytes | Text | Usage | Failed | Settle


class Relay(Protocol):
    """An endpoint's stream: its events from the upstream's, and its error event."""

    def events(self, opened: OpenStream) -> AsyncIterator[Event]: ...

    def broken(self, status: int, error: str) -> bytes: ...


def zero_budget(tenant: Tenant) -> bool:
    """Whether the tenant's or the key's budget is set to $0: it pays for no answer, so it
    is served none from the cache either (issue 48.13); its request goes on to the
    reservation, which refuses it unless the operator priced the backend at 0."""
    return any(b is not None and b <= 0 for b in (tenant.budget_usd, tenant.key_budget_usd))


async def replay(out: Outcome, plan: Plan) -> Response | None:
    """With the response cache on, the stored answer of the backend routing ranked first,
    replayed at no cost to the tenant (gateway/serving/forwarding/cached_answer.py); None on a
    miss, or for a tenant or key whose budget is $0 (``zero_budget``)."""
    req = plan.request
    if not plan.candidates or zero_budget(out.tenant):
        return None
    cache = await RequestCache.for_request(out.ctx, out.tenant.id, req.messages, req.params,
                                           req.cache)
    out.caching(cache)
    if cache is None:
        return None
    b = plan.pool.backends[plan.candidates[0]]
    entry = await cache.lookup(b.model_name)
    if entry is None:
        return None
    body = {**entry["body"], "model": b.model_name}
    out.replayed(b, body)
    await out.settle()  # nothing held: frees the parallel slot, charges nothing
    headers = {**out.headers(), "x-tollgate-cost-usd": f"{0.0:.10f}"}
    return replayed(body, req.stream, req.include_usage, headers, out.finish)


async def send_body(out: Outcome, answer: Answer, cache: RequestCache | None = None
                    ) -> Response:
    """A complete answer: settled, stored in ``cache`` (before it is sent: the next request
    finds it), sent, then logged."""
    out.take_answer(answer.text, answer.usage)
    await out.settle()
    if cache is not None and out.answered is not None:
        await cache.store(out.answered.model_name, answer.body)
    headers = {**out.headers(), "x-tollgate-cost-usd": f"{out.cost_usd:.10f}"}
    return JSONResponse(answer.body, headers=headers,
                        background=BackgroundTask(out.finish, 200, None))


def send_stream(out: Outcome, tried: Attempted, relay: Relay) -> Response:
    """The answering stream, relayed; settled and logged however it ends."""
    opened: OpenStream = tried.reply
    out.streaming()

    async def abandoned() -> None:  # the client left before the first byte was relayed
        await opened.close()
        await out.finish(499, "client disconnected before the stream")

    return SettlingStream(relayed(out, opened, relay), abandoned,
                          media_type="text/event-stream",
                          headers={**out.headers(), "cache-control": "no-cache"})


async def relayed(out: Outcome, opened: OpenStream, relay: Relay) -> AsyncIterator[bytes]:
    """The relay's bytes to the client, what it says taken into ``out``; a failure after the
    first byte ends the stream with the relay's error event (the client has bytes already)."""
    status, error = 200, None
    usage: dict | None = None
    settled = False
    try:
        async for item in relay.events(opened):
            if isinstance(item, bytes):
                yield item
            elif isinstance(item, Text):
                out.add_text(item.text)
            elif isinstance(item, Usage):
                usage = item.counts
            elif isinstance(item, Failed):
                status, error = item.status, item.error
            elif not settled:  # SETTLE: settled before the client has the last event
                with anyio.CancelScope(shield=True):
                    if usage:
                        out.take_usage(usage)
                    await out.settle()
                settled = True
    except Exception as e:  # noqa: BLE001 - mid-stream failure: the client already has bytes
        status, error = out.stream_broke(opened.classify(e))
        yield relay.broken(status, error)
    except BaseException:  # client went away (cancellation): settle what was streamed
        status, error = 499, CLIENT_GONE
        raise
    finally:
        with anyio.CancelScope(shield=True):
            await opened.close()  # an abandoned stream stops upstream, too
            if usage and not settled:
                out.take_usage(usage)
            await out.finish(status, error)
