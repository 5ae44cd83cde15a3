"""Teachers for the combined router: each dataset's own router's p̂ on that dataset's rows.

Expects a combined table (``load_dataset("all")``, router_core.data.combined) and Φ(x) for
every row. Returns a (rows, experts) matrix of quality estimates, NaN where the row's
dataset does not hold the expert, for ``train_router(..., teacher=...)``.

Idea: one head fitted to three datasets' 0/1 outcomes gives up some of what each dataset's
own router learns (the smallest dataset most: RouterBench). Born-again multi-task
distillation ([BAM], Clark et al., 2019; docs/references.md) fits the
multi-task student to a mix of gold labels and the single-task teachers' predictions, so
each task keeps its teacher's smoothed view of the labels while sharing one network. The
quality term's target becomes

    ũ_ih = (1 − β)·u_ih + β·p̂^{D(i)}_h(x_i)                (β = TrainConfig.distill)

with p̂^{D} the router ``train_router`` fits on dataset D alone (same settings, seed, and
D's own split), so the teacher saw exactly the training rows the student sees. Early
stopping and the post-hoc calibration stay on the gold outcomes.

Example::

    T = teacher_quality(table, X, TrainConfig(seed=0))
    result = train_router(table, replace(cfg, distill=0.5), embeddings=X, teacher=T)
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from router_core.data.combined import row_datasets
from router_core.data.table import RoutingTable
from router_core.training.config import TrainConfig


def teacher_quality(table: RoutingTable, embeddings: np.ndarray, config: TrainConfig,
                    encoder: Any = None, descriptor: Any = None) -> np.ndarray:
    """(len(table), len(table.models)) each row's own dataset's router's p̂."""
    from router_core.training.train import train_router

    X = np.asarray(embeddings, dtype=np.float32)
    out = np.full(table.quality.shape, np.nan)
    source = row_datasets(table)
    cfg = replace(config, distill=0.0, progress=False)
    for name in dict.fromkeys(source):
        rows = np.flatnonzero(source == name)
        part = table.rows(rows)
        cols = [j for j in range(len(table.models)) if np.isfinite(part.quality[:, j]).any()]
        part = part.with_models([table.models[j] for j in cols])
        teacher = train_router(part, cfg, descriptor=descriptor, encoder=encoder,
                               embeddings=X[rows])
        order = [teacher.router.model_names.index(m) for m in part.models]
        out[np.ix_(rows, cols)] = teacher.router.quality_estimates(
            teacher.router.project(X[rows]))[:, order]
    return out
