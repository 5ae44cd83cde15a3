"""``tollgate serve`` caps glibc's malloc arenas for itself and its workers, unless the
operator chose a value (gateway/cli/malloc_arenas.py). Each case runs in a fresh interpreter:
the cap is process state."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

PROBE = """
import json, os
from gateway.cli.malloc_arenas import limit_malloc_arenas
print(json.dumps([limit_malloc_arenas(), os.environ.get("MALLOC_ARENA_MAX")]))
"""


def _probe(env: dict[str, str]) -> list:
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_the_cap_is_set_for_the_process_and_its_workers() -> None:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    applied, inherited = _probe(env)
    assert inherited == "2"  # what spawned workers start with
    assert applied is (platform.libc_ver()[0] == "glibc")  # mallopt took it


def test_an_operators_value_stands() -> None:
    applied, inherited = _probe({**os.environ, "MALLOC_ARENA_MAX": "8"})
    assert (applied, inherited) == (False, "8")


TRIM = """
import json
from pathlib import Path
from gateway.cli.malloc_arenas import trim_free_memory

def rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024

blocks = [bytes(2000) for _ in range(100_000)]  # ~200 MB of small heap blocks
keep = blocks[::200]  # a few stay alive, so the heap cannot shrink from its top by itself
del blocks
before = rss_mb()
trimmed = trim_free_memory()
print(json.dumps([trimmed, before, rss_mb()]))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_trimming_hands_the_heaps_free_memory_back() -> None:
    """What ``tollgate serve`` does once its app is built (the reference prompts' freed
    activations): here 200 MB freed between live blocks, which glibc keeps resident until
    ``malloc_trim``."""
    out = subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True,
                         check=True).stdout
    trimmed, before, after = json.loads(out.strip().splitlines()[-1])
    assert trimmed is True
    assert before - after > 100  # MB handed back of the ~200 freed
