"""Small real slices (RouterBench, MMLU-Pro) with their MiniLM embeddings, shared per session.

The slices are drawn with a fixed seed from the real shared data and stay small so that a
fresh machine (empty embedding cache) embeds them in seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from router_core.data import load_dataset
from router_core.data.table import RoutingTable
from router_core.encoders.minilm import Encoder


def real_slice(table: RoutingTable, sizes: dict[str, int], seed: int = 0) -> RoutingTable:
    rng = np.random.default_rng(seed)
    idx = np.concatenate(
        [rng.choice(np.flatnonzero(table.split == s), k, replace=False) for s, k in sizes.items()]
    )
    return table.rows(np.sort(idx))


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    return Encoder()


@pytest.fixture(scope="session")
def rb_slice(encoder):
    """RouterBench: 200 train, 40 val, 80 test prompts of the real files, and Φ(x)."""
    table = real_slice(load_dataset("routerbench"), {"train": 200, "val": 40, "test": 80})
    return table, encoder.encode(list(table.prompts))


@pytest.fixture(scope="session")
def mmlu_unseen_slice(encoder):
    """MMLU-Pro unseen-models split: 200 train, 40 val, 80 test prompts, and Φ(x)."""
    full = load_dataset("mmlu-pro", split="unseen-models")
    table = real_slice(full, {"train": 200, "val": 40, "test": 80})
    return table, encoder.encode(list(table.prompts))
