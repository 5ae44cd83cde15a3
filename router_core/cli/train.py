"""``tollgate train``: fit a router on a dataset and write a versioned artifact directory."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import click

from router_core.encoders import bulk_encoder
from router_core.encoders.cli_option import encoder_option


@click.command("train")
@click.option(
    "--dataset",
    required=True,
    help="routerbench | mmlu-pro | llmrouter | all (the three in one router, experts named by "
    "canonical id), or a CSV/JSONL/Parquet long-format file.",
)
@click.option(
    "--split", default="standard", show_default=True, help="standard | ood | unseen-models"
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Benchmark data folder (default: $TOLLGATE_DATA_DIR or ../shared/data).",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Artifact directory to write (replaced atomically).",
)
@click.option(
    "--descriptor",
    default="probe-outcome",
    show_default=True,
    help="Descriptor kind (router_core.descriptors.known_kinds()).",
)
@click.option(
    "--loss",
    type=click.Choice(["cscr", "vanilla"]),
    default="cscr",
    show_default=True,
    help="Eq. 8 cost-spectrum InfoNCE, or plain InfoNCE.",
)
@click.option("--no-caro", is_flag=True, help="Drop the CARO ranking term (ablation).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override any TrainConfig field, e.g. --set epochs=30 --set k=11.",
)
@encoder_option("Query encoder Φ (recorded in the artifact; the gateway serves with the same one).")
@click.option("--quiet", is_flag=True, help="No progress bar.")
def train_command(
    dataset: str,
    split: str,
    data_dir: Path | None,
    out: Path,
    descriptor: str,
    loss: str,
    no_caro: bool,
    seed: int,
    overrides: tuple[str, ...],
    encoder_kind: str,
    quiet: bool,
) -> None:
    """Train a Tollgate router (CSCR head + calibration) and save it to OUT."""
    from router_core.data import ALL, load_dataset
    from router_core.descriptors import get_kind
    from router_core.training import TrainConfig, train_router

    fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    values: dict = {"loss": loss, "use_caro": not no_caro, "seed": seed, "progress": not quiet}
    for item in overrides:
        key, _, raw = item.partition("=")
        if key not in fields:
            raise click.BadParameter(f"unknown TrainConfig field {key!r}", param_hint="--set")
        values[key] = json.loads(raw) if raw not in ("cscr", "vanilla") else raw
    table = load_dataset(dataset, split=split, data_dir=data_dir)
    config, kind = TrainConfig(**values), get_kind(descriptor)()
    encoder = bulk_encoder(encoder_kind)
    if table.name == ALL:  # n_probes from each dataset's training prompts
        from router_core.evaluation.combined import train_combined

        result = train_combined(table, config, descriptor=kind, encoder=encoder)
    else:
        result = train_router(table, config, descriptor=kind, encoder=encoder)
    path = result.save(out)
    m = result.metrics
    click.echo(
        f"wrote {path} (version {result.router.version}; {len(result.router.experts)} models, "
        f"{m['n_train']} train / {m['n_val']} val prompts, best epoch {m['best_epoch']}, "
        f"{m['train_seconds']} s)"
    )
