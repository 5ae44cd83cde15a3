"""A provider's stream once its first event has arrived: until then nothing reached the
client, so a failure before it may still go to the next deployment or candidate."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from gateway.provider.failures import UpstreamFailure


def unclassified(e: BaseException) -> UpstreamFailure:
    """A stream's error when its transport names no classifier: a bad answer, retryable."""
    return UpstreamFailure(502, "bad_response", str(e) or type(e).__name__, True)


@dataclass
class OpenStream:
    """A stream whose first chunk has arrived (so nothing reached the client yet before)."""

    first: Any | None  # None: the upstream ended the stream without a chunk
    rest: AsyncIterator[Any]
    timeout: float
    # what an error while reading it means (the transport's classifier: litellm_errors.py)
    classify: Callable[[BaseException], UpstreamFailure] = unclassified

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
