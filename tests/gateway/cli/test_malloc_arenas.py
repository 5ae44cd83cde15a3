"""``tollgate serve`` caps glibc's malloc arenas for itself and its workers, unless the
operator chose a value (gateway/cli/malloc_arenas.py). Each case runs in a fresh interpreter:
the cap is process state."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

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
