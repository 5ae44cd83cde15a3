"""Backends that travel with a router artifact, so a running gateway adopts new models.

``tollgate models add`` describes a new model, inserts its expert into the router and
records the backend that serves it (a LiteLLM ``model_list`` entry) in the artifact's
``config["backends"]``, besides appending it to config.yaml. A gateway that hot-swaps to
that artifact version builds its new pool with ``adopted_pool``: backends it does not know yet
join (settings and prices) in the pool it swaps in whole, with no restart and no retraining.
Only ``os.environ/NAME`` references to secrets are ever stored in an artifact.

Example::

    settings, prices = adopted_pool(pool.settings, pool.prices, new_router)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.config import Backend, Settings
from gateway.pricing import Price, resolve_prices
from router_core.runtime.router import Router

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


def adopted_pool(settings: Settings, prices: Mapping[str, Price], router: Router
                 ) -> tuple[Settings, Mapping[str, Price]]:
    """``settings`` and ``prices`` with the backends ``router``'s artifact records that they
    lack (raises on an unpriced one: an artifact's backend always carries its price)."""
    merged = merged_settings(settings, artifact_backends(router))
    added = len(merged.model_list) - len(settings.model_list)
    if not added:
        return settings, prices
    only_new = merged.model_copy(update={"model_list": merged.model_list[-added:]})
    return merged, {**prices, **resolve_prices(only_new)}
