"""The result of one evaluation run (``EvalResult``): its router names, JSON shape and
text table."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from router_core.evaluation.metrics import CurveMetrics, Reference

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
