"""One evaluation run: every router on the same split and test rows, swept over one λ grid.

Routers: oracle, random, cheapest, best_single, single_frontier, category, knn, mlp, umr
(router_core.baselines) and vanilla, no_caro, tollgate (router_core.training: plain InfoNCE;
Eq. 8 without CARO; Eq. 8 with CARO). Each gives a (λ, query) → model choice; each choice is
scored with that query's recorded quality and cost of the chosen model (metrics.py), over all
test prompts (pooled AUDC) and inside each category (within-category AUDC, averaged by
prompt count). ``category`` is a diagnostic told the test prompt's category; a learned router
that does not beat it, or ``single_frontier``, reads nothing from the prompt past its task.

Protocol, so that no number is tuned on the test rows:
- learned routers fit on ``train`` rows only; ``val`` rows pick the kNN k and UMR K (by
  validation AUDC) and early-stop/calibrate Tollgate's training;
- test rows are those with an observed outcome for every model of the deployable pool;
- ``unseen-models`` split: the pool is ``table.unseen_models``; Tollgate trains on the seen
  models and knows the unseen ones only through probe-outcome descriptors, and the
  baselines get exactly that information: the unseen models' outcomes on Tollgate's probe
  prompts (kNN and MLP fit on the probes, UMR clusters all training prompts and estimates
  its per-cluster errors on the probes, best_single is the best on the probes). Their
  hyperparameters are fixed there (validation outcomes of unseen models are not known).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from router_core.baselines import (
    DEFAULT_LAMBDAS,
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
from router_core.evaluation.metrics import (
    CurveMetrics,
    Reference,
    bootstrap_delta_audc,
    evaluate_choices,
    within_category_audc,
)
from router_core.evaluation.predictors import calibrated_similarity, predictor_scores

ROUTER_NAMES = (
    "oracle",
    "random",
    "cheapest",
    "best_single",
    "single_frontier",
    "category",
    "knn",
    "mlp",
    "umr",
    "shared_trunk",
    "vanilla",
    "no_caro",
    "tollgate",
)
BASELINES = (
    "random", "cheapest", "best_single", "single_frontier", "knn", "mlp", "umr", "shared_trunk"
)
DIAGNOSTICS = ("category", "single_frontier")  # what a learned router must beat
PROMPTLESS = ("oracle", "random", "cheapest", "best_single", "single_frontier", "category")
TRAINED = {  # name -> TrainConfig fields
    "vanilla": {"loss": "vanilla", "use_caro": False},
    "no_caro": {"loss": "cscr", "use_caro": False},
    "tollgate": {"loss": "cscr", "use_caro": True},
}
ENCODER_BULK = ("mean", "scale", "components")  # fitted arrays: in artifacts, not in notes
KNN_GRID = (10, 25, 50, 100)
UMR_GRID = (8, 16, 32, 64)
UNSEEN_KNN_K = 10
UNSEEN_UMR_K = 8


@dataclass
class EvalResult:
    dataset: str
    split: str
    n_test: int
    metrics: dict[str, CurveMetrics]
    reference: Reference
    delta_audc_ci: tuple[float, float] | None
    best_baseline: str
    lams: np.ndarray
    notes: dict[str, Any] = field(default_factory=dict)
    audc_within: dict[str, float] = field(default_factory=dict)  # empty: no categories
    # the routers trained for this evaluation (Tollgate and its ablations), by name
    routers: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    predictors: dict[str, dict] = field(default_factory=dict)  # AUC / Brier (predictors.py)
    choices: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # (L, n) each

    def below_diagnostics(self, name: str) -> list[str]:
        """The diagnostics (pooled or within-category AUDC) a learned router does not beat."""
        if name in PROMPTLESS:
            return []
        out = []
        for diag in DIAGNOSTICS:
            if diag not in self.metrics:
                continue
            if self.metrics[name].audc <= self.metrics[diag].audc:
                out.append(diag)
            w = self.audc_within
            if name in w and diag in w and w[name] <= w[diag]:
                out.append(f"{diag}(within)")
        return out

    def to_json(self) -> dict:
        """The documented JSON shape of ``tollgate eval --json``."""
        return {
            "dataset": self.dataset,
            "split": self.split,
            "n_test": self.n_test,
            "routers": {
                name: {
                    **m.to_dict(),
                    "audc_within": self.audc_within.get(name),
                    "below": self.below_diagnostics(name),
                    "auc": self.predictors.get(name, {}).get("auc"),
                    "brier": self.predictors.get(name, {}).get("brier"),
                }
                for name, m in self.metrics.items()
            },
            "delta_audc_ci": None if self.delta_audc_ci is None else list(self.delta_audc_ci),
        }

    def table(self) -> str:
        """A fixed-width text table of every router's numbers."""
        head = (
            f"{'router':<16} {'AUDC':>7} {'within':>7} {'QNC':>7} {'peak':>7} {'overpay':>8}"
            "  not above"
        )
        lines = [f"{self.dataset} / {self.split}: {self.n_test} test prompts", head]
        for name, m in self.metrics.items():
            q = "never" if m.qnc is None else f"{m.qnc:.3f}"
            w = self.audc_within.get(name)
            ws = "-" if w is None else f"{w:.4f}"
            below = ", ".join(self.below_diagnostics(name))
            lines.append(
                f"{name:<16} {m.audc:7.4f} {ws:>7} {q:>7} {m.peak:7.4f} {m.overpay:8.4f}"
                f"  {below}".rstrip()
            )
        lines.append(
            "within = AUDC inside each category, weighted by prompts; not above = the "
            "diagnostics (category: told the task; single_frontier: one model per λ) this "
            "router does not beat"
        )
        if self.delta_audc_ci is not None:
            lo, hi = self.delta_audc_ci
            lines.append(
                f"ΔAUDC tollgate − {self.best_baseline} (best non-oracle baseline): "
                f"95% CI [{lo:+.4f}, {hi:+.4f}]"
            )
        return "\n".join(lines)


def _without_bulk(settings: Any) -> Any:
    """Encoder settings without their fitted arrays (recursively: "both" has parts)."""
    if isinstance(settings, dict):
        return {k: _without_bulk(v) for k, v in settings.items() if k not in ENCODER_BULK}
    if isinstance(settings, list):
        return [_without_bulk(v) for v in settings]
    return settings


def _complete(table: RoutingTable, rows: np.ndarray) -> np.ndarray:
    q, c = table.quality[rows], table.cost[rows]
    return rows[np.isfinite(q).all(axis=1) & np.isfinite(c).all(axis=1)]


def _tuned(
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


def _trained_choices(
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


def run_evaluation(
    table: RoutingTable,
    *,
    embeddings: np.ndarray | None = None,
    encoder: Any = None,
    routers: Iterable[str] = ROUTER_NAMES,
    seed: int = 0,
    lams: np.ndarray | None = None,
    n_boot: int = 1000,
    train_overrides: Mapping[str, Any] | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    descriptor: Any = None,
    extra: Mapping[str, Callable[[np.ndarray, tuple[str, ...], np.ndarray], np.ndarray]]
    | None = None,
) -> EvalResult:
    """Evaluate ``routers`` on ``table``'s test rows (see the module docstring).

    ``extra``: more routers scored on the same rows, name -> ``choose(X_test, pool, lams)``
    returning (L, n) pool indices (e.g. a router trained elsewhere).

    ``descriptor``: the ``DescriptorKind`` Tollgate's experts are described by (default:
    probe outcomes), e.g. ``router_core.fingerprints.make_descriptor("perplexity")``.
    """
    say = log or (lambda msg: print(msg, file=sys.stderr))
    names = [r for r in ROUTER_NAMES if r in set(routers)]
    unknown = set(routers) - set(ROUTER_NAMES)
    if unknown:
        raise ValueError(f"unknown routers {sorted(unknown)}; use {ROUTER_NAMES}")
    lams = DEFAULT_LAMBDAS if lams is None else np.asarray(lams, dtype=np.float64)
    X, encoder = _embeddings(table, embeddings, encoder, progress, say)
    rows = _rows(table)
    notes: dict[str, Any] = {"pool": list(rows.pool)}
    if encoder is not None and hasattr(encoder, "settings"):
        notes["encoder"] = _without_bulk(encoder.settings())
    run = _Run(rows, X, lams, seed, notes)
    # Tollgate and its ablations first: the unseen-models baselines reuse its probe set.
    trained = _train_tollgates(run, [r for r in names if r in TRAINED], table, encoder,
                               descriptor, train_overrides, progress, say)
    fit_rows = _baseline_rows(run, trained)
    _simple_baselines(run, names, fit_rows)
    _learned_baselines(run, names, fit_rows, say)
    for name, choose_fn in (extra or {}).items():
        run.choices[name] = choose_fn(X[rows.te], rows.pool, lams)
    return _result(run, table, trained, extra, n_boot)


def _embeddings(table: RoutingTable, embeddings: np.ndarray | None, encoder: Any,
                progress: bool, say: Callable[[str], None]) -> tuple[np.ndarray, Any]:
    """Φ(x) of every row: the given embeddings, else the encoder's (fitted on the training
    prompts first where it needs fitting)."""
    if embeddings is None:
        if encoder is None:
            from router_core.encoders import bulk_encoder

            encoder = bulk_encoder()
        if getattr(encoder, "needs_fit", False):  # e.g. PCA of activations: train rows only
            from router_core.training import fit_encoder

            say(f"fitting the {encoder.kind} encoder on the training prompts")
            fit_encoder(encoder, table, progress)
        say(f"embedding {len(table)} prompts (cached after the first run)")
        embeddings = encoder.encode(list(map(str, table.prompts)), progress=progress)
    X = np.asarray(embeddings, dtype=np.float32)
    if len(X) != len(table):
        raise ValueError("embeddings must have one row per table row")
    return X, encoder


@dataclass(frozen=True)
class _Rows:
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


def _rows(table: RoutingTable) -> _Rows:
    pool = tuple(table.deployable_models)
    split = np.asarray(table.split)
    tp = table.with_models(list(pool))
    tr = np.flatnonzero(split == "train")
    va = _complete(tp, np.flatnonzero(split == "val"))
    te = _complete(tp, np.flatnonzero(split == "test"))
    if len(te) == 0:
        raise ValueError(
            f"{table.name}: no test prompt has an outcome for every model of the pool "
            f"{list(pool)}; scoring a router's counterfactual choices needs them (sparse logs "
            "with one model per prompt can train a router but not evaluate it offline; "
            "restrict the pool with --models to models observed together)"
        )
    ref = Reference.from_matrices(tp.quality[te], tp.cost[te])
    return _Rows(pool, bool(table.unseen_models), tp, tr, va, te, ref,
                 mean_cost_norm(tp.cost[tr]))


@dataclass
class _Run:
    """One evaluation's inputs and what the routers have produced so far."""

    rows: _Rows
    X: np.ndarray
    lams: np.ndarray
    seed: int
    notes: dict[str, Any]
    choices: dict[str, np.ndarray] = field(default_factory=dict)
    p_hats: dict[str, np.ndarray] = field(default_factory=dict)  # name -> (n, m) P(correct)


def _train_tollgates(run: _Run, names: list[str], table: RoutingTable, encoder: Any,
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
        run.choices[name] = _trained_choices(res.router, run.X[rows.te], rows.pool, run.lams)
        run.notes[f"{name}_train"] = res.metrics
        if set(rows.pool) <= set(res.router.model_names):
            run.p_hats[name] = calibrated_similarity(res.router, run.X[rows.te], rows.pool)
    return trained


def _baseline_rows(run: _Run, trained: Mapping[str, Any]) -> np.ndarray:
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


def _simple_baselines(run: _Run, names: list[str], fit_rows: np.ndarray) -> None:
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


def _learned_baselines(run: _Run, names: list[str], fit_rows: np.ndarray,
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
            knn, k, scores = _tuned(
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
            umr, kk, scores = _tuned(
                lambda K: UMRRouter(K, seed=seed),
                [K for K in UMR_GRID if K <= max(2, len(X_fit) // 10)], X_fit, Q_fit, *val)
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


def _result(run: _Run, table: RoutingTable, trained: Mapping[str, Any],
            extra: Mapping[str, Any] | None, n_boot: int) -> EvalResult:
    """Every router's metrics on the test rows, within categories, and Tollgate's AUDC
    against the best baseline with its bootstrap interval."""
    rows, choices, notes = run.rows, run.choices, run.notes
    Q_te, C_te = rows.Q_te, rows.C_te
    metrics = {
        name: evaluate_choices(choices[name], Q_te, C_te, rows.ref)
        for name in (*ROUTER_NAMES, *(extra or {}))
        if name in choices
    }
    within: dict[str, float] = {}
    if rows.tp.category is not None:
        cat_te = np.asarray(rows.tp.category[rows.te], dtype=str)
        for name in metrics:
            within[name], per = within_category_audc(choices[name], Q_te, C_te, cat_te)
            notes[f"{name}_audc_by_category"] = per
    predictors = {name: predictor_scores(p, Q_te) for name, p in run.p_hats.items()}
    base = [b for b in BASELINES if b in metrics]
    best_base = max(base, key=lambda b: metrics[b].audc) if base else ""
    ci = None
    if "tollgate" in choices and best_base:
        ci = bootstrap_delta_audc(
            choices["tollgate"], choices[best_base], Q_te, C_te, n_boot=n_boot, seed=run.seed
        )
    return EvalResult(
        dataset=table.name,
        split=table.split_name,
        n_test=len(rows.te),
        metrics=metrics,
        reference=rows.ref,
        delta_audc_ci=ci,
        best_baseline=best_base,
        lams=run.lams,
        notes=notes,
        audc_within=within,
        routers={name: res.router for name, res in trained.items()},
        predictors=predictors,
        choices=choices,
    )
