"""LLMRouter's ``dcrouter_preprocessed`` data (train.json / test.json, 9 models).

Quality is LLMRouter's per-model score in [0, 1]. Cost is USD from ``default_llm.json``
(``input_price`` and ``output_price`` per 1M tokens):

    cost_{i,m} = (n_in_i · input_price_m + n_out_i · output_price_m) / 1e6

with ``n_in`` the prompt's token count from litellm's offline ``token_counter``
(its bundled cl100k tokenizer, the same for every model: the data names no tokenizer and
the hosted models' own tokenizers cannot be downloaded here). The data holds no model
outputs, so ``n_out`` is the token count of the reference answer (``ground_truth`` in
``default_query_*.jsonl``), a lower bound on what a model writes; it is the same for every
model, so the price ratios between models are exactly those of ``default_llm.json``.
``task_name`` from the same files is the category, joined on the query text.

119 of the 500 test questions also appear verbatim in ``train.json`` (69 of them with the
same scores). They are left out of the test split: a router
scored on prompts whose outcomes it was trained on measures memorisation (a kNN router
looks them up), not routing.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from router_core.data.paths import dataset_dir
from router_core.data.table import RoutingTable

FOLDER = "llmrouter"


def count_tokens(texts: list[str]) -> np.ndarray:
    """Token counts with litellm's offline tokenizer (default cl100k)."""
    from router_core.env.litellm_env import litellm

    return np.array([litellm.token_counter(text=t) if t else 0 for t in texts], dtype=np.int64)


def prices(data_dir: str | Path | None = None) -> dict[str, tuple[float, float]]:
    """model -> (input, output) USD per 1M tokens, from ``default_llm.json``."""
    raw = json.loads((dataset_dir(FOLDER, data_dir) / "default_llm.json").read_text())
    return {m: (float(v["input_price"]), float(v["output_price"])) for m, v in raw.items()}


def _queries(folder: Path, split: str) -> dict[str, tuple[str, str]]:
    """query text -> (task_name, ground_truth); the first row wins on repeated text."""
    out: dict[str, tuple[str, str]] = {}
    with open(folder / f"default_query_{split}.jsonl", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            out.setdefault(row["query"], (str(row["task_name"]), str(row.get("ground_truth", ""))))
    return out


def load_llmrouter(data_dir: str | Path | None = None) -> RoutingTable:
    """Train and test rows, without test questions that are verbatim in train."""
    folder = dataset_dir(FOLDER, data_dir)
    price = prices(data_dir)
    rows: list[dict] = []
    seen: set[str] = set()
    for split in ("train", "test"):
        items = json.loads((folder / f"{split}.json").read_text(encoding="utf-8"))
        meta = _queries(folder, split)
        for i, item in enumerate(items):
            if split == "train":
                seen.add(item["question"].strip())
            elif item["question"].strip() in seen:
                continue
            task, truth = meta.get(item["question"], ("unknown", ""))
            rows.append(
                {
                    "id": f"{split}.{i}",
                    "prompt": item["question"],
                    "scores": item["scores"],
                    "split": split,
                    "task": task,
                    "truth": truth,
                }
            )
    models = tuple(sorted({m for r in rows for m in r["scores"]}))
    missing = set(models) - set(price)
    if missing:
        raise ValueError(f"default_llm.json has no price for {sorted(missing)}")
    quality = np.array(
        [[float(r["scores"].get(m, np.nan)) for m in models] for r in rows], dtype=np.float64
    )
    n_in = count_tokens([r["prompt"] for r in rows]).astype(np.float64)
    n_out = count_tokens([r["truth"] for r in rows]).astype(np.float64)
    p_in = np.array([price[m][0] for m in models])
    p_out = np.array([price[m][1] for m in models])
    cost = (n_in[:, None] * p_in[None, :] + n_out[:, None] * p_out[None, :]) / 1e6
    cost[np.isnan(quality)] = np.nan
    df = pd.DataFrame(rows)
    return RoutingTable(
        name="llmrouter",
        prompt_ids=df["id"].to_numpy(dtype=object),
        prompts=df["prompt"].to_numpy(dtype=object),
        models=models,
        quality=quality,
        cost=cost,
        split=df["split"].to_numpy(dtype=object),
        category=df["task"].to_numpy(dtype=object),
        cost_unit=(
            "usd: default_llm.json prices x litellm token counts (prompt in, reference answer out)"
        ),
    )
