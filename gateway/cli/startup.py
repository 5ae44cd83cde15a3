"""What `tollgate serve` prints before it serves: one short block an operator reads at once.

Config file, database, router version, each backend and how requests reach it, provider keys
the environment lacks, whether the admin API is on, and the dashboard URL. Problems that
would otherwise surface later as a 502 or a 403 are named here. Each section is one function
so further sections (e.g. how each backend is known to the router) slot into ``summary``.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from gateway.auth import admin_key
from gateway.config import Backend, Settings
from gateway.litellm_sections import ENV_PREFIX
from gateway.pool import Pool
from gateway.pool.exploring import exploring
from gateway.pool.promise import claim_carried, reference_queries
from gateway.price_like import price_origin, unpriced_fix
from gateway.provider import litellm_compat
from gateway.provider.litellm_callbacks import describe as describe_callbacks

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


def unknown_provider(params: dict[str, Any]) -> str | None:
    """"unknown provider 'opnai' (did you mean openai?)" for a deployment whose model's
    provider prefix litellm does not know (``litellm.provider_list``); None when litellm can
    call it (a known prefix, ``custom_llm_provider``, or a model litellm resolves alone)."""
    from gateway.provider import litellm_maps

    model = str(params.get("model") or "")
    if params.get("custom_llm_provider") or "/" not in model:
        return None
    prefix = model.split("/", 1)[0]
    providers = litellm_maps.provider_names()
    if prefix in providers:
        return None
    try:
        litellm_maps.llm_provider(model, api_base=params.get("api_base"))
    except Exception:  # noqa: BLE001 - litellm's way of saying it cannot route the model
        close = difflib.get_close_matches(prefix, providers, n=1)
        return f"unknown provider {prefix!r}" + (f" (did you mean {close[0]}?)" if close else "")
    return None


def backend_lines(pool: Pool) -> list[str]:
    settings, prices = pool.settings, pool.prices
    width = max((len(b.model_name) for b in settings.model_list), default=0)
    lines = []
    for b in settings.model_list:
        routes = routes_of(pool, b)
        typos = [t for p in b.deployment_params() if (t := unknown_provider(p))]
        how = (f"{typos[0]} in litellm_params.model: litellm cannot call it" if typos else
               f"routed by {', '.join(routes)}" if routes else
               "wildcard: passthrough only, to any model it matches, each priced from "
               "litellm's map (an unpriced one is refused)" if b.is_wildcard else
               f"passthrough only (the router does not know {b.router_model!r})")
        n = len(b.deployment_params())
        group = f", group of {n} deployments" if n > 1 else ""
        p = prices.get(b.model_name)
        price = (f"  ${p.input_per_token * 1e6:g}/${p.output_per_token * 1e6:g} per 1M in/out"
                 f" ({price_origin(b)})" if p else "")
        lines.append(f"{b.model_name:<{width}}  {how}{group}{price}")
    lines += [f"{alias:<{width}}  alias of {target}"
              for alias, target in settings.model_group_alias.items()]
    return lines or ["none (model_list is empty: only routes without backends)"]


DEFAULT_ROUTES_NOTE = ("no routes: in config: auto, auto-balanced, auto-cheap keep a promise "
                       "by default (a λ route: cost_weight without max_drop)")


def promise_lines(pool: Pool) -> list[str]:
    """Each route's promise against its reference, and how each backend's quality is known."""
    routes = pool.routes
    lines = [DEFAULT_ROUTES_NOTE] if pool.settings.routes_by_default else []
    lines += [f"{name}: realized quality {p.describe()}"
              + (" [default drop]" if routes[name].promise_by_default else "")
              for name, p in pool.promises.items()]
    lines += [f"{name}: cost_weight {r.cost_weight:g} (λ route, no promise)"
              if r.max_drop is None else f"{name}: max_drop {r.max_drop:g}, no backend "
              "the router knows: no promise" for name, r in routes.items()
              if name not in pool.promises]
    lines += [f"{name}: explore_share ignored: a promise route serves a prior backend only "
              "where it is within the promise (shadow calls learn the rest)"
              for name, r in routes.items()
              if r.max_drop is not None and "explore_share" in r.model_fields_set]
    lines += claim_lines(pool)
    width = max((len(b) for b in pool.backends), default=0)
    lines += [f"{b:<{width}}  quality {how}" for b in pool.backends
              if (how := pool.how_known(b)) is not None]
    return lines or ["none"]


def claim_lines(pool: Pool) -> list[str]:
    """Per promising route with a member known by a vendor's claim alone: which of them carry
    its saving on the claim alone (the share of the reference prompts its rule sends them)."""
    carried = claim_carried(pool.settings, pool.known, pool.qualities, pool.prices,
                            pool.promises, reference_queries(pool.router, pool.phi_ref))
    return [f"{route}: saving on a vendor claim alone: "
            + (", ".join(f"{b} ({s:.0%} of reference prompts)" for b, s in shares.items())
               if shares else "none (its claim-only backends are not chosen)")
            for route, shares in carried.items()]


def missing_provider_keys(settings: Settings) -> dict[str, list[str]]:
    """Environment variable → backends that need it: ``name`` when none of the backend's
    deployments can answer without a missing key (it will fail, 502), ``name (k of n
    deployments)`` when others in its group answer (it fails over to them)."""
    missing: dict[str, list[str]] = {}
    for b in settings.model_list:
        per_deployment = [_missing_for(p) for p in b.deployment_params()]
        working = sum(1 for keys in per_deployment if not keys)
        for name in dict.fromkeys(k for keys in per_deployment for k in keys):
            lacking = sum(1 for keys in per_deployment if name in keys)
            label = (b.model_name if not working else
                     f"{b.model_name} ({lacking} of {len(per_deployment)} deployments)")
            missing.setdefault(name, []).append(label)
    return missing


def provider_key_lines(missing: dict[str, list[str]]) -> list[str]:
    """One line per missing key: "will fail (502)" only for backends with no deployment
    left; a group whose other deployments answer fails over to them."""
    lines = []
    for key, labels in missing.items():
        failing = [x for x in labels if not x.endswith(" deployments)")]
        partial = [x for x in labels if x.endswith(" deployments)")]
        parts = ([f"{_some(failing)} will fail (502)"] if failing else []) + (
            [f"{_some(partial)} fail over to the group's other deployments"] if partial else [])
        lines.append(f"{key} missing: {'; '.join(parts)}")
    return lines or ["none missing"]


def admin_line(settings: Settings, config_path: Path) -> str:
    """Whether the admin API is on; when off, the command that makes the first tenant key
    (the CLI writes the same database the gateway reads, no admin key needed)."""
    if admin_key(settings):
        return "on (/admin, key from config or TOLLGATE_ADMIN_KEY)"
    config = "" if config_path == Path("config.yaml") else f" --config {config_path}"
    return ("off (set admin_key, general_settings.master_key or TOLLGATE_ADMIN_KEY); the "
            f"first tenant key: tollgate tenants create NAME --budget-usd 10{config}")


def database_problem(engine: Any, timeout_s: float = 3.0) -> str | None:
    """Why the database does not answer now (None: it answered ``SELECT 1``), for the
    startup block; a probe that has not answered within ``timeout_s`` is a problem too."""
    import threading

    from gateway.store.engine import describe_error

    result: list[str | None] = []

    def probe() -> None:
        try:
            with engine.connect() as conn:
                conn.exec_driver_sql("SELECT 1")
            result.append(None)
        except Exception as e:  # noqa: BLE001 - any failure is what the block reports
            result.append(describe_error(e))

    thread = threading.Thread(target=probe, name="tollgate-db-probe", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return result[0] if result else f"no answer within {timeout_s:g} s"


def _missing_for(params: dict[str, Any]) -> list[str]:
    key = params.get("api_key")
    if isinstance(key, str) and key.startswith(ENV_PREFIX):
        from gateway.litellm_sections import resolve_env

        return [] if resolve_env(key) else [key[len(ENV_PREFIX):]]
    if key or params.get("api_base"):
        return []  # a literal key, or a self-hosted endpoint that may need none
    from gateway.provider import litellm_maps

    try:
        return litellm_maps.missing_keys(str(params.get("model")))
    except Exception:  # noqa: BLE001 - an unknown provider: nothing to say
        return []


def _some(names: list[str], shown: int = 3) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def cache_line(settings: Settings) -> str:
    """The response cache as configured (gateway/serving/forwarding/response_cache.py)."""
    c = settings.cache
    if not c.enabled:
        return "off (cache.enabled, litellm_settings.cache)"
    if c.type == "local":
        return (f"local, ttl {c.ttl_s:g}s, at most {c.max_entries} answers / "
                f"{c.max_bytes / 2**20:g} MB per process")
    url = c.redis_url or settings.reliability.resolved().redis_url
    return f"redis {safe_url(url) if url else '(none set)'}, ttl {c.ttl_s:g}s, shared by replicas"


def summary(config_path: Path, settings: Settings, pool: Pool, base_url: str, *,
            database_problem: str | None = None, hub_problem: str | None = None) -> list[str]:
    """The startup block, one string per line."""
    from gateway import __version__

    keys = provider_key_lines(missing_provider_keys(settings))
    admin = admin_line(settings, config_path)
    database: list[str] = [safe_url(settings.database_url)]
    if database_problem is not None:
        database.append(f"unreachable: {database_problem}; serving anyway (503 where the "
                        "database is needed), retrying in the background")
    rows: list[tuple[str, str | list[str]]] = [
        ("config", str(config_path)),
        ("database", database),
        ("router", f"{pool.version} ({len(pool.router.model_names)} experts)"),
        ("litellm", litellm_compat.startup_lines()),
        *([("tokenizers", (f"Hugging Face hub {hub_problem}: local cache only, litellm "
                           "counts the others with tiktoken"))] if hub_problem else []),
        ("backends", backend_lines(pool)),
        ("promises", promise_lines(pool)),
        ("learning", exploring(pool).lines(pool)),
        ("provider keys", keys),
        ("admin API", admin),
        ("callbacks", describe_callbacks(settings) or ["none (litellm_settings callbacks)"]),
        ("cache", cache_line(settings)),
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
    lines += unpriced_warnings(pool)
    return lines


def unpriced_warnings(pool: Pool) -> list[str]:
    """A warning per backend without a price (none in litellm's map, or its 0 in and 0 out):
    never billed at $0, every request to it refused with 503 ``backend_unpriced``."""
    return [f"  warning: backend {b.model_name!r} has no price, requests to it are refused "
            f"(503 backend_unpriced): {unpriced_fix(b)}"
            for b in pool.settings.model_list
            if not b.is_wildcard and b.model_name not in pool.prices]
