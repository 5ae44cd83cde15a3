"""`tollgate serve` and `tollgate demo`.

Embedded defaults of `serve`: the database is `TOLLGATE_DATABASE_URL` or the SQLite file
`./tollgate.db` (upgraded to the current schema on start), the router is the packaged
`router_core/default_router`, the config is `--config`, else `$TOLLGATE_CONFIG`, else
`./config.yaml` when present, else the repository's `config.yaml`.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
from pathlib import Path
from typing import Any

import click

from gateway.cli import outage_log
from gateway.reliability.parent_watch import MASTER_PID_ENV
from gateway.seams import Store


@click.command("serve")
@click.option("--config", "config_path", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="config.yaml to serve (see the README's config reference).")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=4000, show_default=True, type=int)
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"]))
@click.option("--log-format", default=None, type=click.Choice(["text", "json"]),
              help="text (default) or one JSON object per line; or $TOLLGATE_LOG_FORMAT.")
@click.option("--workers", default=None, type=click.IntRange(min=1),
              help="Worker processes on one port; they share the database (SQLite in WAL mode "
                   "or PostgreSQL), each loads its own router and encoder. Default: the "
                   "machine's cores on PostgreSQL, 1 on SQLite (said at startup).")
@click.option("--forwarded-allow-ips", default=None, metavar="IPS",
              help="Comma-separated proxy addresses or CIDRs ('*' for any) whose "
                   "X-Forwarded-For/-Proto set the client address and scheme; default: "
                   "reliability.forwarded_allow_ips, $TOLLGATE_FORWARDED_ALLOW_IPS, else none "
                   "(the connection's peer is the client).")
def serve_command(config_path: Path | None, host: str, port: int, log_level: str,
                  log_format: str | None, workers: int | None,
                  forwarded_allow_ips: str | None) -> None:
    """Run the gateway (OpenAI-compatible API on http://HOST:PORT/v1)."""
    from gateway.cli.log_setup import collect_startup_warnings, configure_logging
    from gateway.cli.malloc_arenas import limit_malloc_arenas
    from gateway.config import ConfigError, load_settings, resolve_config_path

    path = resolve_config_path(config_path)
    try:
        settings = load_settings(path)  # a bad config fails here, before any heavy import
    except ConfigError as e:
        raise click.ClickException(str(e)) from None
    check_port_free(host, port)  # before the seconds of startup work, not after them
    limit_malloc_arenas()  # before any thread starts (gateway/cli/malloc_arenas.py)
    # weights load once at startup: a progress bar in a server log is noise
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    configure_logging(log_level, log_format or os.environ.get("TOLLGATE_LOG_FORMAT", "text"))
    warnings = collect_startup_warnings()  # said once here, not again by each worker
    outage_log.install()  # a database outage: one line per message a minute, no tracebacks
    no_litellm_token_counting()
    hub_problem = _hub_offline_if_unreachable() if settings.model_list else None
    try:
        app = _build_app(settings)
    except ConfigError as e:  # e.g. a backend with no price anywhere
        raise click.ClickException(str(e)) from None
    from gateway.cli.startup import LABEL_WIDTH, database_problem, summary
    from gateway.reliability.shutdown import run, run_workers

    trusted = None if forwarded_allow_ips is None else [
        ip.strip() for ip in forwarded_allow_ips.split(",") if ip.strip()]
    ctx = app.state.ctx
    workers, why = worker_count(workers, settings.database_url)
    lines = summary(path, settings, ctx.pool.current, f"http://{host}:{port}",
                    database_problem=database_problem(ctx.store.engine),
                    hub_problem=hub_problem)
    router_row = next(i for i, line in enumerate(lines) if line.startswith("  router "))
    lines.insert(router_row, f"  {'workers':<{LABEL_WIDTH + 2}} {workers} ({why})")
    if (log_format or os.environ.get("TOLLGATE_LOG_FORMAT")) == "json":
        logging.getLogger("tollgate").info("startup", extra={"fields": {"startup": lines}})
    else:
        click.echo("\n".join(lines), err=True)
    if workers == 1:
        run(app, host, port, forwarded_allow_ips=trusted, log_level=log_level,
            log_config=None, access_log=False)
        return
    # each worker builds its own app (worker_app); this one only checked the config
    os.environ["TOLLGATE_CONFIG"] = str(path.resolve())
    os.environ["TOLLGATE_LOG_LEVEL"] = log_level
    os.environ["TOLLGATE_LOG_FORMAT"] = log_format or os.environ.get("TOLLGATE_LOG_FORMAT", "text")
    os.environ[MASTER_PID_ENV] = str(os.getpid())  # the workers die with this process
    release_replica_slot(ctx.store)  # the workers serve; this process books nothing
    del app, ctx
    warnings.export()
    run_workers("gateway.cli.serve:worker_app", settings, host, port, workers,
                forwarded_allow_ips=trusted, log_level=log_level, log_config=None,
                access_log=False)


def worker_app() -> Any:
    """What each process of ``tollgate serve --workers N`` serves: the app of
    ``$TOLLGATE_CONFIG``, with the parent's logging set up again (a spawned process starts
    with none)."""
    from gateway.cli.log_setup import configure_logging, drop_parent_warnings
    from gateway.config import load_settings, resolve_config_path
    from gateway.reliability.parent_watch import die_with_parent, master_pid_from_env

    die_with_parent(master_pid_from_env())  # a master killed with SIGKILL leaves no orphans
    configure_logging(os.environ.get("TOLLGATE_LOG_LEVEL", "info"),
                      os.environ.get("TOLLGATE_LOG_FORMAT", "text"))
    drop_parent_warnings()
    outage_log.install()
    no_litellm_token_counting()
    return _build_app(load_settings(resolve_config_path(None)))


def _hub_offline_if_unreachable() -> str | None:
    """The Hugging Face hub's reachability, decided once for the process group before the
    app is built: unreachable, offline mode is set for this process and its workers (who
    then say nothing) and the startup block says why (router_core/env/hub_reach.py)."""
    from router_core.env.hub_reach import go_offline, unreachable_reason

    reason = unreachable_reason()
    if reason is not None:
        go_offline()
    return reason


def no_litellm_token_counting() -> None:
    """Turn litellm's own token counting off in a serving process. litellm counts the prompt
    of every streamed call with the model's tokenizer, to price the call in its hidden
    params (litellm/litellm_core_utils/llm_response_utils/response_metadata.py ->
    cost_calculator.completion_cost), a price Tollgate never reads: it settles from the
    upstream's usage (gateway/pricing.py). That count loaded tiktoken's cl100k and o200k
    tables into every worker (~110 MB, bench/serving/serve_memory.py) and ran per request.
    Off, litellm passes the upstream's usage through unchanged; an answer without one is
    counted by Tollgate (``count_text_tokens``, on ``litellm.encode``, which the flag leaves
    alone). Only here: tests and tools sharing a process with a gateway keep litellm's
    counter."""
    from gateway.provider import litellm_maps

    litellm_maps.disable_token_counter()


def worker_count(asked: int | None, database_url: str,
                 cgroup: Path = Path("/sys/fs/cgroup")) -> tuple[int, str]:
    """(worker processes, why): ``--workers`` when given; else one per core the process may
    run on for PostgreSQL, which serves concurrent writers from many processes; 1 for SQLite,
    whose single file lock every reservation and settlement takes (``--workers N`` works on
    it, tests/gateway/cli/test_serve_workers.py, but each worker holds its own router and
    encoder for little gain) and whose in-memory databases no two processes share."""
    if asked is not None:
        return asked, "--workers"
    if database_url.startswith(("postgresql", "postgres")):
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
            os.cpu_count() or 1)
        quota = cpu_quota(cgroup)
        if quota is not None and quota < cores:
            return max(1, math.ceil(quota)), (f"the CPU quota of {quota:g} cores (cgroup) on "
                                             "PostgreSQL; --workers to change")
        return cores, "one per core on PostgreSQL; --workers to change"
    return 1, "SQLite: one process by default; --workers N to share the file"


def cpu_quota(root: Path = Path("/sys/fs/cgroup")) -> float | None:
    """The cores this process's cgroup may use (quota / period), None without a quota. A
    container limited to 2 CPUs on a 64-core host sees 64 cores in os.cpu_count() and its
    affinity, and would start 64 workers; cgroup v2's ``cpu.max`` ("200000 100000") or v1's
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` say 2."""
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        try:
            quota = (root / "cpu" / "cpu.cfs_quota_us").read_text().strip()
            period = (root / "cpu" / "cpu.cfs_period_us").read_text().strip()
        except OSError:
            return None
    try:
        q, p = float(quota), float(period)
    except ValueError:  # "max": no quota
        return None
    return q / p if q > 0 and p > 0 else None


def check_port_free(host: str, port: int) -> None:
    """Bind HOST:PORT once, as uvicorn will (SO_REUSEADDR), and let go: a port another
    process listens on is one error line now rather than after the startup work."""
    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror}") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as e:
            what = ("already in use: another process listens there (stop it or pass "
                    "--port)" if e.errno == errno.EADDRINUSE else e.strerror or str(e))
            raise click.ClickException(f"cannot listen on {host}:{port}: {what}") from None


def release_replica_slot(store: Store) -> None:
    """Let the replica slot (gateway/store/replica_slot.py) of a store that will never serve
    go, so that a worker takes it (the app's store is guarded: build_context wraps it)."""
    from gateway.reliability.outage import GuardedStore
    from gateway.store.reclaim import release_slot

    if isinstance(store, GuardedStore):
        release_slot(store.inner.replica_slot)


def _build_app(settings: Any) -> Any:
    """The app of ``settings``, its startup heap frozen once started
    (gateway/reliability/heap_freeze.py), and then the heap's free memory (its build's
    transient part: the reference prompts' activations) handed back
    (gateway/cli/malloc_arenas.py)."""
    from gateway.app import create_app
    from gateway.cli.malloc_arenas import trim_free_memory

    app = create_app(settings, freeze_heap=True)
    trim_free_memory()
    return app


@click.command("demo")
@click.option("--prompts", "n_prompts", default=40, show_default=True,
              help="How many test prompts to send.")
@click.option("--cost-weight", default=None, type=float,
              help="λ of the `auto` route (default: the demo config's).")
@click.option("--seed", default=0, show_default=True)
@click.option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder holding RouterBench's routerbench_subset/ (default: "
                   "$TOLLGATE_DATA_DIR or ../shared/data); without it the demo sends its own "
                   "prompts and reports decisions and spend, not quality.")
@click.option("--router", "router_path", type=click.Path(file_okay=False, path_type=Path),
              default=None, help="Router artifact (default: the packaged one).")
def demo_command(n_prompts: int, cost_weight: float | None, seed: int, data_dir: Path | None,
                 router_path: Path | None) -> None:
    """Route RouterBench prompts through a local gateway, no provider keys needed."""
    from gateway.cli.log_setup import configure_logging
    from gateway.sandbox.demo import DemoDataMissing, run_demo

    configure_logging("warning")  # the demo's table is the output; libraries only warn
    try:
        run_demo(n_prompts=n_prompts, cost_weight=cost_weight, seed=seed, data_dir=data_dir,
                 router_path=router_path, echo=click.echo)
    except DemoDataMissing as e:
        raise click.ClickException(str(e)) from None


def register(group: click.Group) -> None:
    group.add_command(serve_command)
    group.add_command(demo_command)
