"""The pluggable descriptor interface: how a model becomes a unit vector e_h.

A descriptor kind turns "what we know about model h on the artifact's probe set" into a
point on the unit sphere of one dimension d (CSCR §3.1). Training, the candidate search and the
decision rule only ever see those vectors, so a new kind (logit footprint, perplexity
fingerprint, ...) slots in by implementing ``DescriptorKind`` and nothing else.

Contract for every kind:
  * ``raw(source, probes, models) -> (m, d)`` float array, one row per model, computed on
    exactly the probes in ``probes`` (the artifact records them in ``probes.json``);
    ``source`` is whatever the kind needs (a ``RoutingTable`` for probe outcomes, model
    outputs or weights for fingerprints);
  * ``dim(probes) -> d``: the same for every model of one artifact;
  * ``normalise(raw) -> (m, d)`` unit rows; the default (CSCR Eq. 4-5) is per-model
    mean-centring, unit variance, then ℓ2-normalisation, which needs no pool statistics, so
    a model described later lands in the same space as the trained ones;
  * ``describe(...) = normalise(raw(...))`` is what the trainer calls.

``get_kind(name)`` finds a kind by its ``name`` among the subclasses of ``DescriptorKind``
(this package's and ``router_core.fingerprints``'), so defining the class is registering it.

Example::

    kind = get_kind("probe-outcome")()
    probes = ProbeSet.sample(table.split_rows("train"), n=192, seed=0)
    E = kind.describe(table, probes, table.models)  # (m, d), ‖E[i]‖ = 1
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

_EPS = 1e-8


@dataclass(frozen=True)
class ProbeSet:
    """The N probe prompts an artifact's descriptors are computed on.

    ``ids`` and ``prompts`` are what ``probes.json`` stores; a model added later is
    described on these same prompts.
    """

    ids: tuple[str, ...]
    prompts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def sample(cls, table: Any, n: int, seed: int = 0) -> ProbeSet:
        """Draw ``n`` distinct prompts of ``table`` (a RoutingTable), seeded.

        The draw is stratified by ``table.category`` when present, so every task or subject
        is represented in proportion.
        """
        ids, first = np.unique(np.asarray(table.prompt_ids, dtype=str), return_index=True)
        rng = np.random.default_rng(seed)
        n = min(n, len(ids))
        if table.category is not None:
            cats = np.asarray(table.category, dtype=str)[first]
            order = rng.permutation(len(ids))
            # round-robin over categories in shuffled order: proportional, deterministic
            rank = np.empty(len(ids), dtype=float)
            for c in np.unique(cats):
                members = order[cats[order] == c]
                rank[members] = (np.arange(len(members)) + 0.5) / len(members)
            pick = np.lexsort((order.argsort(), rank))[:n]
        else:
            pick = rng.permutation(len(ids))[:n]
        pick = np.sort(pick)
        prompts = np.asarray(table.prompts, dtype=object)[first[pick]]
        return cls(ids=tuple(ids[pick].tolist()), prompts=tuple(str(p) for p in prompts))

    def to_json(self) -> list[dict]:
        return [{"id": i, "prompt": p} for i, p in zip(self.ids, self.prompts)]

    @classmethod
    def from_json(cls, items: Sequence[dict]) -> ProbeSet:
        return cls(
            ids=tuple(str(d["id"]) for d in items), prompts=tuple(str(d["prompt"]) for d in items)
        )


def unit_rows(x: np.ndarray, center: bool = True, scale: bool = True) -> np.ndarray:
    """Per-row mean-centring and unit variance (optional), then ℓ2 to the unit sphere.

    A row that is constant (a model right on every probe) has no direction after centring;
    it keeps its uncentred direction instead, so every output row has norm 1.
    """
    x = np.asarray(x, dtype=np.float64)
    if not np.isfinite(x).all():  # a missing coordinate takes its row's mean
        x = np.where(np.isfinite(x), x, np.nan)
        x = np.nan_to_num(np.where(np.isnan(x), np.nanmean(x, axis=1, keepdims=True), x))
    y = x - x.mean(axis=1, keepdims=True) if center else x.copy()
    if scale:
        y = y / np.maximum(y.std(axis=1, keepdims=True), _EPS)
    norm = np.linalg.norm(y, axis=1, keepdims=True)
    flat = norm[:, 0] < _EPS
    if flat.any():
        fallback = x[flat] if np.linalg.norm(x[flat]) > 0 else np.ones_like(x[flat])
        y[flat] = fallback
        norm = np.linalg.norm(y, axis=1, keepdims=True)
    return (y / np.maximum(norm, _EPS)).astype(np.float32)


class DescriptorKind(ABC):
    """A way to describe a model as a unit vector on the artifact's probe set."""

    name: ClassVar[str]

    @abstractmethod
    def raw(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray:
        """(len(models), dim) unnormalised features of each model on ``probes``."""

    def dim(self, probes: ProbeSet) -> int:
        """The descriptor dimension d; by default one coordinate per probe (N = d)."""
        return len(probes)

    def normalise(self, raw: np.ndarray) -> np.ndarray:
        """(m, d) raw → unit rows (CSCR Eq. 4-5: centre, unit variance, ℓ2)."""
        return unit_rows(raw)

    def describe(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray:
        """The unit descriptors e_h, shape (len(models), dim(probes))."""
        e = self.normalise(self.raw(source, probes, models))
        if e.shape != (len(models), self.dim(probes)):
            raise ValueError(
                f"{self.name}: descriptors have shape {e.shape}, expected "
                f"({len(models)}, {self.dim(probes)})"
            )
        return e

    def level(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray | None:
        """(m,) each model's overall quality level on the probes, if the kind knows it.

        Unit descriptors drop the level; the trainer uses it to calibrate models that have
        no training rows of their own (unseen models). ``None``: use the pooled calibration.
        """
        return None

    def config(self) -> dict:
        """What the artifact records about this kind (its name and settings)."""
        return {"name": self.name}


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def known_kinds() -> dict[str, type[DescriptorKind]]:
    """name → class of every concrete kind defined here or in ``router_core.fingerprints``."""
    import importlib

    for module in ("router_core.descriptors.probe_outcome", "router_core.fingerprints"):
        try:
            importlib.import_module(module)
        except ImportError:  # fingerprints are an optional extra
            pass
    return {
        c.name: c
        for c in _subclasses(DescriptorKind)
        if getattr(c, "name", None) and not getattr(c, "__abstractmethods__", None)
    }


def get_kind(name: str) -> type[DescriptorKind]:
    """The descriptor kind class called ``name`` (e.g. ``"probe-outcome"``)."""
    kinds = known_kinds()
    if name not in kinds:
        raise KeyError(f"unknown descriptor kind {name!r}; known: {sorted(kinds)}")
    return kinds[name]
