"""Typed settings from ``config.yaml``: the backend pool, its prices, the routes, the database.

The pool is a LiteLLM-style ``model_list`` so a LiteLLM user can copy theirs over::

    model_list:
      - model_name: gpt-4o-mini                 # the name clients send for passthrough
        litellm_params: {model: openai/gpt-4o-mini, api_key: os.environ/OPENAI_API_KEY}
        model_info:
          router_model: gpt-3.5-turbo-1106      # the expert in the router artifact
          input_cost_per_million: 0.15          # or input_cost_per_token
          output_cost_per_million: 0.60         # or output_cost_per_token
          max_input_tokens: 128000
          max_output_tokens: 16384              # reserved when a client gives no max_tokens
          timeout: 60                           # seconds per upstream attempt
    routes:
      auto: {cost_weight: 0.5}                  # λ; delta (δ) and models (allowed) optional

Values written ``os.environ/NAME`` are read from the environment at load time (LiteLLM's
convention), so provider keys never live in the file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gateway.store.engine import DEFAULT_DATABASE_URL, database_url_from_env

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parent.parent / "config.yaml"
ENV_PREFIX = "os.environ/"



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


class ConfigError(ValueError):
    """config.yaml is missing, unreadable or inconsistent."""


class ModelInfo(BaseModel):
    """Prices and limits of one backend (``model_info`` in LiteLLM's format)."""

    model_config = ConfigDict(extra="allow")

    router_model: str | None = None
    input_cost_per_token: float | None = Field(default=None, ge=0)
    output_cost_per_token: float | None = Field(default=None, ge=0)
    input_cost_per_million: float | None = Field(default=None, ge=0)
    output_cost_per_million: float | None = Field(default=None, ge=0)
    max_input_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int = Field(default=4096, gt=0)
    timeout: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _one_price_form(self) -> ModelInfo:
        for side in ("input", "output"):
            per_tok = getattr(self, f"{side}_cost_per_token")
            per_m = getattr(self, f"{side}_cost_per_million")
            if per_tok is not None and per_m is not None:
                raise ValueError(f"give {side}_cost_per_token or {side}_cost_per_million, not both")
        return self


class Backend(BaseModel):
    """One entry of ``model_list``: a concrete model clients can also name directly."""

    model_config = ConfigDict(extra="allow")

    model_name: str = Field(min_length=1)
    litellm_params: dict[str, Any]
    model_info: ModelInfo = Field(default_factory=ModelInfo)

    @model_validator(mode="after")
    def _has_model(self) -> Backend:
        if not self.litellm_params.get("model"):
            raise ValueError(f"{self.model_name}: litellm_params.model is required")
        return self

    @property
    def router_model(self) -> str:
        return self.model_info.router_model or self.model_name

    @property
    def litellm_model(self) -> str:
        return str(self.litellm_params["model"])

    @property
    def input_cost_per_token(self) -> float | None:
        i = self.model_info
        if i.input_cost_per_token is not None:
            return i.input_cost_per_token
        return None if i.input_cost_per_million is None else i.input_cost_per_million / 1e6

    @property
    def output_cost_per_token(self) -> float | None:
        i = self.model_info
        if i.output_cost_per_token is not None:
            return i.output_cost_per_token
        return None if i.output_cost_per_million is None else i.output_cost_per_million / 1e6

    def call_params(self) -> dict[str, Any]:
        """litellm_params with ``os.environ/NAME`` values resolved."""
        return {k: _resolve_env(v) for k, v in self.litellm_params.items()}


class Route(BaseModel):
    """A model name clients send that is routed: λ, δ and the backends it may choose."""

    model_config = ConfigDict(extra="forbid")

    cost_weight: float = Field(default=0.5, ge=0)  # λ in a_h = p̂_h − λ c̃_h
    delta: float | None = Field(default=None, ge=0)  # δ; None = the artifact's
    models: list[str] | None = None  # allowed backends (model_name); None = the whole pool
    description: str | None = None


class Retraining(BaseModel):
    """Placeholder for the learning loop (a later issue): when to retrain and promote."""

    model_config = ConfigDict(extra="allow")

    schedule: str | None = None  # cron expression, e.g. "0 3 * * *"; None = off
    min_observations: int = 500


class Settings(BaseModel):
    """Everything the gateway reads from config.yaml and the environment."""

    model_config = ConfigDict(extra="forbid")

    model_list: list[Backend] = Field(default_factory=list)
    routes: dict[str, Route] = Field(default_factory=lambda: {"auto": Route()})
    database_url: str = DEFAULT_DATABASE_URL
    admin_key: str | None = None
    router_path: str | None = None  # None = the packaged router_core/default_router
    log_prompts: bool = False
    # Budget policy when the client gives no max_tokens: reserve max_output_tokens; if that
    # does not fit, cap the upstream max_tokens to what the remaining budget pays, but refuse
    # rather than cap below this many tokens.
    min_output_tokens: int = Field(default=16, gt=0)
    encoder_max_chars: int = Field(default=4000, gt=0)
    # Output length assumed when routing compares backend costs (capped by the request's
    # max_tokens); budgets reserve the maximum instead.
    routing_output_tokens: int = Field(default=256, gt=0)
    # torch intra-op threads for the encoder: one query at a time gains nothing from more,
    # and spinning OpenMP threads on a busy machine made one encode 20x slower here.
    encoder_threads: int = Field(default=1, ge=1)
    # Upstream attempts per request (the router's choice plus fallbacks in rank order);
    # candidates skipped for budget or an open circuit do not count.
    max_attempts: int = Field(default=3, ge=1)
    retraining: Retraining = Field(default_factory=Retraining)
    reliability: ReliabilitySettings = Field(default_factory=ReliabilitySettings)  # issue 4

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        names = [b.model_name for b in self.model_list]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"model_list: duplicate model_name {dup}")
        clash = sorted(set(names) & set(self.routes))
        if clash:
            raise ValueError(f"routes and model_list share names {clash}")
        for rname, route in self.routes.items():
            unknown = sorted(set(route.models or []) - set(names))
            if unknown:
                raise ValueError(f"route {rname!r}: unknown backends {unknown}")
        return self

    def backend(self, name: str) -> Backend | None:
        for b in self.model_list:
            if b.model_name == name:
                return b
        return None

    def route_backends(self, route: str) -> list[Backend]:
        allowed = self.routes[route].models
        return [b for b in self.model_list if allowed is None or b.model_name in allowed]


def _resolve_env(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        return os.environ.get(value[len(ENV_PREFIX) :])
    return value


def load_settings(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> Settings:
    """Read config.yaml (default: the repo's), then the environment.

    ``TOLLGATE_DATABASE_URL`` and ``TOLLGATE_ADMIN_KEY`` win over the file.
    """
    path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {e}") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping")
    raw.update(overrides or {})
    return settings_from_dict(raw, source=str(path))


def settings_from_dict(raw: dict[str, Any], source: str = "config") -> Settings:
    """Validate a config mapping and apply the environment overrides."""
    raw = dict(raw)
    if os.environ.get("TOLLGATE_DATABASE_URL"):
        raw["database_url"] = os.environ["TOLLGATE_DATABASE_URL"]
    if os.environ.get("TOLLGATE_ADMIN_KEY"):
        raw["admin_key"] = os.environ["TOLLGATE_ADMIN_KEY"]
    raw["database_url"] = _resolve_env(raw.get("database_url", DEFAULT_DATABASE_URL))
    raw["admin_key"] = _resolve_env(raw.get("admin_key"))
    try:
        return Settings.model_validate(raw)
    except ValidationError as e:
        raise ConfigError(f"{source}: {e}") from e


def resolve_config_path(given: Path | None) -> Path:
    """--config, $TOLLGATE_CONFIG, ./config.yaml, then the repository's config.yaml."""
    if given is not None:
        return given
    if os.environ.get("TOLLGATE_CONFIG"):
        return Path(os.environ["TOLLGATE_CONFIG"])
    local = Path("config.yaml")
    return local if local.is_file() else DEFAULT_CONFIG_PATH


def resolve_database_url(database_url: str | None, config_path: str | None) -> str:
    """What a CLI command uses: its --database-url, else the --config file's database_url,
    else `TOLLGATE_DATABASE_URL` or the default."""
    if database_url:
        return database_url
    if config_path:
        return load_settings(config_path).database_url
    return database_url_from_env()
