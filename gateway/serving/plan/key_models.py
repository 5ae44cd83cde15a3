"""Which backends may answer for the calling key: its ``models`` list holds for every backend
that answers, not only for the model the request names.

A key's ``models`` (LiteLLM's ``/key/generate`` field) lists backends (exactly or by a
``prefix*`` wildcard), aliases (``model_group_alias``) and routes. A listed route grants the
backends the route may use; a listed backend or alias grants itself. A routed request's
candidates are its route's, granted by construction (the key must list the route to call it,
gateway/auth.py ``require_model``); the request's ``fallbacks`` and the config's fallbacks
(context-window fallbacks included: they are the candidates left when the asked backend's
window is too small) are held to this set (gateway/serving/plan/fallbacks.py), as LiteLLM
Proxy does: a client-side fallback the key may not call is refused with the key's 403
(LiteLLM PR #4321, "ensure user has access to fallback models"), a server-side one is skipped
(LiteLLM PR #38572: "unauthorized targets are skipped; if none remain, the primary model's own
error is returned").
"""

from __future__ import annotations

from collections.abc import Iterable

from gateway.auth import ALL_MODELS
from gateway.config import Settings


def _matches(entry: str, name: str) -> bool:
    return name == entry or (entry.endswith("*") and name.startswith(entry[:-1]))


def key_may_answer(settings: Settings, key_models: Iterable[str] | None, name: str) -> bool:
    """Whether backend ``name`` may answer a request of a key whose ``models`` list is
    ``key_models`` (None or empty: every model its tenant may call)."""
    if not key_models:
        return True
    entries = tuple(key_models)
    if ALL_MODELS.intersection(entries):
        return True
    for entry in entries:
        if _matches(entry, name):
            return True
        resolved = settings.resolve_alias(entry)
        if resolved == name:
            return True
        if resolved in settings.routes and any(
                b.model_name == name for b in settings.route_backends(resolved)):
            return True
    return False
