"""The ``retraining:`` section of config.yaml: the learning loop's schedule and exploration
(gateway/learning/loop.py runs it). Every key is typed and a key it does not know is a config
error, so a typo (``min_obervations``) is refused at load instead of silently ignored::

    retraining:
      min_observations: 500     # new observations before a scheduled retrain
      interval_s: 3600          # how often a replica tries (off when absent)
      poll_s: 5                 # how often a replica checks for a promoted version
      margin: 0.005             # promotion guard: AUDC(candidate) ≥ AUDC(current) − margin
      store_prompt_text: false  # privacy: keep only Φ(x) (default: log_prompts)
      refine_priors_s: 600      # refine cold-start backends from new outcomes (null: off)
      exploration: {...}        # shadow calls and their judge (gateway/config/exploration.py)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from gateway.config.exploration import ExplorationSettings
from router_core.evaluation.promotion import DEFAULT_MARGIN


class Retraining(BaseModel):
    """``retraining:`` (module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    min_observations: int = Field(default=500, ge=0)
    interval_s: float | None = Field(default=None, gt=0.0)
    poll_s: float = Field(default=5.0, gt=0.0)
    margin: float = Field(default=DEFAULT_MARGIN, ge=0.0)
    store_prompt_text: bool | None = None  # None: as ``log_prompts``
    refine_priors_s: float | None = Field(default=600.0, gt=0.0)
    exploration: ExplorationSettings = Field(default_factory=ExplorationSettings)
