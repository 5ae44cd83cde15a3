"""The ``reliability:`` section of config.yaml: Redis for shared rate limits, circuit
breakers, the database-outage policy, the log spool and shutdown, each with safe defaults."""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class RateLimitSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    requests_per_minute: int | None = Field(default=None, ge=0)
    tokens_per_minute: int | None = Field(default=None, ge=0)


class CircuitSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    failure_threshold: int = Field(default=5, ge=1)
    cooldown_s: float = Field(default=30.0, gt=0)
    half_open_probes: int = Field(default=1, ge=1)
    # tenants whose failures it takes to open a circuit (gateway/reliability/circuit.py, C1);
    # 1: any tenant's failures alone may (a deployment with a single tenant)
    min_tenants: int = Field(default=2, ge=1)


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
    # a request's whole body must arrive this long after its head, else 408 and the
    # connection closed (gateway/serving/body_limit.py BodyLimit; issue 48.10): 8 MB at
    # 1.1 Mbit/s fits
    body_timeout_s: float = Field(default=60.0, gt=0)
    # /v1/messages/count_tokens bodies above this are a 413: counting is free CPU (issue
    # 48.6), ~0.3 s a MB of text on this machine; 2 MiB holds a 200k-token conversation
    count_tokens_max_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    # messages (Responses: input items) and content parts per request; 400 above
    # (gateway/serving/request/validation.py check_counts: litellm walks each on the event loop)
    max_messages: int = Field(default=2048, ge=1)
    max_content_parts: int = Field(default=4096, ge=1)
    # JSON values in the tools, functions and response_format schema: litellm sanitises each
    # schema on the event loop (~5 µs a value: 15,000 tools held it ~1 s); OpenAI takes at
    # most 128 tools (its API reference for ``tools``), which this counts too
    max_tool_values: int = Field(default=8192, ge=1)
    shutdown_grace_s: float = Field(default=30.0, ge=0)
    log_flush_timeout_s: float = Field(default=10.0, ge=0)  # at shutdown, then spool the rest
    # The edge (gateway.reliability.edge). Peers whose X-Forwarded-For / -Proto are believed:
    # addresses or CIDRs, "*" for any; none by default (the socket's peer is the client).
    forwarded_allow_ips: list[str] = Field(default_factory=list)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)  # request line + headers; 431
    header_timeout_s: float = Field(default=10.0, gt=0)  # to receive a request's whole head

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _split_ips(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [ip.strip() for ip in value.split(",") if ip.strip()]
        return value

    def resolved(self) -> ReliabilitySettings:
        """With the environment applied: TOLLGATE_REDIS_URL, TOLLGATE_SPOOL_DIR,
        TOLLGATE_FORWARDED_ALLOW_IPS (comma-separated)."""
        changes: dict[str, Any] = {}
        if os.environ.get("TOLLGATE_REDIS_URL"):
            changes["redis_url"] = os.environ["TOLLGATE_REDIS_URL"]
        if os.environ.get("TOLLGATE_SPOOL_DIR"):
            changes["spool_dir"] = os.environ["TOLLGATE_SPOOL_DIR"]
        if os.environ.get("TOLLGATE_FORWARDED_ALLOW_IPS") is not None:
            changes["forwarded_allow_ips"] = self._split_ips(
                os.environ["TOLLGATE_FORWARDED_ALLOW_IPS"])
        return self.model_copy(update=changes)
