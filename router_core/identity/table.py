"""Model identity: one canonical expert id per distinct model, and the names that reach it.

The benchmark datasets name the same weights differently (RouterBench's
``mistralai/mixtral-8x7b-chat`` is MMLU-Pro's ``Mixtral-8x7B-Instruct-v0.1``), and a
deployment names them a third way (``groq/mixtral-8x7b-32768``). ``model_identity.yaml``
holds one entry per model with its dataset columns and its explicit aliases; this module
loads it and resolves a name to an entry.

Resolution never guesses: a LiteLLM model string is reduced to its model id (provider
prefixes and an organisation path dropped, lower-cased, a Bedrock cross-region prefix
dropped) and must then equal an entry's id, one of its dataset columns or one of its
aliases, reduced the same way. Anything else, however close (``llama-3.1-8b`` against a
70B entry, ``gpt-4o-mini`` against ``gpt-4o``), resolves to None: a wrong identity would
route on another model's strengths, while an unknown model is placed by cold start.

Example::

    table = identity_table()
    table.resolve("together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo").id
    # 'llama-3.1-70b-instruct'
    table.canonical("routerbench", "mistralai/mixtral-8x7b-chat")
    # 'mixtral-8x7b-instruct-v0.1'
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

IDENTITY_FILE = Path(__file__).with_name("model_identity.yaml")
# A Bedrock cross-region inference profile id: ``us.`` + the model id.
_REGION_PREFIX = re.compile(r"^(us|eu|apac|us-gov|global)\.(?=[a-z0-9-]+\.)")


@dataclass(frozen=True)
class Identity:
    """One model: its canonical id, what is known about it, and where the data has it."""

    id: str
    family: str | None = None
    params_b: float | None = None  # total parameters, billions
    active_b: float | None = None  # active per token (mixture of experts), billions
    tuned: bool | None = None  # instruction/chat tuned
    usd_per_mtok_out: float | None = None  # list output price, for models without a size
    columns: Mapping[str, str] = field(default_factory=dict)  # dataset -> column name
    aliases: tuple[str, ...] = ()

    def names(self) -> tuple[str, ...]:
        """Every name that resolves to this model (id, dataset columns, aliases)."""
        return (self.id, *self.columns.values(), *self.aliases)


@dataclass(frozen=True)
class Match:
    """A resolved name: the identity, and how it matched (``id``, ``column`` or ``alias``)."""

    identity: Identity
    how: str

    @property
    def id(self) -> str:
        return self.identity.id


def model_key(name: str) -> str:
    """The comparable form of a model name: its last path segment, lower-cased.

    LiteLLM prefixes the provider (``together_ai/``, ``bedrock/converse/``) and providers
    prefix an organisation (``meta-llama/``, ``accounts/fireworks/models/``); the model id is
    the last segment. ``together_ai/meta-llama/Meta-Llama-3.1-70B-Instruct-Turbo`` →
    ``meta-llama-3.1-70b-instruct-turbo``; ``bedrock/us.meta.llama3-1-8b-instruct-v1:0`` →
    ``meta.llama3-1-8b-instruct-v1:0`` (a Bedrock cross-region profile names the same model).
    """
    parts = [p for p in str(name).strip().lower().split("/") if p]
    return _REGION_PREFIX.sub("", parts[-1] if parts else "")


@dataclass(frozen=True)
class IdentityTable:
    experts: tuple[Identity, ...]
    _by_key: Mapping[str, Match] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        index: dict[str, Match] = {}
        for ident in self.experts:
            named = [(ident.id, "id"), *((c, "column") for c in ident.columns.values())]
            for name, how in [*named, *((a, "alias") for a in ident.aliases)]:
                key = model_key(name)
                other = index.get(key)
                if other is not None and other.id != ident.id:
                    raise ValueError(
                        f"{name!r} names both {other.id!r} and {ident.id!r} in the identity table"
                    )
                if other is None or how == "id":
                    index[key] = Match(ident, how)
        object.__setattr__(self, "_by_key", index)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(e.id for e in self.experts)

    def get(self, expert_id: str) -> Identity:
        for ident in self.experts:
            if ident.id == expert_id:
                return ident
        raise KeyError(f"no model {expert_id!r} in the identity table")

    def resolve(self, model: str) -> Match | None:
        """The identity ``model`` names exactly (id, dataset column or alias), else None."""
        return self._by_key.get(model_key(model))

    def canonical(self, dataset: str, column: str) -> str:
        """The expert id of ``dataset``'s model column ``column``."""
        for ident in self.experts:
            if ident.columns.get(dataset) == column:
                return ident.id
        raise KeyError(f"{dataset}: model column {column!r} is not in the identity table")

    def columns_of(self, dataset: str) -> dict[str, str]:
        """column -> expert id for every model the identity table lists for ``dataset``."""
        return {e.columns[dataset]: e.id for e in self.experts if dataset in e.columns}


def load_identity_table(path: str | Path = IDENTITY_FILE) -> IdentityTable:
    """Read an identity file (default: the packaged ``model_identity.yaml``)."""
    raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    experts = []
    for item in raw["experts"]:
        experts.append(
            Identity(
                id=str(item["id"]),
                family=item.get("family"),
                params_b=_float(item.get("params_b")),
                active_b=_float(item.get("active_b")),
                tuned=item.get("tuned"),
                usd_per_mtok_out=_float(item.get("usd_per_mtok_out")),
                columns={str(k): str(v) for k, v in (item.get("columns") or {}).items()},
                aliases=tuple(str(a) for a in item.get("aliases") or ()),
            )
        )
    ids = [e.id for e in experts]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: repeated ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return IdentityTable(experts=tuple(experts))


@functools.lru_cache(maxsize=1)
def identity_table() -> IdentityTable:
    """The packaged identity table (read once; immutable)."""
    return load_identity_table()


def _float(x) -> float | None:
    return None if x is None else float(x)
