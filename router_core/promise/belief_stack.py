"""Every backend's belief on one prompt in one pass: what ``stack_estimates`` gives, for serving.

Expects a fixed sequence of beliefs (``LogitBelief`` or ``TrainedBelief``, a pool's). Each
belief's own ``estimate`` costs a dozen small numpy calls: the packaged ``auto`` route's
decision took 626 µs that way and takes 339 µs stacked (bench/serving/promise_decision.py).
Stacked once per pool, the same numbers come from two matrix products:

    z̄_h(x) = w_h·q + b_h                                   (every belief)
    Var z_h(x) = ‖L_hᵀ f̃_h(x)‖² = ‖A_h q + c_h‖²,  A_h = L_hᵀ[:, :k] B_h,  c_h = L_hᵀ[:, k]

(router_core/promise/logit_belief.py: f̃ = (B q, 1), Σ = L Lᵀ), the squares summed per belief,
then p̂ = σ(z̄) and n as ``LogitBelief.estimate`` caps it; a trained expert keeps its one n.

Example::

    stack = BeliefStack([pool.qualities[e].belief for e in experts])
    P, N = stack.estimate(q[None, :])  # == stack_estimates(beliefs, q[None, :])
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from router_core.promise.belief import pseudo_count_from_logit_var
from router_core.promise.logit_belief import LogitBelief, TrainedBelief


class BeliefStack:
    """(P, N) of a fixed sequence of beliefs for query vectors Q (n, d), as (n, m) arrays."""

    def __init__(self, beliefs: Sequence[LogitBelief | TrainedBelief]) -> None:
        self.w = np.stack([np.asarray(b.w, dtype=float) for b in beliefs]) if beliefs else None
        self.b = np.array([float(b.b) for b in beliefs])
        logit = [i for i, b in enumerate(beliefs) if isinstance(b, LogitBelief)]
        self.logit = np.array(logit, dtype=int)
        self.n_fixed = np.array([float(getattr(b, "n", 0.0)) for b in beliefs])
        self.n_cap = np.array([float(beliefs[i].n_cap) for i in logit])
        rows, starts, offset = [], [], 0
        for i in logit:
            bl = beliefs[i]
            lt = np.asarray(bl.chol, dtype=float).T  # Lᵀ, (k+1, k+1)
            basis = None if bl.basis is None else np.asarray(bl.basis, dtype=float)
            a = lt[:, :-1] if basis is None else lt[:, :-1] @ basis  # A_h, (k+1, d)
            rows.append(np.hstack([a, lt[:, -1:]]))  # [A_h | c_h]
            starts.append(offset)
            offset += len(lt)
        self.ac = np.vstack(rows) if rows else None  # (Σ(k_h+1), d+1)
        self.starts = np.array(starts, dtype=int)

    def estimate(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Q = np.atleast_2d(np.asarray(Q, dtype=float))
        if self.w is None:
            return np.zeros((len(Q), 0)), np.zeros((len(Q), 0))
        P = 1.0 / (1.0 + np.exp(-(Q @ self.w.T + self.b)))
        N = np.broadcast_to(self.n_fixed, P.shape).copy()
        if self.ac is not None:
            t = Q @ self.ac[:, :-1].T + self.ac[:, -1]  # A_h q + c_h, every belief's rows
            var = np.add.reduceat(t * t, self.starts, axis=1)
            n = pseudo_count_from_logit_var(P[:, self.logit], var)
            N[:, self.logit] = 1.0 / (1.0 / (n + 1.0) + 1.0 / (self.n_cap + 1.0)) - 1.0
        return P, N
