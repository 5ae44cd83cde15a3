"""How the router knows each backend: trained, alias of an expert, fingerprint, or prior.

A backend routes as one expert of the router. Which one, in this order:
  1. ``model_info.router_model`` when set (the operator's word; resolved through the
     identity table when it is a dataset column or an alias, e.g. ``claude-v1``);
  2. the expert named exactly like the backend's ``model_name`` (a prior or a model added
     by ``tollgate models add`` is named after its backend);
  3. the identity table (router_core/identity/model_identity.yaml) on ``model_name``,
     ``litellm_params.model`` and ``model_info.base_model``: an exact name or alias only.
A backend none of these reaches is unknown to the router until cold start gives it a prior
(gateway/pool/priors.py). A backend without a price is never routed (a budget
cannot bound what it costs); it stays reachable by name only if priced.

The status shown per backend (startup table, ``GET /v1/models``, ``tollgate models list``):
``trained`` (the expert learned from outcomes under this name), ``alias of X``,
``fingerprint`` (added by its perplexity or logit fingerprint), ``prior (n outcomes)``
(cold start, refined from n outcomes so far), ``learned (n outcomes)`` (past the prior),
``unknown`` and ``no price``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gateway.config import Backend, Settings
from router_core.identity.table import IdentityTable, identity_table
from router_core.runtime.router import Router

PRIOR_KIND = "prior"  # an expert placed by cold start, still on its prior
LEARNED_KIND = "readout"  # a cold-start expert refined past the prior
COLD_START_KEY = "cold_start"  # router.config[...]: expert -> outcomes it was refined from
FINGERPRINT_KINDS = frozenset({"perplexity", "logit", "mixed"})


@dataclass(frozen=True)
class Known:
    """One backend as the router sees it."""

    backend: str
    expert: str | None  # the router expert it routes as (None: not routable)
    status: str
    kind: str | None = None  # the expert's descriptor kind

    @property
    def on_prior(self) -> bool:
        return self.kind == PRIOR_KIND


def _candidates(b: Backend) -> Iterable[str]:
    yield b.model_name
    yield b.litellm_model
    base = (b.model_info.model_extra or {}).get("base_model")
    if base:
        yield str(base)


def expert_for(b: Backend, router: Router, ids: IdentityTable | None = None) -> str | None:
    """The expert of ``router`` backend ``b`` routes as (module docstring), or None."""
    ids = ids or identity_table()
    experts = router.model_names
    explicit = b.model_info.router_model
    names = [explicit] if explicit else list(_candidates(b))
    for name in names:
        if name in experts:
            return name
    # experts by identity: a router trained on one dataset names them by its columns
    by_id: dict[str, str] = {}
    for expert in experts:
        match = ids.resolve(expert)
        if match is not None:
            by_id.setdefault(match.id, expert)
    for name in names:
        match = ids.resolve(name)
        if match is not None and match.id in by_id:
            return by_id[match.id]
    return None


def outcomes_of(router: Router) -> Mapping[str, int]:
    """expert -> observed outcomes a cold-start expert was refined from."""
    return dict((router.config or {}).get(COLD_START_KEY) or {})


def status_of(b: Backend, expert: str | None, router: Router, priced: bool) -> Known:
    if not priced:
        return Known(b.model_name, None, "no price")
    if expert is None:
        return Known(b.model_name, None, "unknown")
    kind = next(e.kind for e in router.experts if e.name == expert)
    n = outcomes_of(router).get(expert, 0)
    if kind == PRIOR_KIND:
        status = f"prior ({n} outcomes)"
    elif kind == LEARNED_KIND and expert in outcomes_of(router):
        status = f"learned ({n} outcomes)"
    elif kind in FINGERPRINT_KINDS:
        status = "fingerprint"
    elif expert in (b.model_name, b.model_info.router_model):
        status = "trained"
    else:
        status = f"alias of {expert}"
    return Known(b.model_name, expert, status, kind)


def know_backends(
    settings: Settings, router: Router, priced: Iterable[str], ids: IdentityTable | None = None
) -> list[Known]:
    """How ``router`` knows every backend of ``settings`` (model_list order)."""
    priced = set(priced)
    return [
        status_of(b, expert_for(b, router, ids), router, b.model_name in priced)
        for b in settings.model_list
    ]


def table_text(known: list[Known]) -> str:
    """The startup table: one line per backend, then a warning naming what auto cannot use."""
    width = max([len(k.backend) for k in known] + [7])
    lines = [f"{'backend':<{width}}  known as"]
    lines += [f"{k.backend:<{width}}  {k.status}" for k in known]
    unusable = [k.backend for k in known if k.status == "no price"]
    if unusable:
        lines.append(
            f"warning: routes cannot use {', '.join(unusable)}: no price in model_info and "
            "litellm does not know the model (set input/output_cost_per_million in model_info, "
            "or model_info.price_like: a model litellm prices the same)"
        )
    return "\n".join(lines)
