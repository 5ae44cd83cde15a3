"""How long the `tollgate` CLI takes to answer: the median wall time of repeated runs.

    python -m bench.serving.cli_startup           # 9 runs per command
    python -m bench.serving.cli_startup --repeats 21

Each run is a fresh process (what a user typing the command pays): `tollgate --help`,
`tollgate --version`, and `tollgate serve --help` (which imports the serve command's module
but not the app). The code measured is this checkout's (PYTHONPATH is set to it). The target
is under 0.5 s for `--help` and `--version`; the last line says whether both met it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (bench/serving/ is two below it)
TARGET_S = 0.5
COMMANDS = (["--help"], ["--version"], ["serve", "--help"])
ENTRY = "from gateway.cli import main; main(prog_name='tollgate')"


def time_once(args: list[str]) -> float:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", ENTRY, *args], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    n = parser.parse_args().repeats
    medians: dict[str, float] = {}
    baseline = statistics.median(
        [time_once_python() for _ in range(n)])
    for args in COMMANDS:
        runs = [time_once(args) for _ in range(n)]
        name = "tollgate " + " ".join(args)
        medians[name] = statistics.median(runs)
        print(f"{name:<24} median {medians[name]:.3f} s  (min {min(runs):.3f}, "
              f"max {max(runs):.3f}, n={n})")
    print(f"{'python -c pass':<24} median {baseline:.3f} s  (the interpreter alone)")
    ok = all(medians[f"tollgate {a}"] < TARGET_S for a in ("--help", "--version"))
    print(f"help_s={medians['tollgate --help']:.3f} version_s={medians['tollgate --version']:.3f}"
          f" target_s={TARGET_S} {'PASS' if ok else 'FAIL'}")


def time_once_python() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    return time.perf_counter() - started


if __name__ == "__main__":
    main()
