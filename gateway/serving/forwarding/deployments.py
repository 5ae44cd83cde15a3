"""A backend's deployments tried in turn through the transport (gateway/provider/transport.py)
until one answers: a retryable failure moves on to the next deployment of the group
(gateway/provider/deployments.py ``deployment_order``), any other, or the last, is raised.

Two loops share that rule. ``over_deployments`` is the plain one: a timeout the provider may
bill moves on like any retryable failure, and the caller sees it as the reply's
``billable_failures`` (the endpoints that name their backend charge what they held for it).
``Attempts`` (attempts.py) runs its own, which charges each billable failure to the request's
budget hold and tries the next deployment only if the hold covers it; nothing calls back into
either from below.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from gateway.config import Backend
from gateway.provider.deployments import deployment_order, next_deployment
from gateway.provider.failures import UpstreamFailure
from gateway.provider.transport import ProviderReply, ProviderRequest, Transport


@dataclass(frozen=True)
class GroupReply:
    """The answering deployment's reply and the billable failures of the ones before it."""

    reply: ProviderReply
    billable_failures: tuple[UpstreamFailure, ...] = ()


async def over_deployments(transport: Transport, request: ProviderRequest) -> GroupReply:
    """``request`` to each of its backend's deployments in ``deployment_order`` until one
    answers (module docstring); raises the last UpstreamFailure."""
    order = deployment_order(request.backend)
    billable: list[UpstreamFailure] = []
    for i, deployment in enumerate(order):
        try:
            reply = await transport.send(replace(request, deployment=deployment))
        except UpstreamFailure as failure:
            if failure.billable:
                billable.append(failure)
            if not next_deployment(request.backend, failure, len(order) - i - 1):
                raise
            continue
        return GroupReply(reply, tuple(billable))
    raise AssertionError("a backend has at least one deployment")


async def chat_completion(transport: Transport, backend: Backend, messages: list[dict],
                          params: dict[str, Any]) -> ProviderReply:
    """One non-streamed chat call over ``backend``'s deployments (``over_deployments``): the
    learning side's judge and shadow calls; raises UpstreamFailure."""
    group = await over_deployments(
        transport, ProviderRequest("chat", backend, {**params, "messages": messages}))
    return group.reply
