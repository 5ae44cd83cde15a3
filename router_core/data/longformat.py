"""The long-format file any user can bring: one row per (prompt, model[, sample]) outcome.

Columns: ``prompt_id, prompt, model, quality, cost`` and optionally ``category, split,
sample, response``; CSV, JSONL (or JSON lines) or Parquet, chosen by the file suffix.
``quality`` is in [0, 1]; ``cost`` is USD per query. ``split`` values are ``train``,
``val`` (or ``validation``/``dev``) and ``test``; without the column a seeded 80/20 split
is drawn by the loader. Without ``sample``, repeated (prompt_id, model) rows are numbered
0, 1, ... in file order (repeated observations).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from router_core.data.table import RoutingTable

if TYPE_CHECKING:  # pandas is imported where a file is read: serving never needs it
    import pandas as pd

REQUIRED = ("prompt_id", "prompt", "model", "quality", "cost")
SUFFIXES = (".csv", ".jsonl", ".json", ".parquet", ".pq")
_SPLIT_ALIASES = {"validation": "val", "dev": "val", "valid": "val", "eval": "test"}


def is_long_format_path(name: str | Path) -> bool:
    return Path(str(name)).suffix.lower() in SUFFIXES


def read_frame(path: Path) -> pd.DataFrame:
    import pandas as pd

    suffix = path.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(path, dtype={"prompt_id": str, "model": str})
    if suffix in (".jsonl", ".json"):
        try:
            return pd.read_json(path, lines=True, dtype={"prompt_id": str})
        except ValueError:
            return pd.read_json(path, dtype={"prompt_id": str})
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(path)
    raise ValueError(f"{path}: unsupported suffix {suffix!r}; use one of {SUFFIXES}")


def table_from_frame(df: pd.DataFrame, name: str) -> RoutingTable:
    """Pivot a long frame into a ``RoutingTable`` (split ``train`` where absent)."""
    import pandas as pd

    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"{name}: missing required columns {missing}; need {list(REQUIRED)}")
    df = df.copy()
    df["prompt_id"] = df["prompt_id"].astype(str)
    df["model"] = df["model"].astype(str)
    if "sample" not in df.columns:
        df["sample"] = df.groupby(["prompt_id", "model"]).cumcount()
    df["sample"] = df["sample"].fillna(0).astype(np.int64)
    q = pd.to_numeric(df["quality"], errors="coerce")
    if ((q < 0) | (q > 1)).any():
        raise ValueError(f"{name}: quality must lie in [0, 1]")
    df["quality"] = q
    df["cost"] = pd.to_numeric(df["cost"], errors="coerce")
    if df.duplicated(["prompt_id", "sample", "model"]).any():
        raise ValueError(f"{name}: repeated (prompt_id, sample, model) rows")

    models = tuple(dict.fromkeys(df["model"]))
    keys = df[["prompt_id", "sample"]].drop_duplicates().reset_index(drop=True)
    row_of = {k: i for i, k in enumerate(zip(keys["prompt_id"], keys["sample"]))}
    col_of = {m: j for j, m in enumerate(models)}
    r = np.array([row_of[k] for k in zip(df["prompt_id"], df["sample"])])
    c = df["model"].map(col_of).to_numpy()
    n, m = len(keys), len(models)
    quality = np.full((n, m), np.nan)
    cost = np.full((n, m), np.nan)
    quality[r, c] = df["quality"].to_numpy(dtype=np.float64)
    cost[r, c] = df["cost"].to_numpy(dtype=np.float64)

    per_prompt = df.drop_duplicates("prompt_id").set_index("prompt_id")
    pid = keys["prompt_id"].to_numpy(dtype=object)
    prompts = per_prompt.loc[pid, "prompt"].astype(str).to_numpy(dtype=object)
    category = (
        per_prompt.loc[pid, "category"].astype(str).to_numpy(dtype=object)
        if "category" in df.columns
        else None
    )
    if "split" in df.columns:
        raw = per_prompt.loc[pid, "split"].astype(str).str.lower().str.strip()
        split = raw.map(lambda s: _SPLIT_ALIASES.get(s, s)).to_numpy(dtype=object)
    else:
        split = np.full(n, "train", dtype=object)
    responses: dict[str, np.ndarray] = {}
    if "response" in df.columns:
        for model in col_of:
            arr = np.full(n, None, dtype=object)
            sel = df["model"].to_numpy() == model
            vals = df.loc[sel, "response"].to_numpy(dtype=object)
            arr[r[sel]] = [None if pd.isna(v) else str(v) for v in vals]
            responses[model] = arr
    return RoutingTable(
        name=name,
        prompt_ids=pid,
        prompts=prompts,
        models=models,
        quality=quality,
        cost=cost,
        split=split,
        category=category,
        sample=keys["sample"].to_numpy(dtype=np.int64),
        responses=responses,
        cost_unit="usd",
    )


def load_long_format(path: str | Path) -> tuple[RoutingTable, bool]:
    """The table and whether the file carried its own ``split`` column."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"no such dataset file: {path}")
    df = read_frame(path)
    return table_from_frame(df, name=path.stem), "split" in df.columns
