"""``tollgate eval``: every router on one dataset and split, a table, JSON and a plot."""

from __future__ import annotations

import json
from pathlib import Path

import click

from router_core.encoders import bulk_encoder
from router_core.encoders.cli_option import encoder_option


@click.command("eval")
@click.option(
    "--dataset",
    required=True,
    help="routerbench | mmlu-pro | llmrouter, or a CSV/JSONL/Parquet long-format file; all: "
    "train one router on the three together and score it on each beside the others.",
)
@click.option(
    "--split",
    default="standard",
    show_default=True,
    type=click.Choice(["standard", "ood", "unseen-models"]),
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Benchmark data folder (default: $TOLLGATE_DATA_DIR or ../shared/data).",
)
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--routers",
    default=",".join(
        ("oracle", "random", "cheapest", "best_single", "single_frontier", "category")
        + ("knn", "mlp", "umr", "shared_trunk")
        + ("vanilla", "no_caro", "tollgate")
    ),
    show_default=True,
    help="Comma-separated subset of routers to evaluate.",
)
@click.option(
    "--models",
    default=None,
    help="Comma-separated models to keep (default: all); the pool the routers choose from.",
)
@click.option("--bootstrap", type=int, default=1000, show_default=True, help="CI replicates.")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a TrainConfig field for vanilla/no_caro/tollgate, e.g. --set epochs=5.",
)
@click.option(
    "--descriptor",
    default="probe-outcome",
    show_default=True,
    type=click.Choice(["probe-outcome", "perplexity", "perplexity-prompt"]),
    help="How Tollgate describes experts: probe outcomes, or perplexity fingerprints of the "
    "recorded answers (CSCR Eq. 5; perplexity-prompt conditions the scorer on the probe).",
)
@click.option(
    "--scorer",
    default=None,
    help="Scorer LM for perplexity fingerprints (default: SmolLM2-135M, offline).",
)
@encoder_option("Query encoder Φ: every router is trained and tested on its vectors.")
@click.option("--quiet", is_flag=True, help="No progress bars or log lines.")
def eval_command(
    dataset: str,
    split: str,
    data_dir: Path | None,
    json_path: Path | None,
    plot_path: Path | None,
    seed: int,
    routers: str,
    models: str | None,
    bootstrap: int,
    overrides: tuple[str, ...],
    descriptor: str,
    scorer: str | None,
    encoder_kind: str,
    quiet: bool,
) -> None:
    """Evaluate Tollgate and the baselines on one split: AUDC, QNC, peak, overpayment."""
    from router_core.data import ALL, load_dataset
    from router_core.evaluation.runner import run_evaluation

    train_overrides = {}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        try:
            train_overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            train_overrides[key] = raw  # a bare string such as a loss name
    names = [r.strip() for r in routers.split(",") if r.strip()]
    if dataset.lower() == ALL:
        if split != "standard" or models or descriptor != "probe-outcome" or plot_path:
            raise click.UsageError(
                "--dataset all takes the standard split, every model, probe-outcome "
                "descriptors and no --plot"
            )
        encoder = bulk_encoder(encoder_kind)
        _eval_all(names, seed, data_dir, bootstrap, train_overrides, quiet, json_path, encoder)
        return
    try:
        table = load_dataset(dataset, split=split, data_dir=data_dir, seed=seed)
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    if models:
        keep = [m.strip() for m in models.split(",") if m.strip()]
        unknown = sorted(set(keep) - set(table.models))
        if unknown:
            raise click.BadParameter(f"unknown models {unknown}", param_hint="--models")
        table = table.with_models(keep)
    try:
        result = run_evaluation(
            table,
            routers=names,
            seed=seed,
            n_boot=bootstrap,
            train_overrides=train_overrides,
            progress=not quiet,
            log=(lambda _msg: None) if quiet else None,
            descriptor=_descriptor(descriptor, scorer),
            encoder=bulk_encoder(encoder_kind),
        )
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(result.table())
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result.to_json(), indent=2) + "\n")
        click.echo(f"wrote {json_path}")
    if plot_path is not None:
        from router_core.evaluation.plot import plot_deferral_curves

        m = result.metrics
        plot_deferral_curves(
            {k: v.curve for k, v in m.items()},
            plot_path,
            c_min=result.reference.c_min,
            c_max=result.reference.c_max,
            title=f"{result.dataset} / {result.split} ({result.n_test} test prompts)",
            points={k: v.points for k, v in m.items()},
            audc={k: v.audc for k, v in m.items()},
        )
        click.echo(f"wrote {plot_path}")


def _eval_all(names, seed, data_dir, bootstrap, train_overrides, quiet, json_path, encoder) -> None:
    """The combined router beside every router of each dataset (evaluation/combined.py)."""
    from router_core.evaluation.combined import COMBINED, evaluate_combined

    try:
        ev = evaluate_combined(
            routers=names,
            seed=seed,
            data_dir=data_dir,
            encoder=encoder,
            n_boot=bootstrap,
            train_overrides=train_overrides,
            progress=not quiet,
            log=(lambda _msg: None) if quiet else None,
        )
    except (ValueError, FileNotFoundError) as exc:
        raise click.ClickException(str(exc)) from exc
    for result in ev.results.values():
        click.echo(result.table() + "\n")
    click.echo(f"{'dataset':<12} {'tollgate':>9} {COMBINED:>13} {'delta':>8}")
    for name, single, combined in ev.rows():
        s = "-" if single is None else f"{single:.4f}"
        d = "-" if single is None else f"{combined - single:+.4f}"
        click.echo(f"{name:<12} {s:>9} {combined:13.4f} {d:>8}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        body = {name: r.to_json() for name, r in ev.results.items()}
        json_path.write_text(json.dumps(body, indent=2) + "\n")
        click.echo(f"wrote {json_path}")


def _descriptor(name: str, scorer: str | None):
    """None (the trainer's default, probe outcomes) or a fingerprint kind."""
    if name == "probe-outcome":
        return None
    from router_core.fingerprints import make_descriptor

    return make_descriptor(name, scorer=scorer)
