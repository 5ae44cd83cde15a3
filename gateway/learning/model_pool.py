"""Backends that travel with a router artifact, so a running gateway adopts new models.

``tollgate models add`` describes a new model, inserts its expert into the router and
records the backend that serves it (a LiteLLM ``model_list`` entry) in the artifact's
``config["backends"]``, besides appending it to config.yaml. A gateway that hot-swaps to
that artifact version calls ``adopt_backends``: backends it does not know yet join its pool
(settings and prices) in one reference assignment each, with no restart and no retraining.
Only ``os.environ/NAME`` references to secrets are ever stored in an artifact.

Example::

    swapper = HotSwapper(engine, holder, on_swap=lambda r: adopt_backends(ctx, r))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config import Backend, Settings
from router_core.router import Router

ARTIFACT_KEY = "backends"


def artifact_backends(router: Router) -> dict[str, dict]:
    """model_name → LiteLLM model_list entry, for the backends recorded in ``router``."""
    raw = dict(router.config or {}).get(ARTIFACT_KEY) or {}
    return {str(k): dict(v) for k, v in dict(raw).items()}


def merged_settings(settings: Settings, entries: Mapping[str, Mapping[str, Any]]) -> Settings:
    """``settings`` with the backends of ``entries`` it lacks appended to its pool."""
    known = {b.model_name for b in settings.model_list}
    new = [Backend.model_validate(dict(e)) for n, e in entries.items() if n not in known]
    if not new:
        return settings
    return settings.model_copy(update={"model_list": [*settings.model_list, *new]})


def adopt_backends(ctx: Any, router: Router) -> list[str]:
    """Add the router's recorded backends the gateway lacks to ``ctx`` (settings, prices);
    returns their names. Called after a hot swap, off the event loop."""
    from gateway.pricing import resolve_prices

    entries = artifact_backends(router)
    merged = merged_settings(ctx.settings, entries)
    added = [b.model_name for b in merged.model_list[len(ctx.settings.model_list) :]]
    if not added:
        return []
    only_new = merged.model_copy(update={"model_list": merged.model_list[-len(added) :]})
    prices = {**ctx.prices, **resolve_prices(only_new)}  # raises on an unpriced backend
    ctx.prices = prices  # prices first: a request that sees a backend must find its price
    ctx.settings = merged
    return added
