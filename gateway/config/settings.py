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
    routes:                                     # default: auto, auto-balanced, auto-cheap
      auto: {max_drop: 0.01}                    # a promise (gateway/config/routes.py)
      fast: {cost_weight: 0.5}                  # a λ route; delta (δ), models optional

Values written ``os.environ/NAME`` are read from the environment at load time (LiteLLM's
convention), so provider keys never live in the file. LiteLLM's ``router_settings``,
``litellm_settings`` and ``general_settings`` are accepted (gateway/litellm_sections.py), and
several entries with one ``model_name`` form a group: one backend with several deployments.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from gateway.config.backend import Backend, ModelInfo
from gateway.config.budget import BudgetSettings
from gateway.config.cache import CacheSettings
from gateway.config.reliability import ReliabilitySettings
from gateway.config.retraining import Retraining
from gateway.config.routes import Route, default_drop, default_routes, needs_default_promise
from gateway.store.engine import DEFAULT_DATABASE_URL

DEFAULT_CONFIG_PATH = Path(__file__).resolve().parents[2] / "config.yaml"


class ConfigError(ValueError):
    """config.yaml is missing, unreadable or inconsistent."""


class Settings(BaseModel):
    """Everything the gateway reads from config.yaml and the environment; frozen once built."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_list: list[Backend] = Field(default_factory=list)
    routes: dict[str, Route] = Field(default_factory=default_routes)
    database_url: str = DEFAULT_DATABASE_URL
    admin_key: str | None = None
    # A bearer token that may read /metrics only (or TOLLGATE_METRICS_TOKEN); the admin key
    # always may. Neither configured: /metrics answers 401 to everyone.
    metrics_token: str | None = None
    router_path: str | None = None  # None = the packaged router_core/default_router
    log_prompts: bool = False
    # The dashboard API (gateway/review/dashboard/guard.py): calls per minute per principal
    # (the admin, or a tenant), and queries running at once per process (429 beyond either)
    dashboard_requests_per_minute: int = Field(default=60, ge=1)
    dashboard_max_concurrent: int = Field(default=4, ge=1)
    # Budget policy when the client gives no max_tokens: reserve max_output_tokens; if that
    # does not fit, cap the upstream max_tokens to what the remaining budget pays, but refuse
    # rather than cap below this many tokens.
    min_output_tokens: int = Field(default=16, gt=0)
    # Budget admission (gateway/serving/budget/budget_gate.py): how long a request may wait in its
    # tenant's line for in-flight reservations to settle when only they stop it fitting
    # (0: refuse at once, as a retryable 429); the overrun exposure a tenant's in-flight
    # requests may carry, as a share of its budget, per replica (None: unbounded).
    budget_wait_s: float = Field(default=5.0, ge=0.0, le=600.0)
    budget_overrun_exposure: float | None = Field(default=1.0, ge=0.0)
    # An open reservation older than this is abandoned (its process died) and released
    # (gateway/store/ledger.py, expire_reservations). A restarted process releases at once
    # the reservations its previous run left open: its identity is a slot in the spool
    # directory (gateway/store/replica_slot.py), named after the directory's random id, or
    # after this name (or TOLLGATE_REPLICA_ID) when set, unique among live replicas.
    budget_reservation_ttl_s: float = Field(default=3600.0, gt=0.0)
    replica_id: str | None = None
    # The query encoder Φ kind (router_core.encoders: minilm, activations, both, ...). The
    # gateway always embeds as its router was trained (the artifact records the encoder);
    # naming a kind here makes a router trained on another one a startup error.
    encoder: str | None = None
    encoder_max_chars: int = Field(default=4000, gt=0)
    # Output length assumed when routing compares backend costs (capped by the request's
    # max_tokens); budgets reserve the maximum instead.
    routing_output_tokens: int = Field(default=256, gt=0)
    # torch intra-op threads for the encoder: one query at a time gains nothing from more,
    # and spinning OpenMP threads on a busy machine made one encode 20x slower here.
    encoder_threads: int = Field(default=1, ge=1)
    # Micro-batching of concurrent requests' Φ(x) (gateway/serving/plan/embedding.py): at most
    # this many texts per encoder call, and the longest a request waits for others to join
    # when the encoder is idle (0: never; batches then form while the encoder is busy).
    # Small, as on this CPU a batch buys no speed and its activations cost memory: int8
    # MiniLM over 96 probe-length prompts took 4.2 s in batches of 32 and 1.7 s in batches
    # of 4, with a peak of +820 MB against +160 MB (a worker keeps much of a peak: glibc).
    encoder_batch_size: int = Field(default=4, ge=1)
    encoder_batch_wait_ms: float = Field(default=0.0, ge=0.0, le=100.0)
    # Upstream attempts per request (the router's choice plus fallbacks in rank order);
    # candidates skipped for budget or an open circuit do not count.
    max_attempts: int = Field(default=3, ge=1)
    retraining: Retraining = Field(default_factory=Retraining)
    reliability: ReliabilitySettings = Field(default_factory=ReliabilitySettings)
    cache: CacheSettings = Field(default_factory=CacheSettings)  # response caching
    budget: BudgetSettings = Field(default_factory=BudgetSettings)  # gateway/config/budget.py
    # LiteLLM's conventions: a passthrough model's fallbacks (router_settings.fallbacks) and
    # dropping parameters a provider does not support instead of failing (drop_params).
    fallbacks: dict[str, list[str]] = Field(default_factory=dict)
    drop_params: bool = False
    # LiteLLM's router_settings.model_group_alias: a model name clients send -> the backend
    # or route it means (resolved before anything else: policy, fallbacks, routing)
    model_group_alias: dict[str, str] = Field(default_factory=dict)
    # LiteLLM's litellm_settings.success_callback / failure_callback / callbacks, handed to
    # litellm at startup (gateway/provider/litellm_callbacks.py): names (langfuse, otel, ...) or
    # module.attribute references to callback objects beside the config file
    litellm_callbacks: dict[Literal["success_callback", "failure_callback", "callbacks"],
                            list[Any]] = Field(default_factory=dict)
    _ignored_keys: tuple[str, ...] = PrivateAttr(default=())
    _config_dir: str | None = PrivateAttr(default=None)

    def model_post_init(self, context: Any) -> None:
        """Loading's validation context (the ignored keys, the config's directory)."""
        if isinstance(context, dict):
            self._ignored_keys = tuple(context.get("ignored_keys", ()))
            self._config_dir = context.get("config_dir")

    @property
    def ignored_keys(self) -> tuple[str, ...]:
        """LiteLLM config keys this file has that Tollgate does not use (startup warning)."""
        return self._ignored_keys

    @property
    def config_dir(self) -> str | None:
        """The directory of the config file these settings came from (None: not a file)."""
        return self._config_dir

    @model_validator(mode="before")
    @classmethod
    def _group_deployments(cls, raw: Any) -> Any:
        """Entries sharing a model_name become one backend with several deployments; the
        config-wide drop_params becomes each deployment's default."""
        if not isinstance(raw, dict) or not isinstance(raw.get("model_list"), list):
            return raw
        groups: dict[str, dict[str, Any]] = {}
        out: list[Any] = []
        for entry in raw["model_list"]:
            name = entry.get("model_name") if isinstance(entry, dict) else None
            params = entry.get("litellm_params") if isinstance(entry, dict) else None
            if not isinstance(name, str) or not isinstance(params, dict):
                out.append(entry)  # field validation names what is wrong
                continue
            if raw.get("drop_params") and "drop_params" not in params:
                params = {**params, "drop_params": True}
            if name not in groups:
                groups[name] = {**entry, "litellm_params": params, "deployments": [params],
                                "deployment_info": [entry.get("model_info") or {}]}
                out.append(groups[name])
                continue
            _same_model_info(name, groups[name].get("model_info"), entry.get("model_info"))
            groups[name]["deployments"].append(params)
            groups[name]["deployment_info"].append(entry.get("model_info") or {})
        for g in groups.values():
            if len(g["deployments"]) == 1:
                del g["deployments"], g["deployment_info"]
        return {**raw, "model_list": out}

    @model_validator(mode="after")
    def _known_encoder(self) -> Settings:
        from router_core.encoders import known_kinds

        if self.encoder is not None and self.encoder not in known_kinds():
            raise ValueError(
                f"encoder: unknown kind {self.encoder!r}; known: {', '.join(known_kinds())}")
        return self

    @model_validator(mode="after")
    def _promises_by_default(self) -> Settings:
        """A route that names neither max_drop nor cost_weight promises its name's drop."""
        for name, route in self.routes.items():
            if needs_default_promise(route):
                route.max_drop = default_drop(name)
                route._default_promise = True
        return self

    @property
    def routes_by_default(self) -> bool:
        """Whether the config had no ``routes:`` (the default promising routes)."""
        return "routes" not in self.model_fields_set

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        names = [b.model_name for b in self.model_list]
        clash = sorted(set(names) & set(self.routes))
        if clash:
            raise ValueError(f"routes and model_list share names {clash}")
        for rname, route in self.routes.items():
            unknown = sorted(set(route.models or []) - set(names))
            if unknown:
                raise ValueError(f"route {rname!r}: unknown backends {unknown}")
            if route.reference is not None and (
                    route.reference not in names
                    or (route.models is not None and route.reference not in route.models)):
                raise ValueError(f"route {rname!r}: reference {route.reference!r} is not a "
                                 "backend of the route")
        for name, targets in self.fallbacks.items():
            unknown = sorted({name, *targets} - set(names))
            if unknown:
                raise ValueError(f"fallbacks.{name}: {unknown} not in model_list")
        for alias, target in self.model_group_alias.items():
            if alias in names or alias in self.routes:
                raise ValueError(f"model_group_alias.{alias}: {alias!r} is already a "
                                 "model_list name or a route")
            if target not in names and target not in self.routes:
                raise ValueError(f"model_group_alias.{alias}: {target!r} is not in "
                                 "model_list or routes")
        return self

    def resolve_alias(self, name: str) -> str:
        """The backend or route a requested model name means (model_group_alias)."""
        return self.model_group_alias.get(name, name)

    def wildcard_for(self, model: str) -> Backend | None:
        """The first wildcard backend (``model_name`` with ``*``, e.g. ``openai/*``) whose
        pattern matches ``model``, as a concrete backend named ``model`` whose deployments
        call the matched model (the ``*`` of ``litellm_params.model`` filled in, LiteLLM's
        rule); None when no wildcard matches."""
        for b in self.model_list:
            if not b.is_wildcard:
                continue
            m = _wildcard_regex(b.model_name).fullmatch(model)
            if m is None:
                continue
            star = m.group(1)
            params = [{**p, "model": str(p["model"]).replace("*", star, 1)}
                      for p in b.deployment_params()]
            return Backend(model_name=model, litellm_params=params[0],
                           model_info=b.model_info,
                           deployments=params if len(params) > 1 else [],
                           deployment_info=list(b.deployment_info), wildcard=b.model_name)
        return None

    def backend(self, name: str) -> Backend | None:
        for b in self.model_list:
            if b.model_name == name:
                return b
        return None

    def route_backends(self, route: str) -> list[Backend]:
        allowed = self.routes[route].models
        return [b for b in self.model_list if allowed is None or b.model_name in allowed]


@functools.lru_cache(maxsize=64)
def _wildcard_regex(pattern: str) -> re.Pattern[str]:
    """``openai/*`` -> a regex whose one group is what the (first) ``*`` matched."""
    head, _, tail = pattern.partition("*")
    rest = ".*".join(re.escape(p) for p in tail.split("*"))
    return re.compile(f"{re.escape(head)}(.+?){rest}" if tail else f"{re.escape(head)}(.+)")


# model_info a group's deployments may set each their own: the prices (the reservation takes
# the dearest deployment's, settlement the answering one's) and the attempt's timeout
PER_DEPLOYMENT_INFO = frozenset({"timeout", "stream_timeout", "input_cost_per_token", "output_cost_per_token",
                                 "input_cost_per_million", "output_cost_per_million"})


def _same_model_info(name: str, first: Any, other: Any) -> None:
    """Deployments of one group share one set of limits (budgets bound the request by the
    backend, whichever deployment answers); prices may differ (PER_DEPLOYMENT_INFO)."""
    first, other = first or {}, other or {}
    if not isinstance(first, dict) or not isinstance(other, dict):
        return
    differ = sorted(f for f in ModelInfo.model_fields
                    if f not in PER_DEPLOYMENT_INFO and first.get(f) != other.get(f))
    if differ:
        raise ValueError(f"model_list: the deployments of {name!r} differ in model_info "
                         f"{differ}; a group has one set of limits (prices may differ)")
