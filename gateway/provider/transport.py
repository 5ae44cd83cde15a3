"""The seam every call to a provider goes through: ``Transport.send(ProviderRequest)`` answers
one deployment of one backend with a frozen ``ProviderReply``, or raises ``UpstreamFailure``.

Why a seam: the gateway's accounting (the attempt log, circuit breakers, budget holds) lives
above it and litellm lives below it, so neither reaches into the other. The shape is httpx's
(https://www.python-httpx.org/advanced/transports/): a transport handles one request and
returns one response, and what to try next (redirects there, the next deployment of a group
and the next candidate here: gateway/serving/forwarding/deployments.py and attempts.py) is the
caller's loop. As ``httpx.MockTransport`` takes a handler, ``MockTransport`` here answers from
a function, so a test can stand in for every provider without a socket. The one real
transport is ``LitellmTransport`` (gateway/provider/litellm_transport.py).
"""

from __future__ import annotations

import abc
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import pydantic

from gateway.config import Backend
from gateway.provider.failures import UpstreamFailure
from gateway.provider.open_stream import OpenStream

# What a request asks of the provider: one per litellm entry point the gateway calls.
Operation = Literal["chat", "responses", "text_completion", "anthropic_messages", "embedding",
                    "image_generation", "speech", "transcription", "moderation", "rerank"]


@runtime_checkable
class BinaryBody(Protocol):
    """A reply that is bytes, not JSON (speech): openai's ``HttpxBinaryResponseContent``."""

    content: bytes


# The provider's answer as it came: a litellm / openai model object or a plain mapping,
# a speech reply's bytes, a transcription's text, or a stream whose first event has arrived.
ReplyBody = pydantic.BaseModel | Mapping[str, Any] | BinaryBody | str | OpenStream


@dataclass(frozen=True)
class ProviderRequest:
    """One call to send: ``operation`` with ``params`` (the entry point's keyword arguments:
    messages, input, prompt, ... and the client's options) to deployment ``deployment`` (an
    index into ``backend.deployment_params()``) of ``backend``; ``stream``: answered as an
    ``OpenStream`` once its first event came."""

    operation: Operation
    backend: Backend
    params: Mapping[str, Any]
    stream: bool = False
    deployment: int = 0


@dataclass(frozen=True)
class TokenUsage:
    """The token counts a reply reports (either may be missing)."""

    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class ProviderReply:
    """What one deployment answered: ``body`` as the provider gave it, the ``usage`` it
    reports (None when streamed: it comes with the last event), and which deployment of the
    backend answered (its price is what is settled)."""

    body: ReplyBody
    deployment: int
    usage: TokenUsage | None = None

    @property
    def stream(self) -> OpenStream:
        """The opened stream of a streamed request."""
        assert isinstance(self.body, OpenStream), "a streamed request's reply"
        return self.body


def token_usage(body: object) -> TokenUsage | None:
    """The counts in a body's ``usage`` (chat's prompt/completion names or the Responses and
    Messages input/output names), None when it has none."""
    usage = body.get("usage") if isinstance(body, Mapping) else getattr(body, "usage", None)
    if usage is None:
        return None

    def count(*names: str) -> int | None:
        for name in names:
            v = usage.get(name) if isinstance(usage, Mapping) else getattr(usage, name, None)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
        return None

    return TokenUsage(count("prompt_tokens", "input_tokens"),
                      count("completion_tokens", "output_tokens"))


class Transport(abc.ABC):
    """Sends one ``ProviderRequest``; every provider error comes out as ``UpstreamFailure``."""

    @abc.abstractmethod
    async def send(self, request: ProviderRequest) -> ProviderReply:
        """The deployment's reply; raises UpstreamFailure (never a provider's own error)."""


Handler = Callable[[ProviderRequest], Awaitable[ReplyBody]]


@dataclass
class MockTransport(Transport):
    """A transport that answers every request from ``handler`` (a test's stand-in for every
    provider, as ``httpx.MockTransport``); ``requests`` is what it was sent, in order. The
    handler raises UpstreamFailure to fail a call."""

    handler: Handler
    requests: list[ProviderRequest] = field(default_factory=list)

    async def send(self, request: ProviderRequest) -> ProviderReply:
        self.requests.append(request)
        body = await self.handler(request)
        if request.stream and not isinstance(body, OpenStream):
            raise UpstreamFailure(502, "bad_response", "a stream was asked for", True)
        return ProviderReply(body, request.deployment,
                             None if request.stream else token_usage(body))
