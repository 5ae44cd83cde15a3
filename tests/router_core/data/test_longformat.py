"""The generic long-format file round-trips a real benchmark slice in CSV, JSONL and Parquet."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from router_core.data import load_dataset


def _long(table, with_split: bool = True) -> pd.DataFrame:
    rows = []
    for i in range(len(table)):
        for j, m in enumerate(table.models):
            row = {
                "prompt_id": table.prompt_ids[i],
                "prompt": table.prompts[i],
                "model": m,
                "quality": table.quality[i, j],
                "cost": table.cost[i, j],
                "category": table.category[i],
                "response": table.responses[m][i],
            }
            if with_split:
                row["split"] = {"val": "validation"}.get(table.split[i], table.split[i])
            rows.append(row)
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def real_slice(routerbench):
    idx = np.r_[0:40, len(routerbench) - 40 : len(routerbench)]
    return routerbench.rows(idx)


@pytest.mark.parametrize("suffix", ["csv", "jsonl", "parquet"])
def test_long_format_round_trip(tmp_path, real_slice, suffix):
    df = _long(real_slice)
    path = tmp_path / f"bench.{suffix}"
    if suffix == "csv":
        df.to_csv(path, index=False)
    elif suffix == "jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        df.to_parquet(path)
    t = load_dataset(str(path))
    assert t.name == "bench"
    order = [list(t.prompt_ids).index(p) for p in real_slice.prompt_ids]
    got = t.rows(order).with_models(list(real_slice.models))
    assert np.array_equal(got.quality, real_slice.quality)
    assert np.allclose(got.cost, real_slice.cost)
    assert list(got.prompts) == list(real_slice.prompts)
    assert list(got.category) == list(real_slice.category)
    assert np.array_equal(got.split, real_slice.split)  # "validation" read as val
    m = real_slice.models[2]
    assert list(got.responses[m]) == list(real_slice.responses[m])


def test_long_format_without_split_draws_one_and_numbers_samples(tmp_path, real_slice):
    df = _long(real_slice, with_split=False).drop(columns=["response"])
    repeat = df[df["prompt_id"] == real_slice.prompt_ids[0]].assign(quality=0.5)
    path = tmp_path / "obs.csv"
    pd.concat([df, repeat]).to_csv(path, index=False)
    t = load_dataset(str(path), seed=0)
    assert len(t) == len(real_slice) + 1
    rows = np.flatnonzero(t.prompt_ids == real_slice.prompt_ids[0])
    assert sorted(t.sample[rows]) == [0, 1]
    assert np.all(t.quality[rows[t.sample[rows] == 1]] == 0.5)
    # Repeated samples of a prompt share its split; all three splits exist.
    assert len(set(t.split[rows])) == 1
    assert set(np.unique(t.split)) == {"train", "val", "test"}


def test_long_format_rejects_missing_columns_and_bad_quality(tmp_path):
    path = tmp_path / "bad.csv"
    pd.DataFrame({"prompt_id": ["a"], "prompt": ["x"], "model": ["m"], "cost": [1.0]}).to_csv(
        path, index=False
    )
    with pytest.raises(ValueError, match="quality"):
        load_dataset(str(path))
    pd.DataFrame(
        {"prompt_id": ["a"], "prompt": ["x"], "model": ["m"], "quality": [3.0], "cost": [1.0]}
    ).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        load_dataset(str(path))
