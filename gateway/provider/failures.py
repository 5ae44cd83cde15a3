"""What a failed provider call means: ``UpstreamFailure`` (gateway/provider/litellm_errors.py
``classify`` makes one of a litellm / openai / asyncio exception). No litellm here: the circuit
breakers read these names without loading it.

A failure is *retryable* (try the next candidate) when another backend could well succeed:
connection errors, timeouts, 429, 5xx, an unparseable answer, a context window too small,
or the provider refusing our credentials. A 400 about the request itself is not: the next
backend would refuse it too, so the client gets it.

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
bill it though no answer came.
"""

from __future__ import annotations

from dataclasses import dataclass

# Who provoked a failed attempt (``UpstreamFailure.cause``; the circuit breakers weigh it).
REQUEST, BACKEND, AMBIGUOUS = "request", "backend", "ambiguous"


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
