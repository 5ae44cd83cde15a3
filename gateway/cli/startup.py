"""What `tollgate serve` prints before it serves: one short block an operator reads at once.

Config file, database, router version, each backend and how requests reach it, provider keys
the environment lacks, whether the admin API is on, and the dashboard URL. Problems that
would otherwise surface later as a 502 or a 403 are named here. Each section is one function
so further sections (e.g. how each backend is known to the router) slot into ``summary``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gateway import litellm_compat
from gateway.auth import admin_key
from gateway.config import Backend, Settings
from gateway.litellm_callbacks import describe as describe_callbacks
from gateway.litellm_sections import ENV_PREFIX
from gateway.pool import Pool

LABEL_WIDTH = 11


def safe_url(url: str) -> str:
    """A database URL with its password hidden."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # noqa: BLE001 - only for display
        return "<unparseable URL>"


def routes_of(pool: Pool, b: Backend) -> list[str]:
    """The routes that may choose backend ``b`` (empty: the router does not know it)."""
    return [name for name, pairs in pool.route_experts.items()
            if any(backend == b.model_name for _, backend in pairs)]


def backend_lines(pool: Pool) -> list[str]:
    settings, prices = pool.settings, pool.prices
    width = max((len(b.model_name) for b in settings.model_list), default=0)
    lines = []
    for b in settings.model_list:
        routes = routes_of(pool, b)
        how = (f"routed by {', '.join(routes)}" if routes else
               "wildcard: passthrough only, to any model it matches, each priced from "
               "litellm's map (an unpriced one is refused)" if b.is_wildcard else
               f"passthrough only (the router does not know {b.router_model!r})")
        n = len(b.deployment_params())
        group = f", group of {n} deployments" if n > 1 else ""
        p = prices.get(b.model_name)
        price = (f"  ${p.input_per_token * 1e6:g}/${p.output_per_token * 1e6:g} per 1M in/out"
                 if p else "")
        lines.append(f"{b.model_name:<{width}}  {how}{group}{price}")
    lines += [f"{alias:<{width}}  alias of {target}"
              for alias, target in settings.model_group_alias.items()]
    return lines or ["none (model_list is empty: only routes without backends)"]


def promise_lines(pool: Pool) -> list[str]:
    """Each route's promise against its reference, and how each backend's quality is known."""
    lines = [f"{name}: realized quality {p.describe()}" for name, p in pool.promises.items()]
    lines += [f"{name}: cost_weight {r.cost_weight:g} (no promise)"
              for name, r in pool.routes.items() if name not in pool.promises]
    width = max((len(b) for b in pool.backends), default=0)
    lines += [f"{b:<{width}}  quality {how}" for b in pool.backends
              if (how := pool.how_known(b)) is not None]
    return lines or ["none"]


def missing_provider_keys(settings: Settings) -> dict[str, list[str]]:
    """Environment variable → backends that need it and will fail (502) without it."""
    missing: dict[str, list[str]] = {}
    for b in settings.model_list:
        for params in b.deployment_params():
            for name in _missing_for(params):
                if b.model_name not in missing.setdefault(name, []):
                    missing[name].append(b.model_name)
    return missing


def _missing_for(params: dict[str, Any]) -> list[str]:
    key = params.get("api_key")
    if isinstance(key, str) and key.startswith(ENV_PREFIX):
        from gateway.litellm_sections import resolve_env

        return [] if resolve_env(key) else [key[len(ENV_PREFIX):]]
    if key or params.get("api_base"):
        return []  # a literal key, or a self-hosted endpoint that may need none
    from router_core.litellm_env import litellm

    try:
        found = litellm.validate_environment(model=str(params.get("model")))
    except Exception:  # noqa: BLE001 - an unknown provider: nothing to say
        return []
    return list(found.get("missing_keys") or [])


def _some(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def summary(config_path: Path, settings: Settings, pool: Pool, base_url: str) -> list[str]:
    """The startup block, one string per line."""
    from gateway import __version__

    missing = missing_provider_keys(settings)
    keys = [f"{k} missing: {_some(v)} will fail (502)" for k, v in missing.items()] or [
        "none missing"]
    admin = ("on (/admin, key from config or TOLLGATE_ADMIN_KEY)" if admin_key(settings) else
             "off: set admin_key, general_settings.master_key or TOLLGATE_ADMIN_KEY")
    rows: list[tuple[str, str | list[str]]] = [
        ("config", str(config_path)),
        ("database", safe_url(settings.database_url)),
        ("router", f"{pool.version} ({len(pool.router.model_names)} experts)"),
        ("litellm", litellm_compat.startup_lines()),
        ("backends", backend_lines(pool)),
        ("promises", promise_lines(pool)),
        ("provider keys", keys),
        ("admin API", admin),
        ("callbacks", describe_callbacks(settings) or ["none (litellm_settings callbacks)"]),
        ("dashboard", f"{base_url}/dashboard"),
        ("API", f"{base_url}/v1  (routes: {', '.join(settings.routes) or 'none'})"),
    ]
    lines = [f"tollgate {__version__}"]
    for label, value in rows:
        values = value if isinstance(value, list) else [value]
        for i, v in enumerate(values):
            lines.append(f"  {label if i == 0 else '':<{LABEL_WIDTH + 2}} {v}")
    if settings.ignored_keys:
        lines.append("  warning: LiteLLM settings Tollgate does not use (ignored): "
                     + ", ".join(settings.ignored_keys))
    return lines
