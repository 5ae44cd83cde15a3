"""LiteLLM's fallbacks: the models a request may move on to when the one it asked for fails.

They come from the request body (``fallbacks``) or, when the body gives none, from the
config's ``fallbacks`` for the asked model (``router_settings.fallbacks``). They are tried
after the request's own candidates, in the order given, each at most once, within the
tenant's allowed models and the calling key's ``models`` (gateway/serving/plan/key_models.py: a
body fallback the key may not call is its 403, a config fallback is skipped), within the usual
``max_attempts``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.auth import key_model_denied
from gateway.config import Settings
from gateway.errors import invalid
from gateway.serving.plan.key_models import key_may_answer


def with_fallbacks(settings: Settings, candidates: list[str], asked: str,
                   requested: tuple[str, ...], policy_allowed: list[str] | None,
                   key_models: Sequence[str] | None = None) -> list[str]:
    """``candidates`` followed by the fallbacks that apply to this request."""
    names = list(requested) or settings.fallbacks.get(asked, [])
    unknown = [n for n in names if settings.backend(n) is None]
    if unknown:
        raise invalid(f"unknown model(s) in fallbacks: {unknown}", param="fallbacks")
    denied = [n for n in requested if not key_may_answer(settings, key_models, n)]
    if denied:
        raise key_model_denied(key_models, denied[0], param="fallbacks")
    out = list(candidates)
    for n in names:
        if n not in out and (policy_allowed is None or n in policy_allowed) \
                and key_may_answer(settings, key_models, n):
            out.append(n)
    return out
