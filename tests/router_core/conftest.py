"""Shared fixtures: a small real slice of RouterBench (the short mbpp prompts).

The slice keeps the real models, 0/1 outcomes and USD costs; mbpp prompts are short, so
embedding them on a fresh machine (no cache) takes seconds.
"""

from __future__ import annotations

import numpy as np
import pytest

from router_core.data import load_dataset


@pytest.fixture(scope="session")
def mbpp_table():
    table = load_dataset("routerbench")
    return table.rows(np.asarray(table.category, dtype=str) == "mbpp")


@pytest.fixture(scope="session")
def mbpp_embeddings(mbpp_table):
    from router_core.encoders.minilm import Encoder

    return Encoder().encode(list(map(str, mbpp_table.prompts)))


@pytest.fixture(scope="session")
def mbpp_csv(mbpp_table, tmp_path_factory):
    """The slice as a long-format CSV (test rows kept as test), for `tollgate train`."""
    import pandas as pd

    t = mbpp_table
    rows = [
        {
            "prompt_id": t.prompt_ids[i],
            "prompt": t.prompts[i],
            "model": m,
            "quality": t.quality[i, j],
            "cost": t.cost[i, j],
            "split": "test" if t.split[i] == "test" else "train",
        }
        for i in range(len(t))
        for j, m in enumerate(t.models)
    ]
    data = tmp_path_factory.mktemp("mbpp") / "mbpp.csv"
    pd.DataFrame(rows).to_csv(data, index=False)
    return data
