"""The ``cache:`` section of config.yaml: response caching, as LiteLLM's
``litellm_settings.cache: true`` with ``cache_params`` configures it (gateway/litellm_sections.py
translates that section into this one).

``type: local`` keeps answers in this process (bounded by entries and bytes); ``type: redis``
shares them across replicas. ``ttl_s`` is how long an answer is kept unless a request sets its
own ``cache.ttl``. LiteLLM's in-memory cache keeps an entry 600 s and at most 1 MB per item
(litellm/caching/in_memory_cache.py ``default_ttl``, ``max_size_per_item``); its Redis cache
keeps one without expiry unless a ttl is set: here both default to 600 s so Redis' memory is
bounded too.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class CacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    enabled: bool = False
    type: Literal["local", "redis"] = "local"
    redis_url: str | None = None  # type redis: this, else reliability.redis_url
    ttl_s: float = Field(default=600.0, gt=0)
    namespace: str | None = None  # LiteLLM's cache_params.namespace: part of every key
    # the local cache's bounds (least recently used entries go first)
    max_entries: int = Field(default=10_000, ge=1)
    max_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    max_entry_bytes: int = Field(default=1024 * 1024, ge=1024)  # larger answers are not kept
