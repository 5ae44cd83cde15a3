"""``python -m bench.serving.hostile``: run every scenario, print each result, then the last
line (the package docstring says what each field measures)."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.serving.hostile import __doc__ as DOC
from bench.serving.hostile import (
    abuse,
    budgets,
    crash,
    early_streams,
    inputs,
    keys,
    lookups,
    neighbours,
    principals,
    rollback,
    unit_limits,
)
from bench.serving.hostile.common import (
    Hostile,
    metrics_text,
    opened_breakers,
    start_hostile_env,
)
from bench.serving.hostile.fuzz import fuzz_scenario
from bench.serving.hostile.stall import loop_stall_scenario
from bench.serving.probes import Blackhole, Recorder
from bench.serving.replica_env import stop_env

FULL = {"fuzz_examples": 300, "schema_examples": 20}
SMALL = {"fuzz_examples": 60, "schema_examples": 5}
LAST_LINE = ("overspend_usd", "breakers_opened_by_client", "loop_stall_ms", "fuzz_5xx",
             "lost_rows", "metrics_open", "burst_served_share", "timeout_undercharge_usd",
             "fee_params_unpriced", "overrun_multiple", "dashboard_peak_mb", "tpm_overadmit",
             *keys.LAST_LINE, "bound_ceiling_share", "file_ref_unbounded", "overrun_lockouts",
             "emb_tpm_overadmit", "emb_lost_rows", "tools_loop_stall_ms",
             "dashboard_neighbour_p50_ratio", "stale_reservation_after_kill_usd",
             *principals.LAST_LINE, "messages_abort_undercharge_multiple",
             "rollback_undone", *lookups.LAST_LINE, *unit_limits.LAST_LINE)


def _scenarios(h: Hostile, rec: Recorder, hole: Blackhole, sizes: dict[str, int]
               ) -> list[tuple[str, Callable[[], dict[str, Any]]]]:
    """In order; key guessing last (it throttles this address on one replica)."""
    env = h.env
    return [
        ("overspend", lambda: abuse.overspend_scenario(env, rec, hole)),
        ("client faults", lambda: abuse.client_faults_scenario(env, rec)),
        ("loop stall", lambda: loop_stall_scenario(env, rec, hole)),
        ("NUL rows", lambda: abuse.lost_rows_scenario(env, rec)),
        ("feedback", lambda: abuse.feedback_scenario(env, rec)),
        ("metrics", lambda: abuse.metrics_scenario(env)),
        ("burst", lambda: budgets.burst_scenario(env, rec)),
        ("timeouts", lambda: budgets.timeout_scenario(h, rec)),
        ("fee params", lambda: budgets.fee_params_scenario(env, rec)),
        ("overrun", lambda: budgets.overrun_scenario(h, rec)),
        ("tpm", lambda: neighbours.tpm_scenario(env, rec)),
        ("breakers", lambda: neighbours.breaker_scenario(env, rec)),
        ("user keys", lambda: principals.user_keys_scenario(env)),
        ("dashboard", lambda: crash.with_neighbour_ratio(neighbours.dashboard_scenario(env))),
        ("crash", lambda: crash.crash_scenario(env)),
        *keys.scenarios(h),
        ("file refs", lambda: inputs.file_ref_scenario(env, rec)),
        ("overrun lockouts", lambda: inputs.overrun_lockout_scenario(env, h.inputs, rec)),
        ("embeddings tpm", lambda: inputs.emb_tpm_scenario(env, rec)),
        ("embeddings rows", lambda: inputs.emb_rows_scenario(env, rec)),
        ("tools stall", lambda: inputs.tools_stall_scenario(env, rec)),
        ("early streams", lambda: early_streams.early_stream_scenario(env, h.early, rec)),
        ("rollback", lambda: rollback.rollback_scenario(env)),
        *lookups.scenarios(env),
        ("fuzz", lambda: fuzz_scenario(env, rec, sizes["fuzz_examples"],
                                       sizes["schema_examples"])),
    ]


def run(sizes: dict[str, int], only: set[str] | None = None) -> dict[str, Any]:
    """Every scenario (or those named in ``only``) on a fresh environment: the last line's
    fields."""
    rec, hole = Recorder(), Blackhole()
    fields: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tollgate-hostile-") as tmp:
        t0 = time.monotonic()
        h = start_hostile_env(Path(tmp))
        env = h.env
        print(f"started 3 upstreams, PostgreSQL, Redis and {len(env.replicas)} replicas in "
              f"{time.monotonic() - t0:.1f}s", flush=True)
        try:
            login_key, _ = env.tenant()  # before the fuzz's wrong keys throttle this address
            for name, scenario in _scenarios(h, rec, hole, sizes):
                if only and name not in only:
                    continue
                result = scenario()
                print(f"{name}:", result, flush=True)
                fields.update({k: v for k, v in result.items() if k in LAST_LINE})
            fields["breakers_opened_by_client"] = int(sum(
                opened_breakers(metrics_text(r.base_url)) for r in env.replicas))
            print("logins:", abuse.login_scenario(env, login_key), flush=True)
            fields["lost_rows"] = env.missing_rows([i for i in rec.ids if i])
            print(f"requests with ids: {len(rec.ids)}, 5xx seen: {len(rec.server_errors)}",
                  flush=True)
        finally:
            stop_env(env)
            h.stop()
    for _, result in unit_limits.run_all(only):  # an environment of their own (its docstring)
        fields.update({k: v for k, v in result.items() if k in LAST_LINE})
    return fields


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(DOC or "").split("\n")[0])
    p.add_argument("--small", action="store_true", help="fewer fuzz examples")
    p.add_argument("--only", default="", help="comma-separated scenario names (e.g. "
                   "'burst,loop stall'); the others' fields print as None")
    a = p.parse_args(argv)
    only = {n.strip() for n in a.only.split(",") if n.strip()} or None
    fields = run(SMALL if a.small else FULL, only)
    print(" ".join(f"{k}={fields.get(k)}" for k in LAST_LINE))


if __name__ == "__main__":
    main()
