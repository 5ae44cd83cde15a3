"""Where built model exports live, and building a missing one off the serving process.

ONNX and static encoders run from files derived from the packaged MiniLM
(``python -m router_core.encoders.build``, run by ``scripts/build_default_router.sh``). An
export is a directory under ``<cache dir>/encoders/``, named with its recipe version, and
appears atomically (built aside, then renamed). When one is missing at first use it is built
in a child process, so that the caller (e.g. a serving process warming its encoder at startup)
never imports torch. An export shipped in the package (``packaged/``, small ones that a
packaged router was trained on) is used before the cache's: every install then embeds with
the very file the router saw.
"""

from __future__ import annotations

import fcntl
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# encoder kind -> its export's directory name; bump the version when a recipe changes
EXPORT_NAMES: dict[str, str] = {
    "minilm-onnx": "minilm-onnx-v1",
    "minilm-onnx-int8": "minilm-onnx-int8-v1",
    "minilm-static": "minilm-static-v1",
}


PACKAGED_DIR = Path(__file__).parent / "packaged"


def export_dir(kind: str, cache_dir: Path) -> Path:
    """Where ``kind``'s export is built in ``cache_dir``."""
    if kind not in EXPORT_NAMES:
        raise ValueError(f"no export for encoder kind {kind!r}; exports: {', '.join(EXPORT_NAMES)}")
    return Path(cache_dir) / "encoders" / EXPORT_NAMES[kind]


def packaged_dir(kind: str) -> Path | None:
    """``kind``'s export as shipped in the package, if it is."""
    path = PACKAGED_DIR / EXPORT_NAMES[kind]
    return path if path.is_dir() else None


def ensure_export(kind: str, cache_dir: Path) -> Path:
    """The export's directory: the packaged one, else the cache's, built first (in a child
    process) when missing."""
    path = export_dir(kind, cache_dir)
    shipped = packaged_dir(kind)
    if shipped is not None:
        return shipped
    if path.is_dir():
        return path
    cmd = [sys.executable, "-m", "router_core.encoders.build", kind]
    argv = [*cmd, "--cache-dir", str(cache_dir)]
    done = subprocess.run(argv, check=False, capture_output=True, text=True)
    if not path.is_dir():
        tail = "\n".join(done.stderr.replace("\r", "\n").strip().splitlines()[-15:])
        raise RuntimeError(f"building the {kind} export failed ({' '.join(cmd)}):\n{tail}")
    return path


@contextmanager
def build_lock(kind: str, cache_dir: Path) -> Iterator[Path]:
    """Hold the lock on ``kind``'s export while building it: concurrent builders wait, then
    find it built."""
    path = export_dir(kind, cache_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield path
