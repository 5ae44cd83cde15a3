"""Which deployment of a backend to try, and for how long: a backend with several deployments
(a LiteLLM model group) is one attempt whose deployments are tried in a weighted random order
(LiteLLM's ``simple-shuffle``, ``litellm_params.weight``).

Why not ``litellm.Router`` for groups: it retries, cools down and falls back on its own,
out of sight of the gateway's circuit breakers, attempt log and budget hold; the group's loop
is the gateway's own (gateway/serving/forwarding/deployments.py) over one plain call per
deployment (gateway/provider/transport.py).
"""

from __future__ import annotations

import logging
import random
from typing import Any

from gateway.config import Backend
from gateway.config.model_map import sized_timeout
from gateway.provider.failures import UpstreamFailure

log = logging.getLogger(__name__)


def deployment_order(backend: Backend) -> list[int]:
    """The deployments to try (indices into ``backend.deployment_params()``), in a random
    order weighted by ``litellm_params.weight`` (Efraimidis–Spirakis: sort by u^(1/w), u
    uniform on (0, 1))."""
    deployments = backend.deployment_params()
    if len(deployments) == 1:
        return [0]

    def key(i: int) -> float:
        w = deployments[i].get("weight")
        w = float(w) if isinstance(w, (int, float)) and w > 0 else 1.0
        return random.random() ** (1.0 / w)

    return sorted(range(len(deployments)), key=key, reverse=True)


def next_deployment(backend: Backend, failure: UpstreamFailure, left: int) -> bool:
    """True when a failed deployment's group has another deployment worth trying."""
    if not failure.retryable or left == 0:
        return False
    log.info("backend %s: a deployment failed (%s); trying the next of its group",
             backend.model_name, failure)
    return True


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
