"""The ``retraining.exploration`` section of config.yaml: shadow calls and their judge
(what they do: gateway/learning/shadow.py). Read by the learning loop, and by the pool,
which never routes to the judge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gateway.config.settings import Settings


@dataclass
class ExplorationSettings:
    """``retraining.exploration``: how often a routed request is explored, the spend cap per
    period, a route's daily cap on shadowing its reference (``reference_budget_usd``: one
    number for every route, or route → USD; None, or a route not in the mapping: no cap but
    the global budget) and the judge (gateway/learning/shadow.py's docstring has the YAML)."""

    enabled: bool = False
    epsilon: float | dict[str, float] = 0.1
    candidates: int = 1
    budget_usd: float = 0.0
    period: str = "daily"
    reference_budget_usd: float | dict[str, float] | None = None
    max_tokens: int = 512
    judge: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> ExplorationSettings:
        extra = dict(settings.retraining.model_extra or {})
        raw = dict(extra.get("exploration") or {})
        known = {k: raw[k] for k in cls.__dataclass_fields__ if k in raw}
        return cls(**known)

    def __post_init__(self) -> None:
        caps = self.reference_budget_usd
        values = caps.values() if isinstance(caps, Mapping) else [] if caps is None else [caps]
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ValueError("retraining.exploration.reference_budget_usd: a number ≥ 0 "
                                 f"or a mapping route → number ≥ 0, not {caps!r}")

    def reference_budget_for(self, route: str | None) -> float | None:
        """USD per UTC day the route may spend shadowing its reference (the reference's
        answers and the judge's comparisons), None when only the global budget applies."""
        caps = self.reference_budget_usd
        if isinstance(caps, Mapping):
            cap = caps.get(route or "")
            return None if cap is None else float(cap)
        return None if caps is None else float(caps)

    def epsilon_for(self, route: str | None) -> float:
        if route is None:
            return 0.0
        if isinstance(self.epsilon, Mapping):
            return float(self.epsilon.get(route, 0.0))
        return float(self.epsilon)

    @property
    def judge_backend(self) -> str | None:
        """The backend that judges answers (not routed to), if one is configured."""
        return self.judge.get("model") or None
