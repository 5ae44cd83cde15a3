"""Published capability: what public benchmark results say about a model, with their source.

A backend the router has no outcomes for (gpt-4o, claude-sonnet-4-6 in the packaged config)
must be placed by what is known about it, not by its price. ``capability.yaml`` holds, per
canonical model id, the published aggregate results retrieved for it (each with its source,
the source's row name and unit), a vendor's ordering claim where no number exists, and why a
model has no number. This module reads it:

- ``published(model)``: every sourced score of a model (frozen ``Score`` records);
- ``aggregate(model, benchmark)``: the mean of a model's values on one benchmark, or None;
- ``benchmark_map(source, target)``: a least-squares line from one benchmark to another, fitted
  on the models that have both; its residual standard deviation is the uncertainty of a mapped
  value (how far the models it was fitted on fall from the line);
- ``capability(model)``: a model's place on the primary scale (MMLU-Pro) with its uncertainty
  and how it is known: published, or mapped from a secondary benchmark (MMLU, else GPQA
  Diamond, ``SECONDARY``), else None.

Names resolve through the identity table (model_identity.yaml, its ``experts`` and its
``published`` models), exactly and never by a guess: an unknown name has no capability.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from router_core.identity.table import IDENTITY_FILE, Identity, IdentityTable, load_identity_table

CAPABILITY_FILE = Path(__file__).with_name("capability.yaml")
PRIMARY = "mmlu_pro"
SECOND = "mmlu"
# secondary benchmarks, tried in this order when a model has no primary value: MMLU where the
# vendors still published it (to 2025), GPQA Diamond for the models after (2025-26 vendors
# publish it instead of MMLU-Pro). Each is mapped by its own line, fitted on the table's models
# with both (``benchmark_map``); the line's residual is the mapped value's uncertainty.
SECONDARY = (SECOND, "gpqa_diamond")
_UNITS = {"percent": 100.0, "fraction": 1.0}
_SCORE_KEYS = {"benchmark", "value", "source", "row", "note"}
_RELATIONS = {"at_least", "about"}
MIN_FIT = 5  # fewer models with both benchmarks than this: no line is fitted


@dataclass(frozen=True)
class Source:
    key: str
    title: str
    url: str
    where: str
    unit: str  # how the source writes its numbers: percent or fraction


@dataclass(frozen=True)
class Score:
    """One published number: ``value`` on [0, 1]; ``raw`` exactly as the source writes it."""

    model: str
    benchmark: str
    value: float
    raw: float
    source: Source
    row: str  # the source's own name for the model
    note: str | None = None


@dataclass(frozen=True)
class Relation:
    """A vendor's ordering claim where no number could be sourced (``other`` may be None)."""

    model: str
    relation: str  # at_least | about
    other: str | None
    claim: str
    source: Source


@dataclass(frozen=True)
class Capability:
    """A model on the primary scale: ``value`` ± ``sd`` (None: a single published value)."""

    model: str
    value: float
    sd: float | None
    how: str  # "published mmlu_pro", "mapped from mmlu|gpqa_diamond", "vendor claim: at least X"
    scores: tuple[Score, ...]
    claim: Relation | None = None  # set when the value is another model's, by a vendor claim

    @property
    def source_title(self) -> str:
        return self.claim.source.title if self.claim else self.scores[0].source.title


@dataclass(frozen=True)
class BenchmarkMap:
    """target ≈ slope·source + intercept, fitted on ``models``; ``residual_sd`` is the
    standard deviation of the fit's residuals (n − 2 degrees of freedom): the uncertainty of
    a value mapped onto the target scale."""

    source: str
    target: str
    slope: float
    intercept: float
    residual_sd: float
    models: tuple[str, ...]

    def __call__(self, x: float) -> tuple[float, float]:
        """(mapped value clipped to [0, 1], its uncertainty)."""
        return min(1.0, max(0.0, self.slope * x + self.intercept)), self.residual_sd


@dataclass(frozen=True)
class CapabilityTable:
    primary: str
    benchmarks: Mapping[str, str]
    sources: Mapping[str, Source]
    scores: Mapping[str, tuple[Score, ...]]
    relations: Mapping[str, tuple[Relation, ...]]
    unsourced: Mapping[str, str]
    identities: IdentityTable = field(repr=False, compare=False)

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.scores, *self.relations, *self.unsourced]))

    def resolve(self, name: str) -> str | None:
        """The canonical id ``name`` names (id, dataset column or alias), else None."""
        match = self.identities.resolve(name)
        return None if match is None else match.id

    def published(self, model: str) -> tuple[Score, ...]:
        model_id = self.resolve(model)
        return self.scores.get(model_id, ()) if model_id else ()

    def aggregate(self, model: str, benchmark: str | None = None) -> float | None:
        """Mean of the model's sourced values on ``benchmark`` (default: the primary)."""
        values = [
            s.value for s in self.published(model) if s.benchmark == (benchmark or self.primary)
        ]
        return sum(values) / len(values) if values else None

    def benchmark_map(self, source: str = SECOND, target: str | None = None) -> BenchmarkMap | None:
        """Least-squares line target ~ source over models with both; None below MIN_FIT."""
        target = target or self.primary
        pairs = [
            (m, x, y)
            for m in self.scores
            if (x := self.aggregate(m, source)) is not None
            and (y := self.aggregate(m, target)) is not None
        ]
        if len(pairs) < MIN_FIT:
            return None
        xs, ys = [p[1] for p in pairs], [p[2] for p in pairs]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        sxx = sum((x - mx) ** 2 for x in xs)
        if sxx == 0:
            return None
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx
        intercept = my - slope * mx
        ssr = sum((y - (slope * x + intercept)) ** 2 for x, y in zip(xs, ys, strict=True))
        return BenchmarkMap(
            source, target, slope, intercept, math.sqrt(ssr / (len(pairs) - 2)),
            tuple(p[0] for p in pairs),
        )  # fmt: skip

    def capability(self, model: str, second: str = SECOND,
                   claims: bool = True) -> Capability | None:
        """The model on the primary scale: its published mean (sd: the spread between its
        sources), else its first secondary benchmark with a value and a line (``second``,
        then the rest of ``SECONDARY``) mapped by ``benchmark_map`` (sd: the fit's residual,
        widened by the sources' spread), else (``claims``) a vendor's claim relating it to a
        model with a number (``_claimed``), else None."""
        model_id = self.resolve(model)
        if model_id is None:
            return None
        scores = self.published(model_id)
        primary = [s.value for s in scores if s.benchmark == self.primary]
        if primary:
            return Capability(model_id, sum(primary) / len(primary), _sd(primary),
                              f"published {self.primary}", scores)  # fmt: skip
        for bench in dict.fromkeys((second, *SECONDARY)):
            other = [s.value for s in scores if s.benchmark == bench]
            line = self.benchmark_map(bench) if other else None
            if line is None or line.slope <= 0:  # a line that cannot order models says nothing
                continue
            value, residual = line(sum(other) / len(other))
            spread = line.slope * (_sd(other) or 0.0)
            return Capability(model_id, value, math.hypot(residual, spread),
                              f"mapped from {bench}", scores)  # fmt: skip
        return self._claimed(model_id, second) if claims else None

    def _claimed(self, model_id: str, second: str) -> Capability | None:
        """A vendor's ``at_least`` / ``about`` claim against a model with a number: that
        model's value (for ``at_least`` a floor, taken as the level). A claim is weaker
        evidence than a score, and usually made on other benchmarks than the primary:
        ``claim`` marks it so a prior built on it carries fewer pseudo-outcomes
        (gateway/pool/promise.py), and it never fits a benchmark line."""
        for r in self.relations.get(model_id, ()):
            other = None if r.other is None else self.capability(r.other, second, claims=False)
            if other is not None:
                how = f"vendor claim: {r.relation.replace('_', ' ')} {other.model}"
                return Capability(model_id, other.value, other.sd, how, other.scores, claim=r)
        return None


def _sd(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def load_identities(path: str | Path = IDENTITY_FILE) -> IdentityTable:
    """The dataset experts and the published-only models of model_identity.yaml in one table
    (the same exact resolution; a name naming two models is refused across both lists)."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    extra = [
        Identity(
            id=str(item["id"]),
            family=item.get("family"),
            params_b=None if item.get("params_b") is None else float(item["params_b"]),
            active_b=None if item.get("active_b") is None else float(item["active_b"]),
            tuned=item.get("tuned"),
            aliases=tuple(str(a) for a in item.get("aliases") or ()),
        )
        for item in raw.get("published") or ()
    ]
    experts = load_identity_table(path).experts
    ids = [e.id for e in (*experts, *extra)]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: repeated ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return IdentityTable(experts=(*experts, *extra))


def load_capability_table(
    path: str | Path = CAPABILITY_FILE, identities: IdentityTable | None = None
) -> CapabilityTable:
    """Read a capability file; refuse a score without a known source, a value outside its
    unit's range, a model id the identity table does not hold, or an unknown field."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    identities = identities or load_identities()
    benchmarks = {str(k): str(v) for k, v in raw["benchmarks"].items()}
    primary = str(raw["primary"])
    if primary not in benchmarks:
        raise ValueError(f"{path}: primary {primary!r} is not a listed benchmark")
    sources = {}
    for key, s in raw["sources"].items():
        if s.get("unit") not in _UNITS or not s.get("url") or not s.get("where"):
            raise ValueError(f"{path}: source {key!r} needs url, where and unit percent|fraction")
        sources[str(key)] = Source(str(key), str(s["title"]), str(s["url"]), str(s["where"]),
                                   str(s["unit"]))  # fmt: skip
    scores: dict[str, tuple[Score, ...]] = {}
    relations: dict[str, tuple[Relation, ...]] = {}
    unsourced: dict[str, str] = {}
    known = set(identities.ids)
    for model, entry in raw["models"].items():
        model = str(model)
        if model not in known:
            raise ValueError(f"{path}: {model!r} is not an id of the identity table")
        rows = []
        for s in entry.get("scores") or ():
            if set(s) - _SCORE_KEYS or s.get("source") not in sources:
                raise ValueError(f"{path}: {model}: score {s} needs a known source, no other keys")
            if s["benchmark"] not in benchmarks:
                raise ValueError(f"{path}: {model}: unknown benchmark {s['benchmark']!r}")
            src = sources[s["source"]]
            raw_value = float(s["value"])
            value = raw_value / _UNITS[src.unit]
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{path}: {model}: {raw_value} is out of range in {src.unit}")
            rows.append(Score(model, str(s["benchmark"]), value, raw_value, src, str(s["row"]),
                              s.get("note")))  # fmt: skip
        if rows:
            scores[model] = tuple(rows)
        rels = []
        for r in entry.get("relations") or ():
            other = r.get("other")
            if r.get("relation") not in _RELATIONS or r.get("source") not in sources:
                raise ValueError(f"{path}: {model}: relation {r} needs at_least|about and a source")
            if other is not None and other not in known:
                raise ValueError(f"{path}: {model}: relation names unknown model {other!r}")
            rels.append(
                Relation(model, r["relation"], other, str(r["claim"]), sources[r["source"]])
            )
        if rels:
            relations[model] = tuple(rels)
        if entry.get("unsourced"):
            unsourced[model] = str(entry["unsourced"])
        if not rows and not entry.get("unsourced"):
            raise ValueError(f"{path}: {model} has no score and no word on why (unsourced)")
    return CapabilityTable(primary, benchmarks, sources, scores, relations, unsourced, identities)


@functools.lru_cache(maxsize=1)
def capability_table() -> CapabilityTable:
    """The packaged capability table (read once; immutable)."""
    return load_capability_table()


def published(model_id: str) -> tuple[Score, ...]:
    """Every sourced score of ``model_id`` (or any name resolving to it); () when none."""
    return capability_table().published(model_id)


def aggregate(model_id: str, benchmark: str = PRIMARY) -> float | None:
    """Mean sourced value of ``model_id`` on ``benchmark`` in [0, 1]; None when unsourced."""
    return capability_table().aggregate(model_id, benchmark)


def benchmark_map(source: str = SECOND, target: str = PRIMARY) -> BenchmarkMap | None:
    """The least-squares line from ``source`` to ``target`` (see ``BenchmarkMap``)."""
    return capability_table().benchmark_map(source, target)


def capability(model: str) -> Capability | None:
    """``model`` on the primary scale with its uncertainty and how it is known, or None."""
    return capability_table().capability(model)
