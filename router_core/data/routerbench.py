"""RouterBench subset (arc-challenge, mbpp, winogrande; the RouterDC train/test files).

Quality is RouterBench's 0/1 score per model; cost is the real USD it recorded
(``<model>|total_cost``); each model's answer text (``<model>|model_response``) is kept as
``responses`` so black-box perplexity fingerprints can score it. Rows where any model's
score is missing (28 arc-challenge rows) are dropped, leaving 2205 train and 945 test.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pandas as pd

from router_core.data.paths import dataset_dir
from router_core.data.table import RoutingTable

FOLDER = "routerbench_subset"
TASKS = ("arc_challenge", "mbpp", "winograde")
MODELS = (
    "gpt-4-1106-preview",
    "gpt-3.5-turbo-1106",
    "claude-v1",
    "claude-v2",
    "claude-instant-v1",
    "meta/llama-2-70b-chat",
    "mistralai/mixtral-8x7b-chat",
    "mistralai/mistral-7b-chat",
    "zero-one-ai/Yi-34B-Chat",
    "WizardLM/WizardLM-13B-V1.2",
    "meta/code-llama-instruct-34b-chat",
)


def prompt_text(raw: str) -> str:
    """The prompt cell is a Python-list string of turns: join the turns with blank lines."""
    try:
        turns = ast.literal_eval(raw)
    except (ValueError, SyntaxError):
        return str(raw)
    if isinstance(turns, (list, tuple)):
        return "\n\n".join(str(t) for t in turns)
    return str(turns)


def _read(path: Path, split: str) -> pd.DataFrame:
    df = pd.read_csv(path)
    df = df[~df[list(MODELS)].isna().any(axis=1)].reset_index(drop=True)
    df["split"] = split
    return df


def load_routerbench(data_dir: str | Path | None = None) -> RoutingTable:
    """All three tasks, train and test, in file order (train files first)."""
    folder = dataset_dir(FOLDER, data_dir)
    frames = [_read(folder / f"{t}_{s}.csv", s) for s in ("train", "test") for t in TASKS]
    df = pd.concat(frames, ignore_index=True)
    # sample_id repeats on a few arc-challenge rows with different prompts: disambiguate.
    ids = df["sample_id"].astype(str)
    dup = ids.groupby(ids).cumcount()
    ids = np.where(dup > 0, ids + "#" + dup.astype(str), ids)
    responses = {
        m: df[f"{m}|model_response"]
        .astype(object)
        .where(df[f"{m}|model_response"].notna(), None)
        .to_numpy(dtype=object)
        for m in MODELS
    }
    return RoutingTable(
        name="routerbench",
        prompt_ids=np.asarray(ids, dtype=object),
        prompts=df["prompt"].map(prompt_text).to_numpy(dtype=object),
        models=MODELS,
        quality=df[list(MODELS)].to_numpy(dtype=np.float64),
        cost=df[[f"{m}|total_cost" for m in MODELS]].to_numpy(dtype=np.float64),
        split=df["split"].to_numpy(dtype=object),
        category=df["eval_name"].astype(str).to_numpy(dtype=object),
        responses=responses,
        cost_unit="usd",
    )
