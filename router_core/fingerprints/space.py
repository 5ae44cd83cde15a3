"""One descriptor space per artifact: mixed pools and describing a model added later.

CSCR §3.1.2 puts logit footprints (K coordinates) and perplexity fingerprints (N
coordinates) on one sphere by taking K = N; one candidate search then covers both, and the
head g_θ learns to place queries against whichever kind each expert has (Table 4, "mixed").
``MixedDescriptor`` is that pool as one ``DescriptorKind``: each model is described by its
own kind and source, every row is a unit vector of the same dimension.

A model added later must land in the space the head was trained for: it is described on
the artifact's probes (``probes.json``) with a kind configured exactly as the artifact
recorded it (``router.config["descriptor"]``: scorer, conditioning, token basis), and its
kind must be one the head was trained with. ``kind_for_artifact`` rebuilds that kind.

Example::

    kind = MixedDescriptor(
        {"logit": LogitFootprint(), "perplexity": PerplexityFingerprint()},
        assign={"smollm2": "logit", "gpt-4": "perplexity"},
        sources={"logit": {"smollm2": None}, "perplexity": answers},
    )
    E = kind.describe(None, probes, ["smollm2", "gpt-4"])     # (2, N) unit rows
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from router_core.descriptors.base import DescriptorKind, ProbeSet, get_kind


class MixedDescriptor(DescriptorKind):
    """Per-model descriptor kinds in one space; each kind normalises its own rows."""

    name: ClassVar[str] = "mixed"

    def __init__(
        self,
        kinds: Mapping[str, DescriptorKind],
        assign: Mapping[str, str],
        sources: Mapping[str, Any] | None = None,
        default: str | None = None,
    ) -> None:
        unknown = set(assign.values()) - set(kinds)
        if unknown:
            raise ValueError(f"models assigned to kinds without a kind object: {sorted(unknown)}")
        self.kinds = dict(kinds)
        self.assign = dict(assign)
        self.sources = dict(sources or {})
        self.default = default

    def kind_of(self, model: str) -> str:
        name = self.assign.get(model, self.default)
        if name is None:
            raise KeyError(f"{model!r} has no descriptor kind in this mixed pool")
        return name

    def dim(self, probes: ProbeSet) -> int:
        dims = {k.dim(probes) for k in self.kinds.values()}
        if len(dims) != 1:
            raise ValueError(
                f"kinds of one pool must share a dimension (CSCR: K = N), got {sorted(dims)}"
            )
        return dims.pop()

    def raw(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray:
        """Already-normalised rows: kinds differ in scale, so each normalises its own."""
        d = self.dim(probes)
        out = np.zeros((len(models), d), dtype=np.float32)
        by_kind: dict[str, list[int]] = {}
        for i, m in enumerate(models):
            by_kind.setdefault(self.kind_of(m), []).append(i)
        for name, rows in by_kind.items():
            kind = self.kinds[name]
            src = self.sources.get(name, source)
            out[rows] = kind.describe(src, probes, [models[i] for i in rows])
        return out

    def normalise(self, raw: np.ndarray) -> np.ndarray:
        return np.asarray(raw, dtype=np.float32)  # rows are unit vectors already

    def level(self, source: Any, probes: ProbeSet, models: Sequence[str]) -> np.ndarray | None:
        """Each kind's level for its models; None unless every kind knows one."""
        out = np.full(len(models), np.nan)
        for name, kind in self.kinds.items():
            rows = [i for i, m in enumerate(models) if self.kind_of(m) == name]
            if not rows:
                continue
            lv = kind.level(self.sources.get(name, source), probes, [models[i] for i in rows])
            if lv is None:
                return None
            out[rows] = lv
        return out

    def config(self) -> dict:
        return {
            "name": self.name,
            "kinds": {k: v.config() for k, v in self.kinds.items()},
            "assign": dict(self.assign),
            "default": self.default,
        }


def kind_from_config(cfg: Mapping[str, Any], **kwargs: Any) -> DescriptorKind:
    """A descriptor kind configured exactly as an artifact recorded it."""
    name = str(cfg.get("name", "probe-outcome"))
    if name == MixedDescriptor.name:
        kinds = {k: kind_from_config(v, **kwargs) for k, v in dict(cfg["kinds"]).items()}
        return MixedDescriptor(kinds, cfg.get("assign", {}), default=cfg.get("default"))
    cls = get_kind(name)
    if hasattr(cls, "from_config"):
        return cls.from_config(cfg, **kwargs)
    return cls()


def artifact_kinds(router_config: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """kind name → recorded config, for every kind the artifact's head was trained with."""
    cfg = dict(router_config.get("descriptor") or {"name": "probe-outcome"})
    if cfg.get("name") == MixedDescriptor.name:
        return {k: dict(v) for k, v in dict(cfg["kinds"]).items()}
    return {str(cfg.get("name")): cfg}


def kind_for_artifact(
    router_config: Mapping[str, Any], name: str, *, allow_other: bool = False, **kwargs: Any
) -> DescriptorKind:
    """The kind ``name`` as the artifact recorded it, to describe a model added later.

    A kind the head never saw in training is refused unless ``allow_other``: its coordinates
    would share the dimension but not the meaning the head learned (CSCR trains mixed
    pools jointly, Table 4). With ``allow_other`` it is built with default settings.
    """
    recorded = artifact_kinds(router_config)
    if name in recorded:
        return kind_from_config(recorded[name], **kwargs)
    if not allow_other:
        raise ValueError(
            f"this router was trained with {sorted(recorded)} descriptors; a {name!r} "
            "descriptor would not be comparable (retrain with a mixed pool, or force it)"
        )
    return kind_from_config({"name": name}, **kwargs)


def make_descriptor(name: str, *, scorer: str | None = None, **kwargs: Any) -> DescriptorKind:
    """A kind by its command-line name: ``probe-outcome``, ``perplexity`` (Eq. 5 as in the
    paper), ``perplexity-prompt`` (scorer conditioned on the probe prompt) or ``logit``."""
    from router_core.fingerprints.perplexity import PerplexityFingerprint
    from router_core.fingerprints.scorer import Scorer

    if name in ("perplexity", "perplexity-prompt"):
        return PerplexityFingerprint(
            Scorer(scorer), condition_on_prompt=name == "perplexity-prompt", **kwargs
        )
    return get_kind(name)(**kwargs)
