"""A backend's limits and timeout where its config entry sets none: from litellm's model map.

A LiteLLM config pasted as it is often has no ``model_info`` limits; LiteLLM's proxy then reads
them from its model map. So does Tollgate: ``max_output_tokens`` and ``max_input_tokens`` come
from the map entry of the entry's ``base_model``, else of its ``litellm_params.model`` (64000
and 200000 for ``anthropic/claude-sonnet-4-5`` in litellm 1.110.2's map), so Claude Code's
``max_tokens: 32000`` is served on Sonnet. ``price_like`` borrows a price only, never limits.
A model the map does not list keeps ``ModelInfo``'s defaults (4096 output tokens, no window).

A call's timeout, where neither ``litellm_params.timeout`` nor ``model_info.timeout`` is set,
grows with the output it may generate (``attempt_timeout``):
    t = t_0 + m · s_tok,   t_0 = ``ModelInfo.timeout``'s default (60 s), m the output cap,
    s_tok = 3600 s / 128000 tokens: the anthropic SDK's own rule for how long a non-streamed
    call may take (anthropic-sdk-python 2.17.0, ``_base_client._calculate_nonstreaming_timeout``:
    ``expected_time = 60 * 60 * max_tokens / 128_000``),
so a 32000-token answer has 960 s, not 60.
"""

from __future__ import annotations

from typing import Any

LIMITS = ("max_output_tokens", "max_input_tokens")
SECONDS_PER_OUTPUT_TOKEN = 3600 / 128_000  # s_tok (module docstring)


def map_info(base_model: Any, model: Any) -> dict[str, Any]:
    """litellm's map entry for ``base_model``, else ``model``; {} when it lists neither."""
    from gateway.provider import litellm_maps  # litellm loaded late, when a map is read

    for name in (base_model, model):
        if isinstance(name, str) and name:
            info = litellm_maps.model_info(name)
            if info is not None:
                return info
    return {}


def map_entry(info: Any, params: dict[str, Any]) -> dict[str, Any]:
    """litellm's map entry for a deployment (``info``: its ModelInfo, whose extra fields may
    name a ``base_model``; ``params``: its litellm_params), or {}."""
    return map_info((info.model_extra or {}).get("base_model"), params.get("model"))


def mapped_limits(set_fields: set[str], base_model: Any, model: Any) -> dict[str, int]:
    """The limits (``LIMITS``) the config did not set, from litellm's map (module docstring)."""
    wanted = [f for f in LIMITS if f not in set_fields]
    if not wanted:
        return {}
    info = map_info(base_model, model)
    return {f: int(info[f]) for f in wanted
            if isinstance(info.get(f), int) and not isinstance(info.get(f), bool)
            and info[f] > 0}


def sized_timeout(base_s: float, output_cap: int | None) -> float:
    """t = t_0 + m · s_tok (module docstring); t_0 alone without a cap."""
    return base_s + max(0, output_cap or 0) * SECONDS_PER_OUTPUT_TOKEN
