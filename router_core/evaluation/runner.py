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
from typing import Any

import numpy as np

from router_core.baselines import DEFAULT_LAMBDAS
from router_core.data.table import RoutingTable
from router_core.evaluation.fitting import (  # noqa: F401  (re-exported)
    KNN_GRID,
    TRAINED,
    UMR_GRID,
    UNSEEN_KNN_K,
    UNSEEN_UMR_K,
    EvalRun,
    baseline_rows,
    eval_rows,
    learned_baselines,
    simple_baselines,
    train_tollgates,
)
from router_core.evaluation.metrics import (
    bootstrap_delta_audc,
    evaluate_choices,
    within_category_audc,
)
from router_core.evaluation.predictors import predictor_scores
from router_core.evaluation.result import (  # noqa: F401  (re-exported)
    BASELINES,
    DIAGNOSTICS,
    PROMPTLESS,
    ROUTER_NAMES,
    EvalResult,
)

ENCODER_BULK = ("mean", "scale", "components")  # fitted arrays: in artifacts, not in notes


def _without_bulk(settings: Any) -> Any:
    """Encoder settings without their fitted arrays (recursively: "both" has parts)."""
    if isinstance(settings, dict):
        return {k: _without_bulk(v) for k, v in settings.items() if k not in ENCODER_BULK}
    if isinstance(settings, list):
        return [_without_bulk(v) for v in settings]
    return settings

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
    rows = eval_rows(table)
    notes: dict[str, Any] = {"pool": list(rows.pool)}
    if encoder is not None and hasattr(encoder, "settings"):
        notes["encoder"] = _without_bulk(encoder.settings())
    run = EvalRun(rows, X, lams, seed, notes)
    # Tollgate and its ablations first: the unseen-models baselines reuse its probe set.
    trained = train_tollgates(run, [r for r in names if r in TRAINED], table, encoder,
                               descriptor, train_overrides, progress, say)
    fit_rows = baseline_rows(run, trained)
    simple_baselines(run, names, fit_rows)
    learned_baselines(run, names, fit_rows, say)
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


def _result(run: EvalRun, table: RoutingTable, trained: Mapping[str, Any],
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
