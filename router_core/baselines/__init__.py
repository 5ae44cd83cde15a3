"""Baseline routers evaluated beside Tollgate on the same split, in the same run."""

from router_core.baselines.category import category_router
from router_core.baselines.choice import DEFAULT_LAMBDAS, choose, normalised
from router_core.baselines.knn import KNNRouter
from router_core.baselines.mlp import MLPRouter
from router_core.baselines.shared_trunk import SharedTrunkNet
from router_core.baselines.simple import (
    best_single,
    cheapest,
    mean_cost_norm,
    oracle,
    random_router,
    single_frontier,
)
from router_core.baselines.umr import UMRRouter

__all__ = [
    "DEFAULT_LAMBDAS",
    "KNNRouter",
    "MLPRouter",
    "SharedTrunkNet",
    "UMRRouter",
    "best_single",
    "category_router",
    "cheapest",
    "choose",
    "mean_cost_norm",
    "normalised",
    "oracle",
    "random_router",
    "single_frontier",
]
