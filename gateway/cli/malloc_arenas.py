"""Fewer glibc malloc arenas in a serving process, and its free memory handed back after
startup: its memory, not its speed.

glibc gives threads their own malloc arenas, up to 8 per core, and keeps what an arena
freed for that arena. A worker's threads (the encoder's, anyio's pool for counting and
the database, onnxruntime's) each grow one, so the resident size after a burst stays well
above what is in use. ``M_ARENA_MAX`` is glibc's own knob for this ("the more arenas
you have, the lower the per-thread contention, but the higher the memory usage", mallopt(3),
https://manpages.ubuntu.com/manpages/stonking/man3/mallopt.3.html); here it is set for this
process with ``mallopt`` before any thread starts, and in the environment for the workers
it spawns. An operator's own
``MALLOC_ARENA_MAX`` stands; on a libc without ``mallopt`` (musl, macOS) nothing changes.

``trim_free_memory`` calls glibc's ``malloc_trim(0)`` ("attempts to release free memory
from the heap", malloc_trim(3)) once the app is built: startup embeds the reference prompts,
whose activations are freed but stay resident in the heap (~60-110 MB here; the worker went
from ~425 to ~317 MB after the call).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"))
    except (OSError, TypeError):
        return None


def trim_free_memory() -> bool:
    """Hand the heap's free memory back to the system (glibc only); whether it could."""
    trim = getattr(_libc(), "malloc_trim", None)
    return bool(trim(0)) if trim is not None else False


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's arenas at ``arenas`` for this process and its children; whether set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False  # glibc read the operator's value at start
    os.environ["MALLOC_ARENA_MAX"] = str(arenas)  # workers start with it
    mallopt = getattr(_libc(), "mallopt", None)
    return bool(mallopt(M_ARENA_MAX, arenas)) if mallopt is not None else False
