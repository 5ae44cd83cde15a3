"""One upstream attempt through ``litellm.acompletion`` and what its failure means.

A failure is *retryable* (try the next candidate) when another backend could well succeed:
connection errors, timeouts, 429, 5xx, an unparseable answer, a context window too small,
or the provider refusing our credentials. A 400 about the request itself is not: the next
backend would refuse it too, so the client gets it.

A backend with several deployments (a LiteLLM model group) is one attempt: its deployments
are tried in a weighted random order (LiteLLM's ``simple-shuffle``, ``litellm_params.weight``)
and a retryable failure moves on to the next deployment of the group.

Why not ``litellm.Router`` for groups: it retries, cools down and falls back on its own,
out of sight of the gateway's circuit breakers, attempt log and budget hold; the few lines
here keep every upstream call one plain ``litellm.acompletion`` the gateway accounts for.

A failure inside litellm before anything was sent (litellm wraps a TypeError on a malformed
part as a "connection" error) is ``not_sent``: the request's fault, never the backend's, so it
neither counts against a circuit breaker nor moves on to the next candidate.

Each failure also says who caused it (``cause``, what the circuit breakers weigh,
gateway/reliability/circuit.py): ``request`` when the request's own content provoked it (a 400,
a context window too small, a content filter, litellm stopping a stream that repeats one chunk
``REPEATED_STREAMING_CHUNK_LIMIT`` times: litellm/litellm_core_utils/streaming_handler.py
``raise_on_model_repetition``); ``backend`` when no request could have (the connection refused
before anything was sent, our credentials or the model name refused); ``ambiguous`` otherwise
(a timeout, a 429, a 5xx, a reset or unparseable answer: an outage, or a request built to
provoke one).

A timeout after the connection was made is ``billable``: the provider has the prompt and may
bill it though no answer came. Each one, a deployment of a group included, is reported to the
caller's ``billed`` hook (the attempt loop charges the tenant for it and says whether the budget
covers another deployment) before the next deployment is tried.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from gateway.config import Backend
from gateway.config.model_map import sized_timeout
from gateway.reliability.circuit import AMBIGUOUS, BACKEND, REQUEST
from gateway.serving.forwarding import request_json
from gateway.serving.forwarding.litellm_inline import inline_setup
from gateway.serving.forwarding.litellm_unlogged import unlogged
from router_core.env.litellm_env import litellm

litellm.suppress_debug_info = True
log = logging.getLogger(__name__)


# litellm's message when it stops a stream that repeats one chunk (streaming_handler.py)
REPEATED_CHUNK = "repeating the same chunk"


@dataclass
class UpstreamFailure(Exception):
    """A classified upstream error: ``status`` is what the attempt log records."""

    status: int  # upstream HTTP status, 504 for a timeout, 502 for connection/protocol
    kind: str  # timeout | connection | rate_limited | server_error | bad_response | ...
    message: str
    retryable: bool
    billable: bool = False  # the provider may bill it: it timed out after the request was sent
    cause: str = AMBIGUOUS  # REQUEST | BACKEND | AMBIGUOUS: who provoked it (module docstring)

    def __str__(self) -> str:
        return f"{self.kind} ({self.status}): {self.message}"


# Errors of local code: in the context of a litellm error they mean the request never left.
LOCAL_FAULTS = (TypeError, AttributeError, KeyError, IndexError, RecursionError, UnicodeError)
NETWORK_FAULTS = (OSError, asyncio.TimeoutError, httpx.HTTPError)
# Timeouts before the request could be written: nothing reached the provider.
UNSENT_TIMEOUTS = (httpx.ConnectTimeout, httpx.PoolTimeout)

# Called for each billable failure with whether another deployment of the backend would be
# tried next; returns whether it may be (False: stop, e.g. the budget does not cover it).
Billed = Callable[[UpstreamFailure, bool], Awaitable[bool]]


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and len(seen) < 16 and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _local_fault(exc: BaseException) -> BaseException | None:
    """The local error a litellm exception wraps, unless a network error is in the chain."""
    seen = _chain(exc)
    if any(isinstance(e, NETWORK_FAULTS) for e in seen):
        return None
    local = [e for e in seen[1:] if isinstance(e, LOCAL_FAULTS)
             or (type(e) is ValueError and "JSON compliant" in str(e))]
    return local[0] if local else None


def classify(exc: BaseException) -> UpstreamFailure:
    """Map a litellm / openai / asyncio exception to an UpstreamFailure."""
    msg = str(exc).replace("litellm.", "")[:500]
    local = _local_fault(exc)
    if local is not None:
        return UpstreamFailure(400, "not_sent", "the request could not be sent upstream: "
                               f"{type(local).__name__}: {str(local)[:300]}", False,
                               cause=REQUEST)
    chain = _chain(exc)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, litellm.Timeout)):
        sent = not any(isinstance(e, UNSENT_TIMEOUTS) for e in chain)
        unreachable = any(isinstance(e, httpx.ConnectTimeout) for e in chain)
        return UpstreamFailure(504, "timeout", msg or "upstream timed out", True, billable=sent,
                               cause=BACKEND if unreachable else AMBIGUOUS)
    if REPEATED_CHUNK in msg:  # what the client asked for repeats: the request's doing
        return UpstreamFailure(502, "repetition", msg, False, cause=REQUEST)
    if isinstance(exc, litellm.ContextWindowExceededError):
        return UpstreamFailure(400, "context_window_exceeded", msg, True, cause=REQUEST)
    if isinstance(exc, litellm.RateLimitError):
        return UpstreamFailure(429, "rate_limited", msg, True)
    if isinstance(exc, (litellm.AuthenticationError, litellm.PermissionDeniedError)):
        return UpstreamFailure(502, "upstream_auth", msg, True, cause=BACKEND)
    if isinstance(exc, litellm.NotFoundError):
        return UpstreamFailure(502, "upstream_not_found", msg, True, cause=BACKEND)
    if isinstance(exc, (litellm.BadRequestError, litellm.UnprocessableEntityError)):
        return UpstreamFailure(400, "bad_request", msg, False, cause=REQUEST)
    if isinstance(exc, litellm.APIConnectionError) or "Connection error" in msg:
        refused = any(isinstance(e, (httpx.ConnectError, ConnectionRefusedError))
                      for e in chain)
        return UpstreamFailure(502, "connection", msg, True,
                               cause=BACKEND if refused else AMBIGUOUS)
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409):
        return UpstreamFailure(status, "bad_request", msg, False, cause=REQUEST)
    if isinstance(status, int) and status >= 500 and "Expecting value" not in msg:
        return UpstreamFailure(status, "server_error", msg, True)
    return UpstreamFailure(502, "bad_response", msg or type(exc).__name__, True)


# Providers that speak OpenAI's wire format: parameters litellm does not map for them are sent
# verbatim in the body (extra_body) instead of being dropped, so e.g. ``user`` reaches a
# self-hosted OpenAI-compatible server. Other providers get litellm's own mapping.
OPENAI_WIRE_PROVIDERS = frozenset({"openai", "custom_openai"})


@functools.lru_cache(maxsize=1024)
def wire_params(model: str, api_base: str | None) -> frozenset[str] | None:
    """The parameters litellm maps for a deployment of an OpenAI-wire provider, None for any
    other provider. Cached: a pure function of the deployment's model and api_base, and two
    litellm look-ups per attempt were a measurable share of passthrough's CPU
    (bench/forwarding_profile.py)."""
    try:
        _, provider, _, _ = litellm.get_llm_provider(model, api_base=api_base)
    except litellm.BadRequestError:
        return None
    if provider not in OPENAI_WIRE_PROVIDERS:
        return None
    return frozenset(litellm.get_supported_openai_params(
        model=model.split("/", 1)[-1], custom_llm_provider=provider) or ())


def deployment_order(backend: Backend) -> list[dict[str, Any]]:
    """The deployments to try, in a random order weighted by ``litellm_params.weight``
    (Efraimidis–Spirakis: sort by u^(1/w), u uniform on (0, 1))."""
    deployments = backend.deployment_params()
    if len(deployments) == 1:
        return deployments

    def key(d: dict[str, Any]) -> float:
        w = d.get("weight")
        w = float(w) if isinstance(w, (int, float)) and w > 0 else 1.0
        return random.random() ** (1.0 / w)

    return sorted(deployments, key=key, reverse=True)


OUTPUT_CAP_PARAMS = ("max_tokens", "max_completion_tokens", "max_output_tokens")


def output_cap(params: dict[str, Any]) -> int | None:
    """The output cap a call's parameters send (the largest of its cap fields)."""
    caps = [v for k in OUTPUT_CAP_PARAMS if isinstance(v := params.get(k), int)
            and not isinstance(v, bool)]
    return max(caps) if caps else None


def attempt_timeout(backend: Backend, deployment: dict[str, Any], stream: bool = False,
                    cap: int | None = None) -> float:
    """Seconds for one call: litellm_params.timeout, else model_info's; a stream's is its
    ``stream_timeout`` (LiteLLM's; litellm_params', else model_info's) when one is set.
    Neither set, a non-streamed call waits 60 s plus time for ``cap`` output tokens
    (gateway/config/model_map.py): its first byte comes when the whole answer is written, so
    a long answer must not meet a short default (a stream's timeout is per chunk)."""
    if stream:
        t = deployment.get("stream_timeout")
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
            return float(t)
        if backend.model_info.stream_timeout is not None:
            return backend.model_info.stream_timeout
    t = deployment.get("timeout")
    if isinstance(t, (int, float)) and t > 0:
        return float(t)
    if "timeout" in backend.model_info.model_fields_set:
        return backend.model_info.timeout
    return sized_timeout(backend.model_info.timeout, None if stream else cap)


def _kwargs(backend: Backend, deployment: dict[str, Any], messages: list[dict],
            params: dict[str, Any]) -> dict[str, Any]:
    call = backend.call_params(deployment)
    params = dict(params)
    # per request (the body's drop_params) over per deployment (litellm_params / config)
    drop = bool(params.pop("drop_params", None) or call.pop("drop_params", False))
    supported = wire_params(str(call["model"]), call.get("api_base"))
    if supported is not None:
        extra = {k: params.pop(k) for k in list(params) if k not in supported}
        if extra and not drop:
            call["extra_body"] = {**(call.get("extra_body") or {}), **extra}
    call.update(params)
    if drop:
        call["drop_params"] = True  # litellm leaves out what this provider does not support
    call["messages"] = messages
    call["timeout"] = attempt_timeout(backend, deployment, cap=output_cap(call))
    call["num_retries"] = 0  # fallback across backends is ours; no hidden retries
    call["max_retries"] = 0
    client = request_json.sdk_client(call)  # bodies serialised with orjson (request_json.py)
    if client is not None:
        call["client"] = client
    return call


def _next_deployment(backend: Backend, failure: UpstreamFailure, left: int) -> bool:
    """True when a failed deployment's group has another deployment worth trying."""
    if not failure.retryable or left == 0:
        return False
    log.info("backend %s: a deployment failed (%s); trying the next of its group",
             backend.model_name, failure)
    return True


async def _may_go_on(backend: Backend, failure: UpstreamFailure, left: int,
                     billed: Billed | None) -> bool:
    """Report a billable failure to ``billed``; whether the group's next deployment is tried."""
    go_on = _next_deployment(backend, failure, left)
    if failure.billable and billed is not None:
        go_on = await billed(failure, go_on) and go_on
    return go_on


def deployment_index(backend: Backend, deployment: dict[str, Any]) -> int:
    """Where ``deployment`` is in ``backend.deployment_params()`` (its price's index)."""
    return next((i for i, d in enumerate(backend.deployment_params()) if d is deployment), 0)


async def each_deployment(backend: Backend, one: Callable[[dict[str, Any]], Awaitable[Any]],
                          billed: Billed | None = None,
                          answered: Callable[[int], None] | None = None) -> Any:
    """``one(deployment)`` over the backend's deployments in ``deployment_order`` until one
    answers, the one loop of every upstream call: a retryable failure moves on to the next
    deployment (a billable one reported to ``billed`` first), any other, or the last, is
    raised as an UpstreamFailure. ``answered`` is told the index of the deployment that
    answered (``deployment_index``)."""
    order = deployment_order(backend)
    for i, deployment in enumerate(order):
        try:
            reply = await one(deployment)
        except UpstreamFailure as f:
            failure, cause = f, f.__cause__
        except Exception as e:  # noqa: BLE001 - every provider error is classified, none raw
            failure, cause = classify(e), e
        else:
            if answered is not None:
                answered(deployment_index(backend, deployment))
            return reply
        if not await _may_go_on(backend, failure, len(order) - i - 1, billed):
            raise failure from cause
    raise AssertionError("a backend has at least one deployment")


async def complete(backend: Backend, messages: list[dict], params: dict[str, Any],
                   billed: Billed | None = None,
                   answered: Callable[[int], None] | None = None) -> Any:
    """A non-streaming chat call; raises UpstreamFailure."""

    async def one(deployment: dict[str, Any]) -> Any:
        call = _kwargs(backend, deployment, messages, params)
        # litellm's setup on the loop where it cannot block; its logging where unread
        with inline_setup(call), unlogged():
            return await litellm.acompletion(**call)

    return await each_deployment(backend, one, billed, answered)


async def embed(backend: Backend, inputs: str | list, params: dict[str, Any]) -> Any:
    """One embeddings call (``litellm.aembedding``) over the backend's deployments, with the
    same failure rules as ``complete``; raises UpstreamFailure."""

    async def one(deployment: dict[str, Any]) -> Any:
        return await litellm.aembedding(**{**backend.call_params(deployment), **params,
                                           "input": inputs,
                                           "timeout": attempt_timeout(backend, deployment)})

    return await each_deployment(backend, one)


@dataclass
class OpenStream:
    """A stream whose first chunk has arrived (so nothing reached the client yet before)."""

    first: Any | None  # None: the upstream ended the stream without a chunk
    rest: AsyncIterator[Any]
    timeout: float

    async def chunks(self) -> AsyncIterator[Any]:
        """The first chunk then the rest; a gap longer than ``timeout`` is a TimeoutError."""
        if self.first is None:
            return
        yield self.first
        while True:
            try:
                chunk = await asyncio.wait_for(anext(self.rest), self.timeout)
            except StopAsyncIteration:
                return
            yield chunk

    async def close(self) -> None:
        """Close the upstream stream (its connection) if it is still open; never raises."""
        close = getattr(self.rest, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()


async def open_stream(backend: Backend, messages: list[dict], params: dict[str, Any],
                      billed: Billed | None = None,
                      answered: Callable[[int], None] | None = None) -> OpenStream:
    """Start a chat stream and wait for its first chunk; raises UpstreamFailure before that."""
    return await each_deployment(
        backend, lambda deployment: _open_one(backend, deployment, messages, params),
        billed, answered)


async def _open_one(backend: Backend, deployment: dict[str, Any], messages: list[dict],
                    params: dict[str, Any]) -> OpenStream:
    kwargs = _kwargs(backend, deployment, messages, params)
    kwargs["timeout"] = attempt_timeout(backend, deployment, True, output_cap(kwargs))
    kwargs["stream"] = True
    kwargs["stream_options"] = {"include_usage": True}  # we settle from it
    with inline_setup(kwargs), unlogged():  # as in ``complete``
        return await _first_event(litellm.acompletion(**kwargs), kwargs["timeout"])


async def _first_event(started: Awaitable[Any], timeout: float) -> OpenStream:
    """An OpenStream of a started stream call once its first item came (as ``_open_one``)."""
    it: AsyncIterator[Any] | None = None
    try:
        stream = await asyncio.wait_for(started, timeout)
        it = stream.__aiter__()
        try:
            first = await asyncio.wait_for(anext(it), timeout)
        except StopAsyncIteration:
            first = None
    except BaseException as e:
        if it is not None:
            await OpenStream(None, it, timeout).close()
        if not isinstance(e, Exception):
            raise
        raise classify(e) from e
    return OpenStream(first=first, rest=it, timeout=timeout)


async def over_deployments(backend: Backend, call: Callable[..., Awaitable[Any]],
                           params: dict[str, Any], billed: Billed | None,
                           answered: Callable[[int], None] | None) -> Any:
    """``call`` (a litellm function) over the backend's deployments (``each_deployment``);
    with ``params["stream"]`` an OpenStream once the first item came, as ``open_stream``."""
    stream = bool(params.get("stream"))

    async def one(deployment: dict[str, Any]) -> Any:
        kwargs = {**backend.call_params(deployment), **params,
                  "timeout": attempt_timeout(backend, deployment, stream, output_cap(params)),
                  "num_retries": 0, "max_retries": 0}
        if stream:
            return await _first_event(call(**kwargs), kwargs["timeout"])
        return await call(**kwargs)

    return await each_deployment(backend, one, billed, answered)


async def responses(backend: Backend, params: dict[str, Any], billed: Billed | None = None,
                    answered: Callable[[int], None] | None = None) -> Any:
    """One Responses API call (``litellm.aresponses``: the provider's own Responses API, or
    litellm's bridge to its chat completions); ``params`` hold ``input`` and the rest."""
    return await over_deployments(backend, litellm.aresponses, params, billed, answered)


async def text_completion(backend: Backend, params: dict[str, Any],
                          billed: Billed | None = None,
                          answered: Callable[[int], None] | None = None) -> Any:
    """One legacy text completion (``litellm.atext_completion``); ``params`` hold ``prompt``."""
    return await over_deployments(backend, litellm.atext_completion, params, billed, answered)

