"""``tollgate models add|list|remove``: change the router's pool without retraining.

``add`` describes a new model on the artifact's probe prompts (``probes.json``) with a
descriptor kind the router was trained with, configured as the artifact recorded it
(perplexity: the same scorer LM and conditioning; logit: the same token basis), inserts the
expert (``Router.with_expert``), and publishes the result:
  * the artifact directory gets the new version (probes kept);
  * config.yaml's ``model_list`` gets the backend (restarts keep it);
  * both are the ones `tollgate serve` uses, never the install's (gateway/cli/model_files.py);
  * with a database, the version is recorded and activated: running gateways hot-swap to
    it and adopt the backend it carries (``gateway.pool.adopt``), with no restart.
Costs: the expert's mean USD per query is what its probe answers cost at the given prices.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import yaml

from gateway.cli.describe_model import describe
from gateway.cli.model_files import Targets, edit_config, targets
from gateway.cli.model_publish import (
    engine_for,
    live_router,
    new_version,
    publish,
    with_common,
    wrote,
)
from gateway.config import resolve_config_path

FINGERPRINTS = ("perplexity", "logit", "probe-outcome")


@click.group("models")
def models_group() -> None:
    """Add, list and remove the models the router can choose (no retraining)."""


@models_group.command("add")
@click.argument("name")
@click.option("--litellm-model", required=True, help="litellm model string, e.g. openai/x.")
@click.option("--api-base", default=None, help="Base URL of an OpenAI-compatible server.")
@click.option(
    "--api-key-env",
    default=None,
    metavar="VAR",
    help="Environment variable holding the API key (stored as os.environ/VAR, never the key).",
)
@click.option("--price-in", type=float, default=None, help="USD per 1M input tokens.")
@click.option("--price-out", type=float, default=None, help="USD per 1M output tokens.")
@click.option(
    "--fingerprint", type=click.Choice(FINGERPRINTS), default="perplexity", show_default=True
)
@click.option(
    "--weights",
    default=None,
    help="logit: transformers id, directory or .gguf file of the model's weights.",
)
@click.option(
    "--max-spend", type=float, default=1.0, show_default=True, help="USD cap on the probe calls."
)
@click.option("--concurrency", type=int, default=4, show_default=True)
@click.option(
    "--max-tokens", type=int, default=256, show_default=True, help="Answer length cap per probe."
)
@click.option(
    "--force", is_flag=True, help="Allow a descriptor kind the head was not trained with."
)
@click.option(
    "--judge-model",
    default=None,
    help="litellm model string of the LLM that grades each probe answer (needed for "
    "probe-outcome; with perplexity, the grades refine the fingerprint).",
)
@click.option("--judge-api-base", default=None, help="The judge's base URL.")
@click.option(
    "--judge-api-key-env", default=None, metavar="VAR", help="The judge's key variable."
)
@click.option("--judge-price-in", type=float, default=None, help="Judge USD per 1M input.")
@click.option("--judge-price-out", type=float, default=None, help="Judge USD per 1M output.")
@with_common
def add_command(
    name: str, litellm_model: str, api_base: str | None, api_key_env: str | None,
    price_in: float | None, price_out: float | None, fingerprint: str, weights: str | None,
    max_spend: float, concurrency: int, max_tokens: int, force: bool, judge_model: str | None,
    judge_api_base: str | None, judge_api_key_env: str | None, judge_price_in: float | None,
    judge_price_out: float | None, config: Path | None, router: Path | None,
    database_url: str | None,
) -> None:
    """Describe model NAME on the router's probes and add it to the pool.

    probe-outcome: NAME answers every probe, ``--judge-model`` grades each answer (0-10),
    and NAME gets its probe readout (router_core.cold_start.readout) in the router's space; the
    judge's calls count against ``--max-spend`` too. perplexity with ``--judge-model``:
    the same grades refine the fingerprint (the readout with a·e_h as its prior mean).
    """
    from tqdm.auto import tqdm

    from router_core.fingerprints.answers import SpendCapExceeded

    t = targets(config, router)
    engine = engine_for(database_url)
    current = live_router(t.read_router, engine)
    probes, kind = _probes_and_kind(t.read_router, current, fingerprint, force)
    if fingerprint == "probe-outcome" and not judge_model:
        raise click.BadParameter(
            "probe-outcome descriptors need each probe answer graded: give --judge-model",
            param_hint="--judge-model",
        )
    steps = len(probes) * (
        1  # answers, or logits
        + (fingerprint in ("perplexity", "probe-outcome"))  # scores, or grades
        + (fingerprint == "perplexity" and bool(judge_model))  # grades
    )
    bar = tqdm(total=steps, desc=f"fingerprint {name}", unit="probe")
    live = _answers(litellm_model, api_base, api_key_env, price_in, price_out, max_spend,
                    max_tokens, concurrency, bar.update)
    if hasattr(kind, "progress"):
        kind.progress = bar.update

    def make_judge() -> Any:  # what the model's answers left of the spend cap
        return _answers(judge_model, judge_api_base, judge_api_key_env, judge_price_in,
                        judge_price_out, max(max_spend - live.spend.usd, 0.0), 16, concurrency,
                        bar.update)

    try:
        d = describe(name, fingerprint, kind, current, probes, live,
                     make_judge if judge_model else None, weights or litellm_model)
    except SpendCapExceeded as exc:
        raise click.ClickException(str(exc)) from exc
    finally:
        bar.close()
    version = new_version(current.version, f"add-{name}")
    entry = _backend_entry(name, litellm_model, api_base, api_key_env, price_in, price_out)
    added = _with_added(current, version, name, d, kind.name, live, entry)
    publish(added, t, engine, current.version, "added")
    edit_config(t, add=entry)
    _report_added(name, kind.name, version, len(probes), live, d, judge_model, t)


def _answers(model: str | None, api_base: str | None, key_env: str | None,
             price_in: float | None, price_out: float | None, max_spend: float,
             max_tokens: int, concurrency: int, progress: Any) -> Any:
    """A LiveAnswers for ``model``: its key read from ``key_env``, its spend capped."""
    import os

    from router_core.fingerprints.answers import LiveAnswers

    return LiveAnswers(model, api_base=api_base,
                       api_key=os.environ.get(key_env) if key_env else None,
                       price_in_per_m=price_in, price_out_per_m=price_out,
                       max_spend_usd=max_spend, max_tokens=max_tokens, concurrency=concurrency,
                       progress=progress)


def _with_added(current: Any, version: str, name: str, d: Any, kind: str, live: Any,
                entry: dict[str, Any]) -> Any:
    """``current`` with the new expert (and its backend in the artifact's pool). Its cost is
    the mean USD per answered probe, else the pool's median."""
    from router_core.runtime.router import Expert

    if live.spend.calls:
        cost = live.spend.usd / live.spend.calls
    else:
        cost = float(np.median([x.cost_usd for x in current.experts]))
    added = current.with_expert(
        Expert(name, d.descriptor.astype(np.float32), cost, kind),
        version,
        a=d.readout.a if d.readout else None,  # a readout brings its own calibration
        b=d.readout.b if d.readout else None,
    )
    from gateway.pool.adopt import ARTIFACT_KEY, artifact_backends  # litellm: lazy
    backends = {**artifact_backends(current), name: entry}
    return replace(added, config={**dict(added.config), ARTIFACT_KEY: backends})


def _probes_and_kind(router_dir: Path, current: Any, fingerprint: str, force: bool
                     ) -> tuple[Any, Any]:
    """The artifact's probes and the descriptor kind configured as the artifact recorded it;
    an error where they cannot describe a model in ``current``'s space."""
    from router_core.artifact import load_probes
    from router_core.descriptors.base import ProbeSet
    from router_core.fingerprints.space import kind_for_artifact

    probes = ProbeSet.from_json(load_probes(router_dir))
    if not len(probes):
        raise click.ClickException(f"{router_dir} has no probes.json: cannot describe models")
    if len(probes) != current.head.out_dim:
        raise click.ClickException(
            f"{len(probes)} probes but the router's space has {current.head.out_dim} dimensions"
        )
    try:
        return probes, kind_for_artifact(current.config, fingerprint, allow_other=force)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


def _report_added(name: str, kind: str, version: str, n_probes: int, live: Any, d: Any,
                  judge_model: str | None, t: Targets) -> None:
    click.echo(
        f"added {name} ({kind} descriptor, {n_probes} probes) as router version "
        f"{version}; probe spend ${live.spend.usd:.6f} over {live.spend.calls} calls"
        + ("" if live.spend.priced else " (price unknown: spend not counted)")
    )
    click.echo(f"wrote {wrote(t)}")
    if d.judge is not None:
        judged = int(np.isfinite(d.outcomes).sum())
        click.echo(
            f"judge {judge_model}: {judged} of {n_probes} probe answers graded, mean "
            f"{np.nanmean(d.outcomes):.2f}; judge spend ${d.judge.spend.usd:.6f} over "
            f"{d.judge.spend.calls} calls" + ("" if d.judge.spend.priced else " (price unknown)")
        )


def _backend_entry(name: str, litellm_model: str, api_base: str | None,
                   api_key_env: str | None, price_in: float | None, price_out: float | None
                   ) -> dict[str, Any]:
    """The config.yaml ``model_list`` entry of the new model (the key by reference only)."""
    params: dict[str, Any] = {"model": litellm_model}
    if api_base:
        params["api_base"] = api_base
    if api_key_env:
        params["api_key"] = f"os.environ/{api_key_env}"
    info: dict[str, Any] = {"router_model": name}
    if price_in is not None:
        info["input_cost_per_million"] = price_in
    if price_out is not None:
        info["output_cost_per_million"] = price_out
    return {"model_name": name, "litellm_params": params, "model_info": info}


@models_group.command("list")
@with_common
def list_command(config: Path | None, router: Path | None, database_url: str | None) -> None:
    """The router's experts: descriptor kind, mean cost, backend."""
    t = targets(config, router)
    cfg_path = t.config if t.config.exists() else resolve_config_path(config)
    current = live_router(t.read_router, engine_for(database_url))
    raw = (yaml.safe_load(cfg_path.read_text()) or {}) if cfg_path.exists() else {}
    serving = {}
    for b in raw.get("model_list", []):
        serving.setdefault(
            (b.get("model_info") or {}).get("router_model") or b["model_name"], b["model_name"]
        )
    current, known = _known(cfg_path, current)
    for k in known:
        if k.expert is not None:
            serving.setdefault(k.expert, k.backend)
    status = {k.backend: k.status for k in known}
    click.echo(f"router version {current.version}: {len(current.experts)} models")
    click.echo(f"{'model':<36} {'descriptor':<14} {'USD/query':>10}  {'backend':<24} known as")
    for x in current.experts:
        b = serving.get(x.name, "-")
        click.echo(f"{x.name:<36} {x.kind:<14} {x.cost_usd:10.6f}  {b:<24} {status.get(b, '')}")
    for k in known:
        if k.expert is None:
            click.echo(f"{'-':<36} {'-':<14} {'':>10}  {k.backend:<24} {k.status}")


def _known(cfg_path: Path, router: Any) -> tuple[Any, list]:
    """The router with the config's cold-start priors, and how it knows each backend."""
    from gateway.config import ConfigError, load_settings
    from gateway.pool import build_pool
    from gateway.pricing import resolve_prices

    try:
        settings = load_settings(cfg_path)
    except ConfigError:
        return router, []
    pool = build_pool(settings, resolve_prices(settings, strict=False), router)
    return pool.router, list(pool.known.values())


@models_group.command("remove")
@click.argument("name")
@with_common
def remove_command(
    name: str, config: Path | None, router: Path | None, database_url: str | None
) -> None:
    """Take NAME out of the router's pool (and its backend out of config.yaml)."""
    t = targets(config, router)
    engine = engine_for(database_url)
    current = live_router(t.read_router, engine)
    if name not in current.model_names:
        raise click.ClickException(f"{name!r} is not in router {current.version}")
    version = new_version(current.version, f"remove-{name}")
    smaller = current.without_expert(name, version)
    from gateway.pool.adopt import ARTIFACT_KEY, artifact_backends  # litellm: lazy
    backends = {k: v for k, v in artifact_backends(current).items() if k != name}
    smaller = replace(smaller, config={**dict(smaller.config), ARTIFACT_KEY: backends})
    publish(smaller, t, engine, current.version, "removed")
    edit_config(t, remove=name)
    click.echo(f"removed {name}: router version {version}; wrote {wrote(t)}")


def register(main: click.Group) -> None:
    from gateway.cli.models_learn import learn_command

    models_group.add_command(learn_command)
    main.add_command(models_group)
