"""Fewer glibc malloc arenas in a serving process: its memory, not its speed.

glibc gives threads their own malloc arenas, up to 8 per core, and keeps what an arena
freed for that arena. A worker's threads (the encoder's, anyio's pool for counting and
the database, onnxruntime's) each grow one, so the resident size after a burst stays well
above what is in use. ``M_ARENA_MAX`` is glibc's own knob for this ("the more arenas
you have, the lower the per-thread contention, but the higher the memory usage", mallopt(3),
https://manpages.ubuntu.com/manpages/stonking/man3/mallopt.3.html); here it is set for this
process with ``mallopt`` before any thread starts, and in the environment for the workers
it spawns. An operator's own
``MALLOC_ARENA_MAX`` stands; on a libc without ``mallopt`` (musl, macOS) nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

M_ARENA_MAX = -8  # glibc's malloc.h
ARENAS = 2


def limit_malloc_arenas(arenas: int = ARENAS) -> bool:
    """Cap glibc's arenas at ``arenas`` for this process and its children; whether set."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False  # glibc read the operator's value at start
    os.environ["MALLOC_ARENA_MAX"] = str(arenas)  # workers start with it
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError, TypeError):
        return False
    return bool(mallopt(M_ARENA_MAX, arenas))
