"""The one data form every loader returns and every trainer and evaluator reads.

A routing table is a prompts x models grid of observed quality and cost. Rows are prompt
samples: the same ``prompt_id`` may appear on several rows with different ``sample``
indices (repeated observations, DARS). Quality is in [0, 1] with NaN where a model was not
observed on a prompt; cost is in USD per query (or a documented proxy, see ``cost_unit``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class RoutingTable:
    """Prompts x models outcomes.

    Attributes:
        name: dataset name, e.g. ``"routerbench"``.
        prompt_ids: (n,) str, stable id of each row's prompt.
        prompts: (n,) str, the prompt text the encoder embeds.
        models: (m,) model names, the column order of ``quality`` and ``cost``.
        quality: (n, m) float in [0, 1], NaN = not observed.
        cost: (n, m) float, USD per query (NaN allowed where quality is NaN).
        split: (n,) str, one of ``SPLITS``.
        category: (n,) str or None, e.g. the task or subject.
        sample: (n,) int or None, the repeated-sample index of a row.
        responses: model -> (n,) object array of response text (None where absent).
        cost_unit: how ``cost`` was obtained ("usd" or a sentence saying the proxy).
        split_name: the split recipe that set ``split`` (``standard``, ``ood``,
            ``unseen-models``).
        unseen_models: models held out of training (``unseen-models`` split). A trainer fits
            on ``seen_models`` only and may read an unseen model's outcomes on training rows
            solely to build its descriptor (probe prompts); an evaluator routes the test rows
            among ``unseen_models``. Empty for the other splits.
    """

    name: str
    prompt_ids: np.ndarray
    prompts: np.ndarray
    models: tuple[str, ...]
    quality: np.ndarray
    cost: np.ndarray
    split: np.ndarray
    category: np.ndarray | None = None
    sample: np.ndarray | None = None
    responses: dict[str, np.ndarray] = field(default_factory=dict)
    cost_unit: str = "usd"
    split_name: str = "standard"
    unseen_models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        n, m = len(self.prompts), len(self.models)
        if self.quality.shape != (n, m) or self.cost.shape != (n, m):
            raise ValueError(
                f"quality {self.quality.shape} and cost {self.cost.shape} must be ({n}, {m})"
            )
        if len(self.prompt_ids) != n or len(self.split) != n:
            raise ValueError("prompt_ids and split must have one entry per row")
        bad = set(np.unique(self.split)) - set(SPLITS)
        if bad:
            raise ValueError(f"unknown split values {sorted(bad)}; use {SPLITS}")
        if set(self.unseen_models) - set(self.models):
            raise ValueError("unseen_models must be a subset of models")

    def __len__(self) -> int:
        return len(self.prompts)

    @property
    def n_models(self) -> int:
        return len(self.models)

    @property
    def seen_models(self) -> tuple[str, ...]:
        """The models a trainer may fit on (all of them unless ``unseen_models`` is set)."""
        return tuple(m for m in self.models if m not in self.unseen_models)

    @property
    def train_models(self) -> tuple[str, ...]:
        """Alias of ``seen_models``: what ``train_router`` supervises the head with."""
        return self.seen_models

    @property
    def deployable_models(self) -> tuple[str, ...]:
        """The pool an evaluator routes the test rows among."""
        return self.unseen_models or self.models

    def rows(self, index: np.ndarray | Sequence[int] | Sequence[bool]) -> RoutingTable:
        """A table of the given rows (integer indices or a boolean mask)."""
        idx = np.asarray(index)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)

        def pick(a: np.ndarray | None) -> np.ndarray | None:
            return None if a is None else a[idx]

        return replace(
            self,
            prompt_ids=self.prompt_ids[idx],
            prompts=self.prompts[idx],
            quality=self.quality[idx],
            cost=self.cost[idx],
            split=self.split[idx],
            category=pick(self.category),
            sample=pick(self.sample),
            responses={k: v[idx] for k, v in self.responses.items()},
        )

    def split_rows(self, name: str) -> RoutingTable:
        """The rows of one split (``train``, ``val`` or ``test``)."""
        return self.rows(self.split == name)

    def with_models(self, models: Sequence[str]) -> RoutingTable:
        """A table restricted to (and ordered by) the given models."""
        cols = [self.models.index(m) for m in models]
        return replace(
            self,
            models=tuple(models),
            quality=self.quality[:, cols],
            cost=self.cost[:, cols],
            responses={k: v for k, v in self.responses.items() if k in models},
            unseen_models=tuple(m for m in self.unseen_models if m in models),
        )

    def with_split(self, split: np.ndarray) -> RoutingTable:
        return replace(self, split=np.asarray(split))

    def mean_cost(self) -> np.ndarray:
        """(m,) mean USD per query of each model, ignoring missing cells."""
        return np.nanmean(self.cost, axis=0)

    def mean_quality(self) -> np.ndarray:
        """(m,) mean quality of each model, ignoring missing cells."""
        return np.nanmean(self.quality, axis=0)
