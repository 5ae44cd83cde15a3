"""litellm's, openai's and asyncio's exceptions classified as ``UpstreamFailure``s (what each
means: gateway/provider/failures.py)."""

from __future__ import annotations

import asyncio

import httpx

from gateway.provider.failures import AMBIGUOUS, BACKEND, REQUEST, UpstreamFailure
from router_core.env.litellm_env import litellm

# litellm's message when it stops a stream that repeats one chunk (streaming_handler.py)
REPEATED_CHUNK = "repeating the same chunk"


# Errors of local code: in the context of a litellm error they mean the request never left.
LOCAL_FAULTS = (TypeError, AttributeError, KeyError, IndexError, RecursionError, UnicodeError)
NETWORK_FAULTS = (OSError, asyncio.TimeoutError, httpx.HTTPError)
# Timeouts before the request could be written: nothing reached the provider.
UNSENT_TIMEOUTS = (httpx.ConnectTimeout, httpx.PoolTimeout)


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
