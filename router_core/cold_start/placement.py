"""Cold start: a model nobody has data on joins the pool on a prior, and outcomes refine it.

A backend whose model resolves to no expert of the router still has to be routable from its
first request. What is known about it before any outcome: its price, and often its family
and size from its name. The prior places it among the router's experts of similar
effective size (and the same family), in the runtime form p̂ = σ(a·(q·e) + b):

    w_h  ∝ exp(−(ln s_h − ln s)² / 2σ²) · (2 if same family) · (½ if tuning differs)
    v    = Σ_h w_h a_h e_h / Σ_h w_h,   e = v/‖v‖,  a = ‖v‖,  b = Σ_h w_h b_h / Σ_h w_h − m

with s the effective size: active parameters in billions, or, for a model that publishes
none, its output price read through router_core.data.mmlu_pro's scale ($0.0125 per 1M
output tokens per billion parameters). Averaging directions shortens v, so the prior
routes mostly on level, little on the prompt, until outcomes arrive; m (``pessimism``, in
logits) keeps an unproven model from taking traffic from proven ones of equal promise.

Refinement is the probe readout with the prior as its mean (router_core.cold_start.readout
``fit_readout(..., prior=a·e)``): n observed outcomes on prompts with query vectors Q move
the descriptor from the prior towards what the model did, with no retraining of the head.

Example::

    traits = traits_from_name("together_ai/Qwen/Qwen2.5-72B-Instruct-Turbo", usd_out=1.2)
    prior = place_prior(router, traits, identity_traits(identity_table()))
    router = router.with_expert(prior.expert("qwen-72b", cost_usd), a=prior.a, b=prior.b)
    refined = refine(prior, Q_observed, outcomes)          # a Placement, same form
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from router_core.cold_start.readout import fit_readout
from router_core.data.mmlu_pro import USD_PER_MTOK_PER_B
from router_core.identity.table import IdentityTable, model_key
from router_core.runtime.router import Expert, Router

SIZE_BANDWIDTH = 1.0  # σ in ln(billions): a factor e ≈ 2.7 in size is one σ
FAMILY_WEIGHT = 2.0
TUNING_MISMATCH_WEIGHT = 0.5
PESSIMISM = 0.25  # logits subtracted from the prior's intercept

_SIZE = re.compile(r"(?<![a-z0-9.])(?:(\d+)x)?(\d+(?:\.\d+)?)b(?![a-z0-9])")
_TUNED = re.compile(r"(instruct|chat|-it$|-it-|turbo|versatile|instant|claude|gemini|gpt|^o\d)")
# name prefix -> family; the longest matching prefix wins (llama-3.1 before llama-3)
_FAMILIES = (
    "gpt-4o", "gpt-4.1", "gpt-4", "gpt-3.5", "gpt-5", "o1", "o3", "o4",
    "claude-3-5", "claude-3-7", "claude-3", "claude", "gemini-1.5", "gemini-2.0", "gemini-2.5",
    "gemini", "llama-3.3", "llama-3.2", "llama-3.1", "llama-3", "llama-2", "mixtral",
    "mistral-nemo", "mistral", "qwen2.5", "qwen2", "qwen1.5", "qwen", "gemma-2", "gemma",
    "phi-3", "deepseek", "yi", "command-r", "jamba",
)  # fmt: skip


@dataclass(frozen=True)
class ModelTraits:
    """What is known about a model before any outcome."""

    family: str | None = None
    active_b: float | None = None  # billions of parameters per token
    tuned: bool | None = None
    usd_per_mtok_out: float | None = None

    def effective_size(self) -> float | None:
        """Active billions, or the size its output price stands for."""
        if self.active_b:
            return float(self.active_b)
        if self.usd_per_mtok_out:
            return float(self.usd_per_mtok_out) / USD_PER_MTOK_PER_B
        return None


def _canonical_name(key: str) -> str:
    """``meta-llama-3.1-70b-instruct`` → ``llama-3.1-70b-instruct``; llama3.1 → llama-3.1."""
    key = re.sub(r"^meta-", "", key)
    key = re.sub(r"^llama(\d)", r"llama-\1", key)
    return key.replace("_", ".")


def traits_from_name(model: str, usd_out: float | None = None) -> ModelTraits:
    """Family and size where the name says them (``8x7b`` counts 2 experts of 7B active,
    Mixtral's routing), and the output price in USD per 1M tokens if known."""
    key = _canonical_name(model_key(model))
    family = next((f for f in sorted(_FAMILIES, key=len, reverse=True) if key.startswith(f)), None)
    size = None
    m = _SIZE.search(key)
    if m:
        size = float(m.group(2)) * (2.0 if m.group(1) else 1.0)
    tuned = True if _TUNED.search(key) else None
    return ModelTraits(family=family, active_b=size, tuned=tuned, usd_per_mtok_out=usd_out)


def identity_traits(table: IdentityTable) -> dict[str, ModelTraits]:
    """expert id -> its traits from the identity table."""
    return {
        e.id: ModelTraits(
            family=e.family,
            active_b=e.active_b or e.params_b,
            tuned=e.tuned,
            usd_per_mtok_out=e.usd_per_mtok_out,
        )
        for e in table.experts
    }


@dataclass(frozen=True)
class Placement:
    """A descriptor in the runtime form: p̂ = σ(a·(q·e) + b)."""

    descriptor: np.ndarray
    a: float
    b: float
    n_outcomes: int = 0

    @property
    def w(self) -> np.ndarray:
        """a·e, the readout's weight vector (its prior mean when refined)."""
        return self.a * np.asarray(self.descriptor, dtype=float)

    def expert(self, name: str, cost_usd: float, kind: str = "prior") -> Expert:
        return Expert(name=name, descriptor=self.descriptor.astype(np.float32),
                      cost_usd=float(cost_usd), kind=kind)  # fmt: skip


def neighbour_weights(
    traits: ModelTraits, known: Mapping[str, ModelTraits], names: tuple[str, ...]
) -> np.ndarray:
    """(len(names),) normalised weights of the router's experts as the new model's peers."""
    size = traits.effective_size()
    w = np.ones(len(names))
    for i, name in enumerate(names):
        other = known.get(name)
        if other is None:
            w[i] = 0.0
            continue
        s = other.effective_size()
        if size and s:
            w[i] = math.exp(-((math.log(s) - math.log(size)) ** 2) / (2 * SIZE_BANDWIDTH**2))
        if traits.family and other.family == traits.family:
            w[i] *= FAMILY_WEIGHT
        if traits.tuned is not None and other.tuned is not None and other.tuned != traits.tuned:
            w[i] *= TUNING_MISMATCH_WEIGHT
    if w.sum() <= 0:
        w = np.ones(len(names))
    return w / w.sum()


def place_prior(
    router: Router,
    traits: ModelTraits,
    known: Mapping[str, ModelTraits],
    *,
    pessimism: float = PESSIMISM,
) -> Placement:
    """The prior of a model with ``traits`` among ``router``'s experts (module docstring)."""
    names = router.model_names
    w = neighbour_weights(traits, known, names)
    cal = router.calibration
    a = np.array([cal.a.get(n, cal.a0) for n in names])
    b = np.array([cal.b.get(n, cal.b0) for n in names])
    E = np.stack([e.descriptor for e in router.experts]).astype(float)
    v = (w * a) @ E
    norm = float(np.linalg.norm(v))
    if norm < 1e-9:  # no direction agrees: a level only, along the first expert
        return Placement(E[0].astype(np.float32), 0.0, float(w @ b) - pessimism)
    return Placement((v / norm).astype(np.float32), norm, float(w @ b) - pessimism)


def refine(prior: Placement, Q: np.ndarray, outcomes: np.ndarray, c: float = 1.0) -> Placement:
    """The readout of ``outcomes`` on query vectors ``Q`` with the prior as its mean.

    With no signal yet (fewer than two outcomes, or all alike) the prior stays, its count
    updated.
    """
    u = np.asarray(outcomes, dtype=float)
    n = int(np.isfinite(u).sum())
    r = fit_readout(Q, u, c, prior=prior.w)
    if r is None:
        return Placement(prior.descriptor, prior.a, prior.b, n)
    return Placement(r.descriptor, r.a, r.b, n)
