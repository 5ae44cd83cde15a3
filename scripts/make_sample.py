"""Writes data/sample/: a small seeded sample of the benchmark data, so that `tollgate train`,
`eval`, `simulate` and `demo` run in a minute or two instead of on the full data. It is made
on your machine, not shipped: benchmark data stays where it lives (the repository keeps none).

    python scripts/make_sample.py [SHARED_DATA_DIR [OUT_DIR]]
        (defaults: ../shared/data, data/sample)

Source: RouterBench (Hu et al. 2024, https://github.com/withmartian/routerbench, MIT
licence), the arc-challenge, mbpp and winogrande tasks as split train/test by the RouterDC
authors: per task the first TRAIN training and TEST test rows of a seeded shuffle, every
column kept (prompt, each model's 0/1 grade, answer and cost), rows with a missing grade left
out. The same file format as the full data, so `--data-dir data/sample` reads it as it reads
the full folder. Deterministic: the same input gives the same files.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("arc_challenge", "mbpp", "winograde")
TRAIN, TEST = 60, 30  # rows per task: 270 in all, under 1 MB
SEED = 0


def write_sample(src: Path, out: Path) -> Path:
    """The sample of ``src``'s routerbench_subset in ``out``/routerbench_subset."""
    out = out / "routerbench_subset"
    out.mkdir(parents=True, exist_ok=True)
    for task in TASKS:
        for split, n in (("train", TRAIN), ("test", TEST)):
            df = pd.read_csv(src / "routerbench_subset" / f"{task}_{split}.csv")
            graded = [c for c in df.columns if "|" not in c and c not in (
                "sample_id", "prompt", "eval_name", "oracle_model_to_route_to")]
            df = df.dropna(subset=graded).sample(frac=1.0, random_state=SEED).head(n)
            df.to_csv(out / f"{task}_{split}.csv", index=False)
    return out


def main() -> None:
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT.parent / "shared" / "data"
    if not (src / "routerbench_subset").is_dir():
        sys.exit(f"no routerbench_subset/ in {src}: name the benchmark data folder "
                 "(scripts/make_sample.py DIR), see README's 'Benchmark data'")
    out = write_sample(src, Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "data" / "sample")
    total = sum(p.stat().st_size for p in out.iterdir())
    print(f"{out}: {total / 1e6:.2f} MB")

if __name__ == "__main__":
    main()
