"""MMLU-Pro per-model 5-shot outcomes (TIGER-AI-Lab): 12032 questions x 29 models.

Quality is 0/1 correctness (NaN where a model has no result: DeepSeek-Coder-V2 is partial).
The data records no price, so cost is a documented proxy, as CSCR does for EmbedLLM:
each model's output length times a price proportional to its parameter count,

    cost_{i,m} = (chars_{i,m} / 4) · P_m · 0.0125 / 1e6   USD,

i.e. ~4 characters per token and $0.0125 per 1M output tokens per billion parameters
(a 70B model costs $0.875 per 1M tokens, the going hosted rate). P_m is the number of
*active* parameters per token in billions (what inference compute, and providers' MoE
prices, scale with); the two Gemini models do not publish a size, so their P_m is the
parameter count this scale gives their list output price ($5.00 and $0.30 per 1M tokens
for gemini-1.5-pro-002 / -flash-002, hence 400 and 24).

| model | P_m (B) | note |
|---|---|---|
| DeepSeek-Coder-V2 | 21 | MoE, 236B total |
| Llama-2-7b-hf / 13b-hf / 70b-hf | 7 / 13 / 70 | |
| Meta-Llama-3-8B, Meta-Llama-3_1-8B(-Instruct) | 8 | |
| Meta-Llama-3-70B, Meta-Llama-3_1-70B(-Instruct) | 70 | |
| Mistral-7B-v0.1, -v0.2-hf, -Instruct-v0.1/0.2, mathstral-7B | 7 | |
| Mixtral-8x7B-v0.1, -Instruct-v0.1 | 12.9 | MoE, 46.7B total |
| Phi-3-mini-4k-instruct | 3.8 | |
| Qwen1.5-7B-Chat / 72B-Chat / 110B | 7 / 72 / 110 | |
| Yi-6B, Yi-6b-Chat / Yi-34B | 6 / 34 | |
| c4ai-command-r-v01 | 35 | |
| gemma-7b | 8.5 | |
| jamba-1.5-large | 94 | MoE, 398B total |
| gemini-1.5-flash-002 / gemini-1.5-pro-002 | 24 / 400 | from list price |

The prompt is the question followed by its lettered options. The category (14 subjects)
drives the ``ood`` split. There is no official split: ``standard`` is a seeded 80/20 split.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from router_core.data.paths import dataset_dir
from router_core.data.table import RoutingTable

FOLDER = "mmlu_pro"
CHARS_PER_TOKEN = 4.0
USD_PER_MTOK_PER_B = 0.0125
ACTIVE_PARAMS_B = {
    "DeepSeek-Coder-V2": 21.0,
    "Llama-2-13b-hf": 13.0,
    "Llama-2-70b-hf": 70.0,
    "Llama-2-7b-hf": 7.0,
    "Meta-Llama-3-70B": 70.0,
    "Meta-Llama-3-8B": 8.0,
    "Meta-Llama-3_1-70B-Instruct": 70.0,
    "Meta-Llama-3_1-70B": 70.0,
    "Meta-Llama-3_1-8B-Instruct": 8.0,
    "Meta-Llama-3_1-8B": 8.0,
    "Mistral-7B-Instruct-v0.1": 7.0,
    "Mistral-7B-Instruct-v0.2": 7.0,
    "Mistral-7B-v0.1": 7.0,
    "Mistral-7B-v0.2-hf": 7.0,
    "Mixtral-8x7B-Instruct-v0.1": 12.9,
    "Mixtral-8x7B-v0.1": 12.9,
    "Phi-3-mini-4k-instruct": 3.8,
    "Qwen1.5-110B": 110.0,
    "Qwen1.5-72B-Chat": 72.0,
    "Qwen1.5-7B-Chat": 7.0,
    "Yi-34B": 34.0,
    "Yi-6B": 6.0,
    "Yi-6b-Chat": 6.0,
    "c4ai-command-r-v01": 35.0,
    "gemini-1.5-flash-002": 24.0,
    "gemini-1.5-pro-002": 400.0,
    "gemma-7b": 8.5,
    "jamba-1.5-large": 94.0,
    "mathstral-7B": 7.0,
}
LETTERS = "ABCDEFGHIJKLMNOP"


def price_per_char(model: str) -> float:
    """USD per output character of ``model`` under the proxy above."""
    return ACTIVE_PARAMS_B[model] * USD_PER_MTOK_PER_B / 1e6 / CHARS_PER_TOKEN


def prompt_text(question: str, options) -> str:
    lines = [str(question).strip()]
    lines += [f"{LETTERS[j]}. {opt}" for j, opt in enumerate(list(options))]
    return "\n".join(lines)


def load_mmlu_pro(data_dir: str | Path | None = None) -> RoutingTable:
    """All 12032 questions with ``split`` all ``train``; the split recipes assign test."""
    import pandas as pd  # here, not at import: serving reads only this module's prices

    folder = dataset_dir(FOLDER, data_dir)
    q = pd.read_parquet(folder / "mmlu_pro_questions.parquet")
    correct = pd.read_parquet(folder / "mmlu_pro_correct_wide.parquet")
    chars = pd.read_parquet(folder / "mmlu_pro_output_chars_wide.parquet")
    models = tuple(correct.columns)
    unknown = set(models) - set(ACTIVE_PARAMS_B)
    if unknown:
        raise ValueError(f"no parameter count for {sorted(unknown)}: extend ACTIVE_PARAMS_B")
    if len(q) != len(correct) or len(q) != len(chars):
        raise ValueError("mmlu_pro parquet files disagree on the number of questions")
    quality = correct.to_numpy(dtype=np.float64)
    price = np.array([price_per_char(m) for m in models])
    cost = chars[list(models)].to_numpy(dtype=np.float64) * price[None, :]
    cost[np.isnan(quality)] = np.nan
    return RoutingTable(
        name="mmlu-pro",
        prompt_ids=q["question_id"].astype(str).to_numpy(dtype=object),
        prompts=np.array(
            [prompt_text(a, b) for a, b in zip(q["question"], q["options"])], dtype=object
        ),
        models=models,
        quality=quality,
        cost=cost,
        split=np.full(len(q), "train", dtype=object),
        category=q["category"].astype(str).to_numpy(dtype=object),
        cost_unit=(
            "usd proxy: output chars / 4 x $0.0125 per 1M tokens per billion active "
            "parameters (router_core.data.mmlu_pro)"
        ),
    )
