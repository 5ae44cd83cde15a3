"""The ``cache:`` section of config.yaml: response caching, as LiteLLM's
``litellm_settings.cache: true`` with ``cache_params`` configures it (gateway/litellm_sections.py
translates that section into this one).

``type: local`` keeps answers in this process (bounded by entries and bytes); ``type: redis``
shares them across replicas. ``ttl_s`` is how long an answer is kept unless a request sets its
own ``cache.ttl``. LiteLLM's in-memory cache keeps an entry 600 s and at most 1 MB per item
(litellm/caching/in_memory_cache.py ``default_ttl``, ``max_size_per_item``); its Redis cache
keeps one without expiry unless a ttl is set: here both default to 600 s so Redis' memory is
bounded too. A request's ``cache.ttl`` is cut to ``max_ttl_s`` (1 h by default; a client once
pinned entries for 31 years, issue 48.9), and ``ttl_s`` may not exceed it, so no entry outlives
``max_ttl_s`` and what the cache holds in Redis is at most ``max_entry_bytes`` × the answers
stored in the last ``max_ttl_s`` (each a paid, rate-limited request).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class CacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    type: Literal["local", "redis"] = "local"
    redis_url: str | None = None  # type redis: this, else reliability.redis_url
    ttl_s: float = Field(default=600.0, gt=0)
    # the longest a request's own ``cache.ttl`` keeps an answer (longer ones are cut to it):
    # entries live at most this long, so what Redis holds is bounded (module docstring)
    max_ttl_s: float = Field(default=3600.0, gt=0)
    namespace: str | None = None  # LiteLLM's cache_params.namespace: part of every key
    # the local cache's bounds (least recently used entries go first)
    max_entries: int = Field(default=10_000, ge=1)
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    max_entry_bytes: int = Field(default=1024 * 1024, ge=1024)  # larger answers are not kept

    @model_validator(mode="after")
    def _ttl_within_max(self) -> CacheSettings:
        if self.ttl_s > self.max_ttl_s:
            raise ValueError(f"cache.ttl_s ({self.ttl_s:g}) exceeds cache.max_ttl_s "
                             f"({self.max_ttl_s:g})")
        return self
