"""The ``reliability:`` section of config.yaml: Redis for shared rate limits, circuit
breakers, the database-outage policy, the log spool and shutdown, each with safe defaults."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class RateLimitSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests_per_minute: int | None = Field(default=None, ge=0)
    tokens_per_minute: int | None = Field(default=None, ge=0)


class CircuitSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    failure_threshold: int = Field(default=5, ge=1)
    cooldown_s: float = Field(default=30.0, gt=0)
    half_open_probes: int = Field(default=1, ge=1)


class OutageSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    budget: Literal["refuse", "allow"] = "refuse"
    allowance_usd: float = Field(default=0.0, ge=0)


class ReliabilitySettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    redis_url: str | None = None
    redis_prefix: str = "tollgate"
    rate_limits: RateLimitSettings = Field(default_factory=RateLimitSettings)
    circuit: CircuitSettings = Field(default_factory=CircuitSettings)
    outage: OutageSettings = Field(default_factory=OutageSettings)
    spool_dir: str = "./tollgate-spool"
    max_body_bytes: int = Field(default=8 * 1024 * 1024, gt=0)
    shutdown_grace_s: float = Field(default=30.0, ge=0)
    log_flush_timeout_s: float = Field(default=10.0, ge=0)  # at shutdown, then spool the rest

    def resolved(self) -> ReliabilitySettings:
        """With the environment applied: TOLLGATE_REDIS_URL, TOLLGATE_SPOOL_DIR."""
        changes: dict[str, Any] = {}
        if os.environ.get("TOLLGATE_REDIS_URL"):
            changes["redis_url"] = os.environ["TOLLGATE_REDIS_URL"]
        if os.environ.get("TOLLGATE_SPOOL_DIR"):
            changes["spool_dir"] = os.environ["TOLLGATE_SPOOL_DIR"]
        return self.model_copy(update=changes)
