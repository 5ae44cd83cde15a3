"""A request body's ``cache`` object, LiteLLM's per-request cache controls
(docs.litellm.ai/docs/proxy/caching_controls and litellm/caching/caching_handler.py): parsed
with the rest of the body; the response cache obeys them
(gateway/serving/forwarding/cached_answer.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import invalid


@dataclass(frozen=True)
class CacheControl:
    """The request body's ``cache`` object."""

    no_cache: bool = False
    no_store: bool = False
    ttl_s: float | None = None
    max_age_s: float | None = None
    namespace: str | None = None


def cache_control(raw: Any) -> CacheControl:
    """Parse ``cache`` (400 naming the bad field)."""
    if raw is None:
        return CacheControl()
    if not isinstance(raw, dict):
        raise invalid("'cache' must be an object", param="cache")
    known = {"no-cache", "no-store", "ttl", "s-maxage", "s-max-age", "namespace"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise invalid(f"unknown cache control(s) {unknown}; known: {sorted(known)}",
                      param=f"cache.{unknown[0]}")
    for flag in ("no-cache", "no-store"):
        if raw.get(flag) is not None and not isinstance(raw[flag], bool):
            raise invalid(f"'cache.{flag}' must be a boolean", param=f"cache.{flag}")
    seconds: dict[str, float | None] = {}
    for name in ("ttl", "s-maxage", "s-max-age"):
        v = raw.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                              or not 0 < v < 1e9):
            raise invalid(f"'cache.{name}' must be a positive number of seconds",
                          param=f"cache.{name}")
        seconds[name] = None if v is None else float(v)
    ns = raw.get("namespace")
    if ns is not None and not isinstance(ns, str):
        raise invalid("'cache.namespace' must be a string", param="cache.namespace")
    return CacheControl(no_cache=bool(raw.get("no-cache")), no_store=bool(raw.get("no-store")),
                        ttl_s=seconds["ttl"], max_age_s=seconds["s-maxage"] or seconds["s-max-age"],
                        namespace=ns)
