"""The routers of one evaluation run: the rows they fit and score on, Tollgate and its
ablations trained, and the baselines fitted (see runner.py's docstring for the protocol)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from router_core.baselines import (
    KNNRouter,
    MLPRouter,
    SharedTrunkNet,
    UMRRouter,
    best_single,
    category_router,
    cheapest,
    choose,
    mean_cost_norm,
    oracle,
    random_router,
    single_frontier,
)
from router_core.data.table import RoutingTable
from router_core.evaluation.metrics import Reference, evaluate_choices
from router_core.evaluation.predictors import calibrated_similarity

TRAINED = {  # name -> TrainConfig fields
    "vanilla": {"loss": "vanilla", "use_caro": False},
    "no_caro": {"loss": "cscr", "use_caro": False},
    "tollgate": {"loss": "cscr", "use_caro": True},
}
KNN_GRID = (10, 25, 50, 100)
UMR_GRID = (8, 16, 32, 64)
UNSEEN_KNN_K = 10
UNSEEN_UMR_K = 8


def complete_rows(table: RoutingTable, rows: np.ndarray) -> np.ndarray:
    q, c = table.quality[rows], table.cost[rows]
    return rows[np.isfinite(q).all(axis=1) & np.isfinite(c).all(axis=1)]


def tune(
    make: Callable[[int], Any],
    grid: Iterable[int],
    X_fit: np.ndarray,
    Q_fit: np.ndarray,
    X_val: np.ndarray,
    Q_val: np.ndarray,
    C_val: np.ndarray,
    c_norm: np.ndarray,
    lams: np.ndarray,
) -> tuple[Any, int, dict[int, float]]:
    """Fit one router per grid value; keep the best validation AUDC."""
    scores: dict[int, float] = {}
    best: tuple[float, Any, int] | None = None
    for value in grid:
        router = make(value).fit(X_fit, Q_fit)
        if len(X_val) == 0:
            return router, value, scores
        m = evaluate_choices(choose(router.predict(X_val), c_norm, lams), Q_val, C_val)
        scores[value] = m.audc
        if best is None or m.audc > best[0]:
            best = (m.audc, router, value)
    assert best is not None
    return best[1], best[2], scores


def trained_choices(
    router: Any, X_test: np.ndarray, pool: tuple[str, ...], lams: np.ndarray
) -> np.ndarray:
    """(L, n) choices of a runtime Router restricted to ``pool``, as pool indices."""
    for name in router.model_names:
        if name not in pool:
            router = router.without_expert(name)
    Q = router.project(X_test)
    if hasattr(router, "route_batch"):
        idx = router.route_batch(Q, lams)
    else:  # the per-query rule (slower, identical decisions)
        names = router.model_names
        idx = np.array(
            [[names.index(router.route(q, float(lam)).chosen) for q in Q] for lam in lams]
        )
    col = np.array([pool.index(n) for n in router.model_names])
    return col[idx]

@dataclass(frozen=True)
class EvalRows:
    """The pool and the train / val / test rows every router is fitted and scored on."""

    pool: tuple[str, ...]
    unseen: bool
    tp: RoutingTable  # the table restricted to the pool
    tr: np.ndarray
    va: np.ndarray  # val rows with an outcome for every pool model
    te: np.ndarray  # test rows with an outcome for every pool model
    ref: Reference
    c_norm: np.ndarray

    @property
    def Q_te(self) -> np.ndarray:
        return self.tp.quality[self.te]

    @property
    def C_te(self) -> np.ndarray:
        return self.tp.cost[self.te]


def eval_rows(table: RoutingTable) -> EvalRows:
    pool = tuple(table.deployable_models)
    split = np.asarray(table.split)
    tp = table.with_models(list(pool))
    tr = np.flatnonzero(split == "train")
    va = complete_rows(tp, np.flatnonzero(split == "val"))
    te = complete_rows(tp, np.flatnonzero(split == "test"))
    if len(te) == 0:
        raise ValueError(
            f"{table.name}: no test prompt has an outcome for every model of the pool "
            f"{list(pool)}; scoring a router's counterfactual choices needs them (sparse logs "
            "with one model per prompt can train a router but not evaluate it offline; "
            "restrict the pool with --models to models observed together)"
        )
    ref = Reference.from_matrices(tp.quality[te], tp.cost[te])
    return EvalRows(pool, bool(table.unseen_models), tp, tr, va, te, ref,
                 mean_cost_norm(tp.cost[tr]))


@dataclass
class EvalRun:
    """One evaluation's inputs and what the routers have produced so far."""

    rows: EvalRows
    X: np.ndarray
    lams: np.ndarray
    seed: int
    notes: dict[str, Any]
    choices: dict[str, np.ndarray] = field(default_factory=dict)
    p_hats: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (n, m) P(correct)


def train_tollgates(run: EvalRun, names: list[str], table: RoutingTable, encoder: Any,
                     descriptor: Any, train_overrides: Mapping[str, Any] | None,
                     progress: bool, say: Callable[[str], None]) -> dict[str, Any]:
    """Tollgate and its ablations, each trained on the table's training rows."""
    import dataclasses

    from router_core.training import TrainConfig, train_router

    rows, trained = run.rows, {}
    for name in names:
        bad = set(train_overrides or {}) - {f.name for f in dataclasses.fields(TrainConfig)}
        if bad:
            raise ValueError(f"unknown TrainConfig fields {sorted(bad)}")

        cfg = TrainConfig(
            **{"seed": run.seed, "progress": progress, **TRAINED[name],
               **(train_overrides or {})}
        )
        say(f"training {name}")
        res = train_router(
            table,
            cfg,
            descriptor,
            encoder=encoder,
            embeddings=run.X,
            train_models=table.train_models,
        )
        trained[name] = res
        run.choices[name] = trained_choices(res.router, run.X[rows.te], rows.pool, run.lams)
        run.notes[f"{name}_train"] = res.metrics
        if set(rows.pool) <= set(res.router.model_names):
            run.p_hats[name] = calibrated_similarity(res.router, run.X[rows.te], rows.pool)
    return trained


def baseline_rows(run: EvalRun, trained: Mapping[str, Any]) -> np.ndarray:
    """The labelled rows the baselines may learn from: every training row, or (unseen-models
    split) only the probe prompts, where the unseen models' outcomes are known."""
    rows = run.rows
    if not rows.unseen:
        return rows.tr
    if trained:
        probe_ids = set(next(iter(trained.values())).probes.ids)
    else:
        from router_core.descriptors.base import ProbeSet
        from router_core.training import TrainConfig

        probe_ids = set(
            ProbeSet.sample(rows.tp.rows(rows.tr), TrainConfig().n_probes, run.seed).ids
        )
    fit_rows = rows.tr[np.isin(np.asarray(rows.tp.prompt_ids[rows.tr], dtype=str),
                               sorted(probe_ids))]
    run.notes["probe_rows"] = len(fit_rows)
    return fit_rows


def simple_baselines(run: EvalRun, names: list[str], fit_rows: np.ndarray) -> None:
    """The reference routers that learn no embedding: oracle, random, cheapest, best
    single, single frontier, per category."""
    rows, lams, choices = run.rows, run.lams, run.choices
    tp, n, m = rows.tp, len(rows.te), len(rows.pool)
    Q_fit = tp.quality[fit_rows]
    if "oracle" in names:
        choices["oracle"] = oracle(rows.Q_te, rows.C_te, lams)
    if "random" in names:
        choices["random"] = random_router(n, m, run.seed)
    if "cheapest" in names:
        choices["cheapest"] = cheapest(tp.cost[rows.tr], n)
    if "best_single" in names:
        choices["best_single"] = best_single(Q_fit, tp.cost[rows.tr], n)
    if "single_frontier" in names:
        choices["single_frontier"] = single_frontier(Q_fit, rows.c_norm, n, lams)
    if "category" in names:
        if tp.category is None:
            run.notes["category"] = "the table has no categories"
        else:
            cat_fit = np.asarray(tp.category[fit_rows], dtype=str)
            cat_te = np.asarray(tp.category[rows.te], dtype=str)
            run.notes["category_unseen_test_share"] = float(np.mean(~np.isin(cat_te, cat_fit)))
            choices["category"] = category_router(Q_fit, cat_fit, cat_te, rows.c_norm, lams)


def learned_baselines(run: EvalRun, names: list[str], fit_rows: np.ndarray,
                       say: Callable[[str], None]) -> None:
    """The baselines that estimate P(correct) from Φ(x): kNN, MLP, UMR, the shared trunk
    (kNN's k and UMR's K tuned on val, except on the unseen-models split)."""
    rows, X, seed, notes = run.rows, run.X, run.seed, run.notes
    X_fit, Q_fit = X[fit_rows], rows.tp.quality[fit_rows]
    val = (X[rows.va], rows.tp.quality[rows.va], rows.tp.cost[rows.va], rows.c_norm, run.lams)
    fitted: dict[str, Any] = {}
    if "knn" in names:
        if rows.unseen:
            knn, k = KNNRouter(UNSEEN_KNN_K).fit(X_fit, Q_fit), UNSEEN_KNN_K
        else:
            knn, k, scores = tune(
                KNNRouter, [k for k in KNN_GRID if k <= len(X_fit)] or [len(X_fit)],
                X_fit, Q_fit, *val)
            notes["knn_val_audc"] = scores
        notes["knn_k"] = k
        fitted["knn"] = knn
    if "mlp" in names:
        say("fitting mlp")
        fitted["mlp"] = MLPRouter(seed=seed).fit(X_fit, Q_fit)
    if "umr" in names:
        if rows.unseen:
            umr = UMRRouter(UNSEEN_UMR_K, seed=seed).fit(X_fit, Q_fit, X_cluster=X[rows.tr])
            notes["umr_k"] = UNSEEN_UMR_K
        else:
            umr, kk, scores = tune(
                lambda K: UMRRouter(K, seed=seed),
                [K for K in UMR_GRID if K <= max(2, len(X_fit) // 10)] or [min(2, len(X_fit))],
                X_fit, Q_fit, *val)  # a small export: fewer prompts than any grid value
            notes["umr_k"], notes["umr_val_audc"] = kk, scores
        fitted["umr"] = umr
    if "shared_trunk" in names:
        say("fitting shared_trunk")
        # early stopping on the val rows, which no other fit sees (none: a holdout share)
        stn = SharedTrunkNet(seed=seed).fit(X_fit, Q_fit, *(val[:2] if not rows.unseen else ()))
        notes["shared_trunk_val_bce"] = stn.val_losses
        fitted["shared_trunk"] = stn
    for name, router in fitted.items():
        run.p_hats[name] = router.predict(X[rows.te])
        run.choices[name] = choose(run.p_hats[name], rows.c_norm, run.lams)
