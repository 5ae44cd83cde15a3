"""The router trained on every dataset at once, scored on each dataset beside its own router.

One router (``tollgate train --dataset all``: one head, one embedding space, experts named
by canonical id) is evaluated on each benchmark's standard test rows, routing among that
benchmark's models only and trading quality against that benchmark's own costs (its mean
training cost per model, what the single-dataset router's c̃ is built from). Everything
else (test rows, λ grid, metrics, baselines) is ``run_evaluation``'s, so the combined
router's row sits in the same table as ``tollgate eval --dataset D``'s routers.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from router_core.data import DATASETS, load_dataset
from router_core.data.combined import canonical_table, combine, row_datasets
from router_core.data.splits import carve_val
from router_core.data.table import RoutingTable
from router_core.descriptors.base import ProbeSet
from router_core.evaluation.runner import EvalResult, run_evaluation
from router_core.runtime.router import Router
from router_core.training import TrainConfig, TrainResult, train_router
from router_core.training.distillation import teacher_quality

COMBINED = "tollgate_all"


def probes_per_dataset(table: RoutingTable, n: int, seed: int = 0) -> ProbeSet:
    """``n`` probes from each dataset's training prompts, in one probe set.

    A model is described on the probes of the datasets that observed it; a single-dataset
    router of the same seed describes its models on ``n`` such prompts too, so each
    dataset's models keep as many informative coordinates as they have on their own.
    """
    train = table.split_rows("train")
    source = row_datasets(train)
    ids: list[str] = []
    prompts: list[str] = []
    for name in dict.fromkeys(source):
        part = ProbeSet.sample(train.rows(source == name), n, seed=seed)
        ids += part.ids
        prompts += part.prompts
    return ProbeSet(ids=tuple(ids), prompts=tuple(prompts))


@dataclass
class CombinedEvaluation:
    train: TrainResult  # the combined router
    results: dict[str, EvalResult]  # dataset -> every router on its test rows
    variants: dict[str, TrainResult] = dataclasses.field(default_factory=dict)  # label -> router

    def rows(self) -> list[tuple[str, float | None, float]]:
        """(dataset, single-dataset Tollgate AUDC or None, combined AUDC) per dataset."""
        out = []
        for name, res in self.results.items():
            single = res.metrics.get("tollgate")
            out.append((name, None if single is None else single.audc, res.metrics[COMBINED].audc))
        return out


def train_config(overrides: Mapping[str, Any] | None = None, **base: Any) -> TrainConfig:
    """A TrainConfig from ``base`` and ``overrides``, refusing unknown fields."""
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    bad = set(overrides or {}) - known
    if bad:
        raise ValueError(f"unknown TrainConfig fields {sorted(bad)}")
    return TrainConfig(**{**base, **(overrides or {})})


def train_combined(
    table: RoutingTable, config: TrainConfig, embeddings: np.ndarray | None = None, **kw: Any
) -> TrainResult:
    """Train on a combined table with ``config.n_probes`` probes per dataset (and, with
    ``config.distill``, each dataset's own router as a teacher:
    router_core.training.distillation)."""
    probes = probes_per_dataset(table, config.n_probes, config.seed)
    teacher = None
    if config.distill > 0:
        encoder = kw.get("encoder")
        if embeddings is None:
            if encoder is None:
                from router_core.encoders import bulk_encoder

                encoder = kw["encoder"] = bulk_encoder()
            embeddings = np.asarray(encoder.encode(list(map(str, table.prompts))))
        teacher = teacher_quality(table, embeddings, config, encoder=encoder,
                                  descriptor=kw.get("descriptor"))
    return train_router(table, config, embeddings=embeddings, probes=probes, teacher=teacher,
                        **kw)


def dataset_chooser(
    router: Router, table: RoutingTable
) -> Callable[[np.ndarray, tuple[str, ...], np.ndarray], np.ndarray]:
    """``run_evaluation``'s ``extra`` callable: ``router`` on ``table``'s pool and costs."""
    canon = dict(zip(table.models, canonical_table(table).models))
    train = np.asarray(table.split) == "train"
    mean_cost = dict(zip(table.models, np.nanmean(table.cost[train], axis=0)))

    def choose(X: np.ndarray, pool: tuple[str, ...], lams: np.ndarray) -> np.ndarray:
        names = {canon[m]: m for m in pool}
        missing = set(names) - set(router.model_names)
        if missing:
            raise ValueError(f"the router has no expert for {sorted(missing)}")
        sub = router
        for expert in router.model_names:
            if expert not in names:
                sub = sub.without_expert(expert)
        costs = {e: float(mean_cost[m]) for e, m in names.items()}
        idx = sub.route_batch(sub.project(X), lams, costs_usd=costs)
        col = np.array([pool.index(names[e]) for e in sub.model_names])
        return col[idx]

    return choose


def dev_split(table: RoutingTable, seed: int = 0) -> RoutingTable:
    """``table``'s training rows only, a seeded tenth of them (the val carve) relabelled
    ``test``: the rows settings are chosen on; a new val tenth is carved from the rest for
    early stopping and calibration. The test rows are dropped, never read."""
    train = table.rows(np.asarray(table.split) != "test")
    carved = carve_val(train.with_split(np.full(len(train), "train", dtype=object)), seed=seed)
    split = np.asarray(carved.split, dtype=object)
    dev = carved.with_split(np.where(split == "val", "test", split).astype(object))
    return carve_val(dev, seed=seed + 1)


def evaluate_combined(
    datasets: Iterable[str] = DATASETS,
    *,
    routers: Iterable[str] = ("tollgate",),
    on: str = "test",
    seed: int = 0,
    data_dir: Any = None,
    encoder: Any = None,
    train_overrides: Mapping[str, Any] | None = None,
    variants: Mapping[str, Mapping[str, Any]] | None = None,
    artifact: TrainResult | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    n_boot: int = 1000,
) -> CombinedEvaluation:
    """Train the combined router once (or take ``artifact``); evaluate it and ``routers`` on
    each dataset's test
    rows (``on="test"``) or, to choose settings, on a held-out tenth of its training rows
    (``on="val"``: every router trains on the other nine tenths, ``dev_split``)."""
    say = log or (lambda msg: print(msg, file=sys.stderr))
    tables = [load_dataset(d, "standard", data_dir=data_dir, seed=seed) for d in datasets]
    if on == "val":
        tables = [dev_split(t, seed) for t in tables]
    elif on != "test":
        raise ValueError(f"on must be 'test' or 'val', not {on!r}")
    table = combine(tables)
    if encoder is None:
        from router_core.encoders import bulk_encoder

        encoder = bulk_encoder()
    say(f"embedding {len(table)} prompts (cached after the first run)")
    X = np.asarray(encoder.encode(list(map(str, table.prompts)), progress=progress))
    cfg = train_config(train_overrides, seed=seed, progress=progress)
    if artifact is not None:  # a saved combined router (e.g. the packaged one), as it is
        trained = artifact
    else:
        say("training the combined router")
        trained = train_combined(table, cfg, embeddings=X, encoder=encoder)
    extra_routers = {}
    for label, more in (variants or {}).items():  # the combined router with other settings
        say(f"training the combined router [{label}]")
        cfg_v = train_config({**(train_overrides or {}), **more}, seed=seed, progress=progress)
        extra_routers[label] = train_combined(table, cfg_v, embeddings=X, encoder=encoder)
    results: dict[str, EvalResult] = {}
    start = 0
    for t in tables:
        X_t = X[start : start + len(t)]
        start += len(t)
        say(f"evaluating on {t.name}")
        results[t.name] = run_evaluation(
            t,
            embeddings=X_t,
            routers=routers,
            seed=seed,
            n_boot=n_boot,
            train_overrides=train_overrides,
            progress=progress,
            log=say,
            extra={
                COMBINED: dataset_chooser(trained.router, t),
                **{f"{COMBINED}[{k}]": dataset_chooser(v.router, t)
                   for k, v in extra_routers.items()},
            },
        )
    return CombinedEvaluation(train=trained, results=results, variants=extra_routers)
