"""The ``retraining.exploration`` section of config.yaml: shadow calls and their judge
(what they do: gateway/learning/shadow.py). Read by the learning loop, and by the pool,
which never routes to a judge the operator named.

Learning is on by default: with no ``exploration:`` section, a routed request is explored
with probability ``epsilon``, judged by the strongest priced backend of the pool
(gateway/learning/judges.py, ``default_judge``), and every exploration call (shadow answers,
the reference's answer, the judge's own calls) is booked against ``max_share`` of the
route's spend (default 5%) before it is made. ``enabled: false`` turns it off.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.store.models import PERIODS

if TYPE_CHECKING:
    from gateway.config.settings import Settings

DEFAULT_MAX_SHARE = 0.05  # exploration spend per route ≤ 5% of what the route was charged


class JudgeAgreement(BaseModel):
    """``judge.agreement``: of ``checks`` comparisons with known truth, ``agree`` matched."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    agree: int = Field(ge=0)
    checks: int = Field(gt=0)

    @model_validator(mode="after")
    def _at_most_checks(self) -> JudgeAgreement:
        if self.agree > self.checks:
            raise ValueError("judge.agreement.agree must be at most checks")
        return self


class JudgeSettings(BaseModel):
    """``retraining.exploration.judge``: ``kind: llm`` with ``model`` naming a priced backend
    of model_list (then never routed to), or no ``model``: the strongest priced backend of the
    pool by what is known (routed as usual); ``kind: reference``: a free checker the code
    supplies (the sandbox's recorded grades), none from config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["llm", "reference"] = "llm"
    model: str | None = None
    rubric: str | None = None  # with {prompt} and {answer}; default: judges.DEFAULT_RUBRIC
    # the judge's measured agreement, for the promise's certificates: ``agree`` of ``checks``
    # comparisons whose truth was known matched it (gateway/learning/certify_routes.py;
    # default: the published figure there, not a measurement of this judge)
    agreement: JudgeAgreement | None = None


class ExplorationSettings(BaseModel):
    """``retraining.exploration``: how often a routed request is explored (``epsilon``, one
    number or route → number), how many other backends answer it (``candidates``), what it may
    spend: ``max_share`` of each route's spend (None: no share bound), ``budget_usd`` per
    ``period`` in all (None: no absolute cap), a route's daily cap on shadowing its reference
    (``reference_budget_usd``: one number for every route, or route → USD; None, or a route
    not in the mapping: no such cap), each answer's ``max_tokens``, the longest prompt
    explored (``max_prompt_chars`` of message text), and the judge."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = True
    # ε samples the requests to explore; max_share bounds what they spend. 0.1 left most of
    # the share unused (0.4% of spend against 5% in bench.routing.learning_loop, 5 seeds of
    # 1000 requests) and the wrong prior uncaught in 4 of 5 seeds; 0.5 spent ≈ 2%
    epsilon: float | dict[str, float] = 0.5
    candidates: int = Field(default=1, ge=0)
    max_share: float | None = Field(default=DEFAULT_MAX_SHARE, gt=0.0, le=1.0)
    budget_usd: float | None = Field(default=None, ge=0.0)
    period: str = "daily"
    reference_budget_usd: float | dict[str, float] | None = None
    max_tokens: int = Field(default=512, gt=0)
    # a longer prompt is served, not explored: shadowing re-sends it whole to the reference
    # and a candidate (litellm's handling of an 8 MB prompt held the event loop ~60 ms a
    # call: the hostile bench's loop stall), while its judgement keys on encoder_max_chars
    max_prompt_chars: int = Field(default=100_000, gt=0)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)

    @classmethod
    def from_settings(cls, settings: Settings) -> ExplorationSettings:
        return settings.retraining.exploration

    @field_validator("epsilon")
    @classmethod
    def _probability(cls, v: float | dict[str, float]) -> float | dict[str, float]:
        for p in v.values() if isinstance(v, Mapping) else [v]:
            if isinstance(p, bool) or not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"epsilon: a probability in [0, 1] (or route → one), not {v!r}")
        return v

    @field_validator("period")
    @classmethod
    def _period(cls, v: str) -> str:
        if v not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}, not {v!r}")
        return v

    @field_validator("reference_budget_usd", mode="before")
    @classmethod
    def _caps(cls, caps: object) -> object:
        values = caps.values() if isinstance(caps, Mapping) else [] if caps is None else [caps]
        for v in values:
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ValueError("retraining.exploration.reference_budget_usd: a number ≥ 0 "
                                 f"or a mapping route → number ≥ 0, not {caps!r}")
        return caps

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
        """The backend the operator named to judge answers (never routed), if any."""
        return self.judge.model if self.judge.kind == "llm" else None
