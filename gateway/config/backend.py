"""One backend of ``model_list``: its ``litellm_params`` (one deployment or a group of them)
and its ``model_info`` (prices, limits, timeouts), read by every room that calls or prices
a model. Limits a config leaves out come from litellm's map (gateway/config/model_map.py)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.config.model_map import mapped_limits
from gateway.litellm_sections import resolve_env

# litellm_params LiteLLM's Router reads for load balancing; never sent to a provider.
ROUTER_ONLY_PARAMS = frozenset({"rpm", "tpm", "weight", "order", "max_parallel_requests",
                                "stream_timeout"})



class ModelInfo(BaseModel):
    """Prices and limits of one backend (``model_info`` in LiteLLM's format)."""

    model_config = ConfigDict(extra="allow")

    router_model: str | None = None
    input_cost_per_token: float | None = Field(default=None, ge=0)
    output_cost_per_token: float | None = Field(default=None, ge=0)
    input_cost_per_million: float | None = Field(default=None, ge=0)
    output_cost_per_million: float | None = Field(default=None, ge=0)
    # unset: litellm's map's for the entry's base_model or model (gateway/config/model_map.py),
    # else no window and 4096 output tokens
    max_input_tokens: int | None = Field(default=None, gt=0)
    max_output_tokens: int = Field(default=4096, gt=0)
    # The most prompt tokens the provider counts for one image part (the budget reserves it
    # per image; ~1,600 covers OpenAI gpt-4o high detail and Anthropic's resize cap).
    max_image_tokens: int = Field(default=1600, gt=0)
    # The most prompt tokens the provider counts for one file part (a document read by id or
    # URL, or decoded: a PDF's compressed streams hold more text than its bytes, and its
    # pages are billed as images too). None: requests with files are refused on it (400).
    max_file_tokens: int | None = Field(default=None, gt=0)
    # seconds per upstream attempt; unset (here and in litellm_params): 60 s plus time for
    # the attempt's output cap (gateway/config/model_map.py)
    timeout: float = Field(default=60.0, gt=0)
    # a streamed attempt's timeout (to its first chunk and between chunks); None: ``timeout``
    stream_timeout: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _one_price_form(self) -> ModelInfo:
        for side in ("input", "output"):
            per_tok = getattr(self, f"{side}_cost_per_token")
            per_m = getattr(self, f"{side}_cost_per_million")
            if per_tok is not None and per_m is not None:
                raise ValueError(f"give {side}_cost_per_token or {side}_cost_per_million, not both")
        return self


def per_token(per_token: float | None, per_million: float | None) -> float | None:
    """A price given per token, else per million tokens, as USD per token."""
    if per_token is not None:
        return per_token
    return None if per_million is None else per_million / 1e6


class Backend(BaseModel):
    """One ``model_name`` of ``model_list``: a model clients can also name directly.

    Several entries with the same name are one backend with several ``deployments`` (their
    litellm_params; LiteLLM's load-balanced group): requests spread over them and fail over
    inside the group. ``litellm_params`` is the first deployment's.
    """

    model_config = ConfigDict(extra="allow")

    model_name: str = Field(min_length=1)
    litellm_params: dict[str, Any]
    model_info: ModelInfo = Field(default_factory=ModelInfo)
    deployments: list[dict[str, Any]] = Field(default_factory=list)
    # each deployment's own model_info (a group's; parallel to ``deployments``): the limits
    # are the group's, the prices and base_model may differ per deployment
    deployment_info: list[ModelInfo] = Field(default_factory=list)

    @model_validator(mode="after")
    def _has_model(self) -> Backend:
        for params in [self.litellm_params, *self.deployments]:
            if not params.get("model"):
                raise ValueError(f"{self.model_name}: litellm_params.model is required")
        return self

    @model_validator(mode="after")
    def _limits_from_map(self) -> Backend:
        """max_output_tokens / max_input_tokens the entry does not set, from litellm's map
        (gateway/config/model_map.py)."""
        if self.is_wildcard:  # each concrete model it makes is looked up on its own
            return self
        info = self.model_info
        filled = mapped_limits(info.model_fields_set, (info.model_extra or {}).get(
            "base_model"), self.litellm_params.get("model"))
        if filled:
            self.model_info = info.model_copy(update=filled)
        return self

    @property
    def router_model(self) -> str:
        return self.model_info.router_model or self.model_name

    @property
    def is_wildcard(self) -> bool:
        """A pattern (``openai/*``): forwards any model it matches, never routed."""
        return "*" in self.model_name

    @property
    def wildcard(self) -> str | None:
        """The wildcard pattern a concrete backend was made from (Settings.wildcard_for)."""
        return (self.model_extra or {}).get("wildcard")

    @property
    def litellm_model(self) -> str:
        return str(self.litellm_params["model"])

    @property
    def input_cost_per_token(self) -> float | None:
        i = self.model_info
        return per_token(i.input_cost_per_token, i.input_cost_per_million)

    @property
    def output_cost_per_token(self) -> float | None:
        i = self.model_info
        return per_token(i.output_cost_per_token, i.output_cost_per_million)

    def call_params(self, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """litellm_params (default: the first deployment's) with ``os.environ/NAME`` values
        resolved and the load-balancing keys left out."""
        params = self.litellm_params if params is None else params
        return {k: resolve_env(v) for k, v in params.items() if k not in ROUTER_ONLY_PARAMS}

    def deployment_params(self) -> list[dict[str, Any]]:
        """The litellm_params of every deployment (one for a plain backend)."""
        return list(self.deployments) or [self.litellm_params]

    def deployment_infos(self) -> list[ModelInfo]:
        """The model_info of every deployment, parallel to ``deployment_params``."""
        n = len(self.deployment_params())
        infos = list(self.deployment_info)
        return infos + [self.model_info] * (n - len(infos)) if len(infos) < n else infos[:n]

