"""Where the benchmark data lives: ``$TOLLGATE_DATA_DIR``, else ``<repo root>/../shared/data``.

The data is never copied into the repository; tests and benchmarks read it in place.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def shared_data_dir() -> Path:
    """The folder holding ``routerbench_subset/``, ``mmlu_pro/`` and ``llmrouter/``."""
    env = os.environ.get("TOLLGATE_DATA_DIR")
    if env:
        return Path(env).expanduser()
    return (REPO_ROOT / ".." / "shared" / "data").resolve()


def dataset_dir(folder: str, data_dir: str | Path | None = None) -> Path:
    """``<data_dir or shared_data_dir()>/<folder>``, with a clear error when it is absent."""
    root = Path(data_dir).expanduser() if data_dir is not None else shared_data_dir()
    path = root / folder
    if not path.is_dir():
        raise FileNotFoundError(
            f"benchmark folder {path} not found: pass --data-dir DIR (or set "
            f"TOLLGATE_DATA_DIR) to a folder holding {folder}/ (README: 'Benchmark data')"
        )
    return path
