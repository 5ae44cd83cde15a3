"""Training data preparation: data hash, prompt aggregation, embeddings, probe set."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from router_core.data.splits import carve_val
from router_core.data.table import RoutingTable
from router_core.descriptors.base import ProbeSet
from router_core.encoders import bulk_encoder
from router_core.runtime.router import Router
from router_core.training.config import TrainConfig


def data_hash(table: RoutingTable) -> str:
    """sha256 over what training reads: ids, text, models, quality, cost, split."""
    h = hashlib.sha256()
    h.update("\x1f".join(map(str, table.prompt_ids)).encode())
    h.update("\x1f".join(map(str, table.prompts)).encode("utf-8", "surrogatepass"))
    h.update("\x1f".join(table.models).encode())
    h.update(np.ascontiguousarray(table.quality, dtype=np.float64).tobytes())
    h.update(np.ascontiguousarray(table.cost, dtype=np.float64).tobytes())
    h.update("\x1f".join(map(str, table.split)).encode())
    return h.hexdigest()


def aggregate_prompts(table: RoutingTable) -> RoutingTable:
    """One row per prompt_id: mean quality and cost over repeated samples (DARS q̄, c̄)."""
    ids, first, inv = np.unique(
        np.asarray(table.prompt_ids, dtype=str), return_index=True, return_inverse=True
    )
    if len(ids) == len(table):
        return table
    order = np.argsort(first)  # keep first-appearance order
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    grp = rank[inv]
    n = len(ids)

    def mean(x: np.ndarray) -> np.ndarray:
        ok = np.isfinite(x)
        out = np.full((n, x.shape[1]), np.nan)
        for j in range(x.shape[1]):
            s = np.bincount(grp[ok[:, j]], weights=x[ok[:, j], j], minlength=n)
            c = np.bincount(grp[ok[:, j]], minlength=n)
            out[:, j] = np.where(c > 0, s / np.maximum(c, 1), np.nan)
        return out

    base = table.rows(first[order])
    return replace(base, quality=mean(table.quality), cost=mean(table.cost), sample=None)


def positive_mask(u: np.ndarray, tol: float) -> np.ndarray:
    best = np.nanmax(np.where(np.isfinite(u), u, -np.inf), axis=1, keepdims=True)
    return np.isfinite(u) & (u > 0) & (u >= best - tol)


def embed_rows(table: RoutingTable, encoder: Any, progress: bool) -> np.ndarray:
    if encoder is None:
        encoder = bulk_encoder()
    if getattr(encoder, "needs_fit", False) and not getattr(encoder, "fitted", False):
        fit_encoder(encoder, table, progress)
    return encoder.encode(list(map(str, table.prompts)), progress=progress)


def fit_encoder(encoder: Any, table: RoutingTable, progress: bool = False) -> None:
    """Fit an encoder that learns from data (activations: layer, standardiser, PCA) on the
    training rows only, against the outcomes of the models a trainer may see."""
    rows = np.flatnonzero(np.asarray(table.split) == "train")
    seen = table.with_models(list(table.train_models))
    encoder.fit([str(t) for t in table.prompts[rows]], seen.quality[rows], progress)


@dataclass(frozen=True)
class TrainingPrompts:
    """The training and validation prompts (one row per prompt) with their Φ(x)."""

    table: RoutingTable  # train and val rows of every described model
    dhash: str
    train: RoutingTable
    phi_train: np.ndarray
    val: RoutingTable
    phi_val: np.ndarray


def prepare_prompts(table: RoutingTable, cfg: TrainConfig, models: tuple[str, ...],
                    encoder: Any, embeddings: np.ndarray | None) -> TrainingPrompts:
    keep = np.isin(np.asarray(table.split), ["train", "val"])
    if embeddings is not None:
        embeddings = np.asarray(embeddings, dtype=np.float32)[keep]
    table = table.rows(keep).with_models(models)
    table = carve_val(table, cfg.val_fraction, cfg.seed)
    dhash = data_hash(table)
    phi_all = embeddings if embeddings is not None else embed_rows(table, encoder, cfg.progress)
    # one row per prompt (repeated samples averaged), per split
    parts = {}
    for s in ("train", "val"):
        mask = np.asarray(table.split) == s
        sub = table.rows(mask)
        _, first = np.unique(np.asarray(sub.prompt_ids, dtype=str), return_index=True)
        parts[s] = (aggregate_prompts(sub), phi_all[mask][np.sort(first)])
    return TrainingPrompts(table, dhash, *parts["train"], *parts["val"])


def choose_probes(probes: ProbeSet | None, init: Router | None, train: RoutingTable,
                  cfg: TrainConfig) -> ProbeSet:
    """The given probes (all training prompts), else a warm start's, else a seeded sample."""
    if probes is not None and not set(probes.ids) <= set(map(str, train.prompt_ids)):
        raise ValueError("every probe must be a training prompt of the table")
    if probes is None and init is not None and init.config.get("probe_ids"):
        ids = list(init.config["probe_ids"])
        if set(ids) <= set(map(str, train.prompt_ids)):
            pos = {p: i for i, p in enumerate(map(str, train.prompt_ids))}
            probes = ProbeSet(
                ids=tuple(ids), prompts=tuple(str(train.prompts[pos[p]]) for p in ids)
            )
    if probes is None:
        probes = ProbeSet.sample(train, cfg.n_probes, seed=cfg.seed)
    return probes
