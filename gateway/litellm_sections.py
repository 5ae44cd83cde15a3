"""LiteLLM Proxy's config sections, translated into Tollgate's keys.

A LiteLLM proxy ``config.yaml`` has ``model_list`` plus ``router_settings``,
``litellm_settings`` and ``general_settings``. Tollgate reads ``model_list`` as it is; from the
three sections it maps what has a Tollgate meaning (``MAPPED``) and names every other key once
in a startup warning, so a LiteLLM user's file starts unchanged. A Tollgate key written in
the file wins over the LiteLLM key that maps to it.

This module works on plain mappings (before validation) so config.py stays one concept: the
typed settings.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

ENV_PREFIX = "os.environ/"

SECTIONS = ("router_settings", "litellm_settings", "general_settings")
# Other top-level LiteLLM keys a pasted file may carry: accepted, named in the warning.
IGNORED_TOP_LEVEL = ("environment_variables", "guardrails", "credential_list",
                     "mcp_servers", "callback_settings")

# section.key -> what it becomes (shown in docs/migrating-from-litellm.md and the warning)
MAPPED = {
    "general_settings.master_key": "admin_key",
    "general_settings.database_url": "database_url",
    "router_settings.num_retries": "max_attempts = num_retries + 1",
    "router_settings.fallbacks": "fallbacks",
    "router_settings.model_group_alias": "model_group_alias",
    "router_settings.allowed_fails": "reliability.circuit.failure_threshold = allowed_fails + 1",
    "router_settings.cooldown_time": "reliability.circuit.cooldown_s",
    "router_settings.redis_url": "reliability.redis_url",
    "router_settings.redis_host": "reliability.redis_url (with redis_port, redis_password)",
    "router_settings.redis_port": "reliability.redis_url",
    "router_settings.redis_password": "reliability.redis_url",
    "litellm_settings.drop_params": "drop_params",
    "litellm_settings.success_callback": "litellm_callbacks (handed to litellm)",
    "litellm_settings.failure_callback": "litellm_callbacks (handed to litellm)",
    "litellm_settings.callbacks": "litellm_callbacks (handed to litellm)",
    "litellm_settings.request_timeout": "model_info.timeout of backends that set none",
    "router_settings.timeout": "model_info.timeout of backends that set none",
    "router_settings.stream_timeout": "model_info.stream_timeout of backends that set none",
    "litellm_settings.cache": "cache.enabled",
    "litellm_settings.cache_params": "cache (type local or redis, ttl, namespace)",
}
# cache_params keys with a Tollgate meaning; any other is named in the startup warning
CACHE_PARAMS = ("type", "host", "port", "password", "url", "redis_url", "ttl", "namespace",
                "default_in_memory_ttl", "default_in_redis_ttl")


class SectionError(ValueError):
    """A LiteLLM section key has a value Tollgate cannot read (config.py reports it)."""


@dataclass(frozen=True)
class Translated:
    """A config mapping in Tollgate's keys, and the LiteLLM keys Tollgate does not use."""

    raw: dict[str, Any]
    ignored: tuple[str, ...]
    sources: dict[str, str]  # Tollgate key (dotted) → the LiteLLM key its value came from


def translate(raw: dict[str, Any]) -> Translated:
    """Fold the LiteLLM sections of ``raw`` into Tollgate keys; other keys pass unchanged."""
    out = {k: v for k, v in raw.items() if k not in SECTIONS and k not in IGNORED_TOP_LEVEL}
    ignored = [k for k in IGNORED_TOP_LEVEL if k in raw]
    sections: dict[str, dict[str, Any]] = {}
    for name in SECTIONS:
        section = raw.get(name) or {}
        if not isinstance(section, dict):
            raise SectionError(f"{name}: must be a mapping")
        sections[name] = section
        ignored += [f"{name}.{k}" for k in section
                    if f"{name}.{k}" not in MAPPED and not _same_as_ours(name, k, section[k])]
    router, lsettings, general = (sections[n] for n in SECTIONS)
    sources: dict[str, str] = {}

    def put(key: str, value: Any, source: str) -> None:
        if value is not None and out.get(key) is None:
            out[key] = value
            sources[key] = source

    put("admin_key", general.get("master_key"), "general_settings.master_key")
    put("database_url", general.get("database_url"), "general_settings.database_url")
    if router.get("num_retries") is not None:
        put("max_attempts", _int(router["num_retries"], "router_settings.num_retries") + 1,
            "router_settings.num_retries")
    if router.get("fallbacks") is not None:
        put("fallbacks", _fallbacks(router["fallbacks"]), "router_settings.fallbacks")
    if out.get("model_group_alias") is not None:
        out["model_group_alias"] = _aliases(out["model_group_alias"], "model_group_alias")
    if router.get("model_group_alias") is not None:
        put("model_group_alias", _aliases(router["model_group_alias"],
                                          "router_settings.model_group_alias"),
            "router_settings.model_group_alias")
    put("drop_params", lsettings.get("drop_params"), "litellm_settings.drop_params")
    callbacks = {k: _names(lsettings[k], f"litellm_settings.{k}")
                 for k in ("success_callback", "failure_callback", "callbacks")
                 if lsettings.get(k) is not None}
    if callbacks:
        put("litellm_callbacks", callbacks, "litellm_settings")
    reliability = dict(out.get("reliability") or {})
    circuit = dict(reliability.get("circuit") or {})
    if router.get("allowed_fails") is not None and "failure_threshold" not in circuit:
        circuit["failure_threshold"] = _int(router["allowed_fails"],
                                            "router_settings.allowed_fails") + 1
    if router.get("cooldown_time") is not None and "cooldown_s" not in circuit:
        circuit["cooldown_s"] = router["cooldown_time"]
        sources["reliability.circuit.cooldown_s"] = "router_settings.cooldown_time"
    if circuit:
        reliability["circuit"] = circuit
    redis_url = _redis_url(router)
    if redis_url and not reliability.get("redis_url"):
        reliability["redis_url"] = redis_url
    if reliability:
        out["reliability"] = reliability
    if lsettings.get("cache") is not None and out.get("cache") is None:
        cache, skipped = _cache(lsettings.get("cache"), lsettings.get("cache_params"))
        out["cache"] = cache
        ignored += skipped
        sources["cache"] = "litellm_settings.cache"
    if isinstance(out.get("model_list"), list):
        # as in LiteLLM, the Router's timeout wins over litellm.request_timeout
        timeouts = {"timeout": _seconds(router, "timeout", lsettings.get("request_timeout")),
                    "stream_timeout": _seconds(router, "stream_timeout", None)}
        out["model_list"] = [_with_timeouts(e, timeouts) for e in out["model_list"]]
    return Translated(raw=out, ignored=tuple(ignored), sources=sources)


def _same_as_ours(section: str, key: str, value: Any) -> bool:
    """Settings whose LiteLLM value is what Tollgate does anyway: no warning for them."""
    return section == "router_settings" and key == "routing_strategy" and (
        value in (None, "simple-shuffle"))


def _int(v: Any, key: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise SectionError(f"{key}: must be a non-negative integer, got {v!r}")
    return v


def _fallbacks(v: Any) -> dict[str, list[str]]:
    """LiteLLM's ``[{"gpt-4o": ["gpt-4o-mini", ...]}, ...]`` (or a mapping) → name → names."""
    items = v.items() if isinstance(v, dict) else None
    if items is None and isinstance(v, list) and all(isinstance(x, dict) for x in v):
        items = [kv for x in v for kv in x.items()]
    if items is None:
        raise SectionError("router_settings.fallbacks: must be a list of {model: [fallbacks]}")
    out: dict[str, list[str]] = {}
    for name, targets in items:
        targets = [targets] if isinstance(targets, str) else targets
        if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
            raise SectionError(f"router_settings.fallbacks.{name}: must be a list of model names")
        out[str(name)] = targets
    return out


def _names(v: Any, key: str) -> list[Any]:
    """A callback list (a single name is a list of one)."""
    v = [v] if isinstance(v, str) else v
    if not isinstance(v, list) or not all(isinstance(x, str) and x for x in v):
        raise SectionError(f"{key}: must be a list of callback names or module.attribute")
    return list(v)


def _aliases(v: Any, key: str) -> dict[str, str]:
    """LiteLLM's ``{"gpt-4": "gpt-4o"}`` or ``{"gpt-4": {"model": "gpt-4o", "hidden": true}}``
    → alias → model name (``hidden`` only hides it from LiteLLM's model list)."""
    if not isinstance(v, dict):
        raise SectionError(f"{key}: must be a mapping of alias to model name")
    out: dict[str, str] = {}
    for alias, target in v.items():
        if isinstance(target, dict):
            target = target.get("model")
        if not isinstance(target, str) or not target:
            raise SectionError(f"{key}.{alias}: must be a model name or {{model: name}}")
        out[str(alias)] = target
    return out


def _redis_url(router: dict[str, Any]) -> str | None:
    if router.get("redis_url"):
        return resolve_env(router["redis_url"])
    host = resolve_env(router.get("redis_host"))
    if not host:
        return None
    password = resolve_env(router.get("redis_password"))
    auth = f":{password}@" if password else ""
    port = resolve_env(router.get("redis_port")) or 6379
    return f"redis://{auth}{host}:{port}/0"


def _cache(on: Any, params: Any) -> tuple[dict[str, Any], list[str]]:
    """``litellm_settings.cache`` / ``cache_params`` → the ``cache:`` section, and the keys it
    cannot honour. A type other than local or redis (s3, semantic caches ...) is named and the
    cache stays off rather than silently becoming another kind. Redis is found as LiteLLM
    finds it: ``url`` / ``host``+``port``+``password``, else REDIS_URL / REDIS_HOST ...;
    else the reliability section's Redis (gateway/serving/forwarding/response_cache.py)."""
    if not isinstance(on, bool):
        raise SectionError(f"litellm_settings.cache: must be true or false, got {on!r}")
    params = params or {}
    if not isinstance(params, dict):
        raise SectionError("litellm_settings.cache_params: must be a mapping")
    skipped = [f"litellm_settings.cache_params.{k}" for k in params if k not in CACHE_PARAMS]
    kind = params.get("type") or "local"
    if kind not in ("local", "redis"):
        off = (f"litellm_settings.cache_params.type={kind} (only local and redis are served: "
               "caching is off)")
        return {"enabled": False}, [*skipped, off]
    out: dict[str, Any] = {"enabled": on, "type": kind}
    ttl = params.get("ttl") or params.get(
        "default_in_redis_ttl" if kind == "redis" else "default_in_memory_ttl")
    if ttl is not None:
        if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not ttl > 0:
            raise SectionError(f"litellm_settings.cache_params.ttl: must be a positive number "
                               f"of seconds, got {ttl!r}")
        out["ttl_s"] = ttl
        from gateway.config.cache import CacheSettings  # typed settings load this module

        if ttl > CacheSettings.model_fields["max_ttl_s"].default:  # the operator's own choice
            out["max_ttl_s"] = ttl
    if params.get("namespace") is not None:
        out["namespace"] = str(resolve_env(params["namespace"]))
    if kind == "redis":
        found = {"redis_url": params.get("url") or params.get("redis_url")
                 or os.environ.get("REDIS_URL"),
                 "redis_host": params.get("host") or os.environ.get("REDIS_HOST"),
                 "redis_port": params.get("port") or os.environ.get("REDIS_PORT"),
                 "redis_password": params.get("password") or os.environ.get("REDIS_PASSWORD")}
        url = _redis_url(found)
        if url:
            out["redis_url"] = url
    return out, skipped


def _seconds(router: dict[str, Any], key: str, default: Any) -> Any:
    """router_settings.``key`` as seconds (> 0), else ``default``."""
    v = router.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise SectionError(f"router_settings.{key}: must be a positive number of seconds, "
                           f"got {v!r}")
    return v


def _with_timeouts(entry: Any, defaults: dict[str, Any]) -> Any:
    """model_info.timeout / stream_timeout from the sections when the entry sets none (a
    deployment's own litellm_params.timeout / stream_timeout still wins per attempt)."""
    if not isinstance(entry, dict):
        return entry
    info = entry.get("model_info") or {}
    if not isinstance(info, dict):
        return entry
    fill = {k: v for k, v in defaults.items() if v is not None and k not in info}
    return {**entry, "model_info": {**info, **fill}} if fill else entry


def resolve_env(value: Any) -> Any:
    """LiteLLM's ``os.environ/NAME`` convention: the value of NAME (None when unset)."""
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        return os.environ.get(value[len(ENV_PREFIX) :])
    return value
