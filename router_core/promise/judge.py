"""Judged shadow outcomes: the reference answers beside another backend, a judge grades both.

On a bounded share of a route's traffic the reference also answers and a judge compares the
two answers, once in each order, averaged: what is left of its error is one draw per
comparison. The simulated judge agrees with the truth with probability α per comparison;
when it does not, it grades both answers the other way (1 − y). The verdicts are rows
``{prompt_key, model, quality}`` that router_core.promise.refine aggregates DARS-style.

Which backend stands beside the reference: one of the other backends still on a prior
(drawn uniformly), so each comparison teaches two unknowns; with none left, the reference is
graded alone (its comparison partner is then any served backend, already known).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from router_core.promise.logit_belief import LogitBelief
from router_core.promise.refine import judged_counts, validated_refine

JUDGE_ACCURACY = 0.8


def simulate_verdicts(
    keys: Sequence[str],
    truth: Mapping[str, np.ndarray],
    reference: str,
    partners: Sequence[str],
    rng: np.random.Generator,
    accuracy: float = JUDGE_ACCURACY,
) -> list[dict]:
    """Verdict rows for one comparison per key (module docstring).

    Args:
        keys: (n,) prompt keys of the shadowed requests (repeats allowed).
        truth: backend -> (n,) true quality in [0, 1] on those requests.
        reference: the route's reference; partners: backends still on a prior.
    """
    rows = []
    u = rng.random((len(keys), 2))  # one row per comparison: n's verdicts extend n' < n's
    agree = u[:, 0] < accuracy
    pick = np.minimum((u[:, 1] * max(len(partners), 1)).astype(int), max(len(partners) - 1, 0))
    for i, key in enumerate(keys):
        pair = [reference] + ([partners[pick[i]]] if partners else [])
        for m in pair:
            y = float(truth[m][i])
            if not np.isfinite(y):  # no answer to grade
                continue
            rows.append({"prompt_key": str(key), "model": m,
                         "quality": y if agree[i] else 1.0 - y})  # fmt: skip
    return rows


def refine_from_verdicts(
    beliefs: Mapping[str, LogitBelief],
    verdicts: Sequence[Mapping],
    query_of: Mapping[str, np.ndarray],
    accuracy: float = JUDGE_ACCURACY,
    min_z: float = 0.0,
) -> dict[str, LogitBelief]:
    """Every belief refined by its DARS-aggregated verdicts, as far as held-out verdicts
    confirm (router_core.promise.refine.validated_refine, its ``min_z``); ``query_of``:
    prompt key -> its query vector q. Backends without verdicts stay."""
    out = dict(beliefs)
    for name, belief in beliefs.items():
        keys, k, c = judged_counts(verdicts, name)
        if len(keys):
            Q = np.stack([query_of[str(key)] for key in keys])
            out[name] = validated_refine(belief, Q, k, c, accuracy, min_z=min_z)
    return out
