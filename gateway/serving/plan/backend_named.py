"""The backend a request names: the one way every endpoint that is not routed finds it.

Chat, Responses and completions name a backend through their plan (its ``model`` already
resolved through ``model_group_alias`` and the key's models checked, planning.py
``start_plan``; a model a wildcard backend matched is in the plan's pool by its own name);
embeddings and the unit endpoints name one directly (``unit_backend``). Either way the backend
must be known, not a wildcard itself, allowed by the tenant's policy (404 otherwise), and of
the endpoint's litellm mode (``model_info.mode``, else litellm's model map: gateway/pool/modes.py;
400 otherwise).
"""

from __future__ import annotations

from typing import Any

from gateway.auth import require_model
from gateway.config import Backend
from gateway.errors import invalid, model_not_found
from gateway.pool import Pool
from gateway.pool.modes import CHAT
from gateway.store.policy import TenantPolicy
from gateway.store.records import Tenant


def known_backend(pool: Pool, policy: TenantPolicy, model: str) -> Backend:
    """The backend ``model`` names, if the tenant policy allows it (404 otherwise): by its
    name, or for a model a wildcard backend matched, by that name or the wildcard's; of any
    mode (``of_mode`` checks it)."""
    backend = pool.backend(model)
    allowed = policy.allowed_models
    if backend is None or backend.is_wildcard or (
            allowed is not None and model not in allowed
            and (backend.wildcard is None or backend.wildcard not in allowed)):
        raise model_not_found(model)
    return backend


def of_mode(pool: Pool, backend: Backend, mode: str, default: str | None = None,
            hint: str = "") -> Backend:
    """``backend`` if its litellm mode (``default`` when it has none) is ``mode``; a 400
    naming both otherwise (``hint``: where a model of its mode is answered)."""
    name = backend.model_name
    has = pool.modes.get(name, default)
    if has != mode:
        raise invalid(f"{name!r} is a model of mode {has!r}, not {mode!r}{hint}",
                      param="model", code="model_not_supported")
    return backend


def named_backend(plan: Any) -> Backend:
    """The backend a plan's ``model`` names (``known_backend``), of any mode."""
    return known_backend(plan.pool, plan.policy, plan.request.model)


def passthrough_backend(plan: Any) -> Backend:
    """The named backend of a chat request: of chat's mode (400)."""
    return of_mode(plan.pool, named_backend(plan), CHAT, default=CHAT,
                   hint=" (an embedding model answers /v1/embeddings)")


def unit_backend(pool: Pool, tenant: Tenant, model: Any, mode: str) -> Backend:
    """The backend an embeddings or unit request's ``model`` names: resolved through
    ``model_group_alias``, one the calling key may call (403), known and allowed (404), of
    litellm mode ``mode`` (400)."""
    if not isinstance(model, str) or not model:
        raise invalid("'model' is required and must be a string", param="model")
    name = pool.settings.resolve_alias(model)
    require_model(tenant, model, name)
    return of_mode(pool, known_backend(pool, tenant.policy, name), mode)
