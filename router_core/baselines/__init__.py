"""Baseline routers evaluated beside Tollgate on the same split, in the same run.

The routers are imported on first use (PEP 562 ``__getattr__``): kNN, the MLP and the shared
trunk need torch, UMR needs scikit-learn, and a gateway that only needs ``DEFAULT_LAMBDAS``
(through ``router_core.evaluation.promotion``) must not load either.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it
_WHERE = {
    "DEFAULT_LAMBDAS": "choice",
    "choose": "choice",
    "normalised": "choice",
    "category_router": "category",
    "KNNRouter": "knn",
    "MLPRouter": "mlp",
    "SharedTrunkNet": "shared_trunk",
    "UMRRouter": "umr",
    "best_single": "simple",
    "cheapest": "simple",
    "mean_cost_norm": "simple",
    "oracle": "simple",
    "random_router": "simple",
    "single_frontier": "simple",
}

__all__ = [  # noqa: RUF022 - the order of _WHERE
    "DEFAULT_LAMBDAS", "choose", "normalised", "category_router", "KNNRouter", "MLPRouter",
    "SharedTrunkNet", "UMRRouter", "best_single", "cheapest", "mean_cost_norm", "oracle",
    "random_router", "single_frontier",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
