"""What kind of calls a backend serves: ``chat``, ``embedding``, ... (LiteLLM's ``mode``).

``model_info.mode`` when the config says it, else litellm's model map for the backend's
``base_model`` or litellm model, else ``chat``. A route only ever chooses among backends of
the request's mode (today: chat completions route, other modes are reached by name), so an
embedding model in ``model_list`` never wins ``auto`` on price.
"""

from __future__ import annotations

from gateway.config import Backend
from gateway.provider import litellm_maps

CHAT = "chat"


def backend_mode(b: Backend) -> str:
    """The backend's mode (module docstring)."""
    extra = b.model_info.model_extra or {}
    if extra.get("mode"):
        return str(extra["mode"])
    for name in (extra.get("base_model"), b.litellm_model):
        mode = _litellm_mode(str(name)) if name else None
        if mode:
            return mode
    return CHAT


def _litellm_mode(model: str) -> str | None:
    info = litellm_maps.model_info(model)
    return None if info is None else info.get("mode")
