"""CLI for the database side: `tollgate db ...`, `tollgate tenants ...`, `tollgate keys ...`.

Every command finds its database as `serve` does (gateway.config.resolve_database_url):
`--database-url`, else `TOLLGATE_DATABASE_URL`, else the `database_url` of the config `serve`
would read (`--config`, `$TOLLGATE_CONFIG`, `./config.yaml`, ...), else
`sqlite:///./tollgate.db`. Only `tollgate db upgrade` (or the gateway's first start) creates
a database: any other command on a SQLite file that is not there, or a database without
Tollgate's schema, is a one-line error naming the database and where its URL came from, so
that a key is never printed for a database no gateway reads. On an existing schema they
bring it to head first (idempotent). Commands that create a key print it alone on the last
line of stdout, once; it is stored only as a keyed hash and cannot be shown again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click
from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from gateway.config import resolve_config_path, resolve_database_url
from gateway.store import keys as keylib
from gateway.store import migrate
from gateway.store import tenants as admin
from gateway.store.dberrors import is_unavailable
from gateway.store.engine import display_url, make_engine
from gateway.store.errors import Conflict, NotFound
from gateway.store.models import PERIODS
from gateway.store.periods import utcnow
from gateway.store.policy import InvalidPolicy, TenantPolicy
from gateway.store.records import KeyInfo, NewKey, TenantInfo

T = TypeVar("T")


def _db_options(fn: Callable[..., T]) -> Callable[..., T]:
    fn = click.option("--config", "config_path", type=click.Path(dir_okay=False),
                      help="config.yaml whose database_url to use.")(fn)
    return click.option("--database-url", default=None,
                        help="Database URL (default: as `serve`: TOLLGATE_DATABASE_URL, else "
                             "the config's database_url, else sqlite:///./tollgate.db).")(fn)


@contextmanager
def _revocation(config_path: str | None) -> Iterator[None]:
    """Around a change that may revoke keys: bump the Redis revocation counter before and
    after it (gateway.store.revocations), when ``reliability.redis_url`` or
    ``TOLLGATE_REDIS_URL`` is set, so a gateway cut off from the database learns of it."""
    from gateway.store.revocations import bump_sync

    url, prefix = os.environ.get("TOLLGATE_REDIS_URL"), "tollgate"
    path = config_path or os.environ.get("TOLLGATE_CONFIG")
    if path:
        try:
            from gateway.config import load_settings

            rel = load_settings(Path(path)).reliability.resolved()
            url, prefix = rel.redis_url, rel.redis_prefix
        except Exception:  # noqa: BLE001, S110 - the database change matters more than the signal
            pass
    bump_sync(url, prefix)
    try:
        yield
    finally:
        bump_sync(url, prefix)


def _url_source(database_url: str | None, config_path: str | None) -> str:
    """Where the resolved database URL came from, as the user would look for it."""
    if database_url:
        return "--database-url"
    if os.environ.get("TOLLGATE_DATABASE_URL"):
        return "TOLLGATE_DATABASE_URL"
    path = resolve_config_path(Path(config_path) if config_path else None)
    if path.is_file() and "database_url" in path.read_text(encoding="utf-8", errors="replace"):
        return f"database_url of {path}"
    return "the default (no --database-url, TOLLGATE_DATABASE_URL or config database_url)"


def _missing(url: str) -> str | None:
    """The path of a SQLite file ``url`` names that does not exist (None otherwise)."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    if u.database.startswith("file:") or Path(u.database).is_file():
        return None
    return str(Path(u.database).resolve())


@contextmanager
def _engine(database_url: str | None, config_path: str | None, *, upgrade: bool = True,
            writes: bool = False, create: bool = False) -> Iterator[Engine]:
    """An engine on the resolved database, upgraded to head; errors become CLI errors. Only
    with ``create`` may a database be made here, and only a command that ``writes`` (or
    creates) may give an existing one its schema."""
    url = resolve_database_url(database_url, config_path)
    missing = None if create else _missing(url)
    if missing:
        raise click.ClickException(
            f"no database at {missing} (from {_url_source(database_url, config_path)}): "
            "pass the gateway's with --database-url or --config, or create this one with "
            "`tollgate db upgrade`")
    engine = make_engine(url)
    try:
        if upgrade and not writes and migrate.current_revision(engine) is None:
            raise click.ClickException(
                f"{display_url(engine.url)} (from {_url_source(database_url, config_path)}) "
                "has no Tollgate tables: pass the gateway's database with --database-url or "
                "--config, or make them with `tollgate db upgrade`")
        if upgrade:
            migrate.upgrade_engine(engine)
        yield engine
    except (NotFound, Conflict, ValueError) as exc:
        raise click.ClickException(str(exc)) from exc
    except SQLAlchemyError as exc:
        if is_unavailable(exc):
            detail = str(getattr(exc, "orig", None) or exc).splitlines()[0]
            raise click.ClickException(f"database unavailable: {detail}") from exc
        raise
    finally:
        engine.dispose()


def _money(usd: float | None) -> str:
    return "unlimited" if usd is None else f"${usd:.6f}"


def _echo_new_key(new: NewKey) -> None:
    click.echo(f"key id:  {new.info.id} (tenant {new.info.tenant_name})")
    click.echo("API key (shown once; only its hash is stored):")
    click.echo(new.api_key)


# -- db --------------------------------------------------------------------------------------
@click.group("db")
def db_group() -> None:
    """Database schema (Alembic)."""


@db_group.command("upgrade")
@_db_options
@click.option("--revision", default="head", show_default=True)
def db_upgrade(database_url: str | None, config_path: str | None, revision: str) -> None:
    """Apply migrations up to REVISION (idempotent; safe with replicas running)."""
    with _engine(database_url, config_path, upgrade=False, create=True) as engine:
        migrate.upgrade_engine(engine, revision)
        click.echo(f"database at revision {migrate.current_revision(engine)}")


@db_group.command("current")
@_db_options
def db_current(database_url: str | None, config_path: str | None) -> None:
    """Print the database's revision and the code's head."""
    with _engine(database_url, config_path, upgrade=False) as engine:
        click.echo(f"database: {migrate.current_revision(engine) or '(empty)'}")
        click.echo(f"head:     {', '.join(migrate.head_revisions())}")


# -- tenants ---------------------------------------------------------------------------------
@click.group("tenants")
def tenants_group() -> None:
    """Tenants and their budgets."""


def _tenant_lines(t: TenantInfo) -> list[str]:
    return [
        f"tenant:  {t.name} (id {t.id})",
        (f"budget:  {_money(t.budget_usd)} per {t.period} period"
         f" (spent ${t.spent_usd:.6f}, reserved ${t.reserved_usd:.6f})"),
    ]


@tenants_group.command("create")
@click.argument("name")
@click.option("--budget-usd", type=float, default=None, help="Hard budget per period.")
@click.option("--period", type=click.Choice(PERIODS), default="total", show_default=True)
@click.option("--policy", default=None,
              help='JSON policy, e.g. \'{"allowed_models": ["gpt-4o-mini"]}\'.')
@_db_options
def tenants_create(name: str, budget_usd: float | None, period: str, policy: str | None,
                   database_url: str | None, config_path: str | None) -> None:
    """Create tenant NAME and its first key (printed alone on the last line)."""
    pol = _parse_policy(policy)
    with _engine(database_url, config_path, writes=True) as engine:
        info, new = admin.create_tenant(engine, keylib.load_or_create_secret(engine), name,
                                        utcnow(), budget_usd=budget_usd, period=period,
                                        policy=pol)
    for line in _tenant_lines(info):
        click.echo(line)
    _echo_new_key(new)


def _parse_policy(policy: str | None) -> TenantPolicy | None:
    """``--policy`` as a validated `TenantPolicy` (a bad one is a one-line usage error)."""
    if policy is None:
        return None
    try:
        value = json.loads(policy)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--policy") from exc
    try:
        return TenantPolicy.parse(value)
    except InvalidPolicy as exc:
        raise click.BadParameter(str(exc), param_hint="--policy") from None


@tenants_group.command("list")
@click.option("--all", "include_disabled", is_flag=True, help="Include disabled tenants.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@_db_options
def tenants_list(include_disabled: bool, as_json: bool, database_url: str | None,
                 config_path: str | None) -> None:
    """List tenants with their budget, period and spend in the current period."""
    with _engine(database_url, config_path) as engine:
        rows = admin.list_tenants(engine, utcnow(), include_disabled)
    if as_json:
        for t in rows:
            click.echo(json.dumps(t.to_dict()))
        return
    click.echo(f"{'NAME':<24} {'ID':<32} {'BUDGET':>14} {'PERIOD':<8} {'SPENT':>12} "
               f"{'RESERVED':>12}")
    for t in rows:
        name = t.name + (" (disabled)" if t.disabled_at else "")
        click.echo(f"{name:<24} {t.id:<32} {_money(t.budget_usd):>14} {t.period:<8} "
                   f"{t.spent_usd:>12.6f} {t.reserved_usd:>12.6f}")


@tenants_group.command("budget")
@click.argument("tenant")
@click.option("--budget-usd", type=float, default=None)
@click.option("--unlimited", is_flag=True, help="Remove the budget (spend is still tracked).")
@click.option("--period", type=click.Choice(PERIODS), default=None,
              help="A new period re-baselines the spend.")
@click.option("--reset", is_flag=True, help="Re-baseline the spend now.")
@_db_options
def tenants_budget(tenant: str, budget_usd: float | None, unlimited: bool, period: str | None,
                   reset: bool, database_url: str | None, config_path: str | None) -> None:
    """Set TENANT's budget and/or period (id or name)."""
    if unlimited and budget_usd is not None:
        raise click.UsageError("--budget-usd and --unlimited exclude each other")
    changes: dict[str, Any] = {"period": period, "reset": reset}
    if unlimited:
        changes["budget_usd"] = None
    elif budget_usd is not None:
        changes["budget_usd"] = budget_usd
    with _engine(database_url, config_path, writes=True) as engine, _revocation(config_path):
        tid = admin.resolve_tenant_id(engine, tenant)
        info = admin.update_tenant(engine, tid, utcnow(), **changes)
    for line in _tenant_lines(info):
        click.echo(line)


@tenants_group.command("disable")
@click.argument("tenant")
@_db_options
def tenants_disable(tenant: str, database_url: str | None, config_path: str | None) -> None:
    """Disable TENANT: its keys stop working on every gateway at once."""
    with _engine(database_url, config_path, writes=True) as engine, _revocation(config_path):
        info = admin.disable_tenant(engine, admin.resolve_tenant_id(engine, tenant), utcnow())
    click.echo(f"disabled tenant {info.name} (id {info.id})")


# -- keys ------------------------------------------------------------------------------------
@click.group("keys")
def keys_group() -> None:
    """API keys (shown once, stored hashed)."""


@keys_group.command("create")
@click.argument("tenant")
@click.option("--name", default=None, help="A label for the key.")
@_db_options
def keys_create(tenant: str, name: str | None, database_url: str | None,
                config_path: str | None) -> None:
    """Create a key for TENANT (id or name); the key is printed alone on the last line."""
    with _engine(database_url, config_path, writes=True) as engine:
        tid = admin.resolve_tenant_id(engine, tenant)
        new = admin.create_key(engine, keylib.load_or_create_secret(engine), tid, utcnow(), name)
    _echo_new_key(new)


@keys_group.command("revoke")
@click.argument("key_id")
@_db_options
def keys_revoke(key_id: str, database_url: str | None, config_path: str | None) -> None:
    """Revoke KEY_ID (takes effect on every gateway at once)."""
    with _engine(database_url, config_path, writes=True) as engine, _revocation(config_path):
        info = admin.revoke_key(engine, key_id, utcnow())
    click.echo(f"revoked {info.id} ({info.prefix}…, tenant {info.tenant_name})")


def _key_line(k: KeyInfo) -> str:
    state = f"revoked {k.revoked_at:%Y-%m-%d %H:%M}" if k.revoked_at else "active"
    return (f"{k.id:<22} {k.prefix + '…':<12} {k.tenant_name:<24} {k.name or '':<16} "
            f"{k.created_at:%Y-%m-%d %H:%M}  {state}")


@keys_group.command("list")
@click.option("--tenant", default=None, help="Only this tenant's keys (id or name).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@_db_options
def keys_list(tenant: str | None, as_json: bool, database_url: str | None,
              config_path: str | None) -> None:
    """List keys (their ids and display prefixes; never the keys)."""
    with _engine(database_url, config_path) as engine:
        tid = admin.resolve_tenant_id(engine, tenant) if tenant else None
        rows = admin.list_keys(engine, tid)
    if as_json:
        for k in rows:
            click.echo(json.dumps(k.to_dict()))
        return
    click.echo(f"{'ID':<22} {'PREFIX':<12} {'TENANT':<24} {'NAME':<16} {'CREATED':<16}  STATE")
    for k in rows:
        click.echo(_key_line(k))


def register(main: click.Group) -> None:
    """Called from `gateway.cli._register`."""
    for group in (db_group, tenants_group, keys_group):
        main.add_command(group)
