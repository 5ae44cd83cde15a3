"""Build the model exports that the ONNX and static encoders run from (needs torch).

    python -m router_core.encoders.build [KIND ...] [--cache-dir DIR]
    python -m router_core.encoders.build --defaults   # the default kind and the shipped routers'

(``scripts/install.sh`` runs the second, so a fresh install serves without building at first
use; the packaged MiniLM is the only input, no network.)

- ``minilm-onnx``: MiniLM with its mean pooling and L2 normalisation, exported with
  ``torch.onnx.export`` (torch is installed anyway; optimum would add a dependency for the
  same graph), dynamic batch and sequence axes, plus the tokenizer.
- ``minilm-onnx-int8``: that graph with ONNX Runtime's dynamic int8 quantisation of the
  weights, per output channel (activations are quantised on the fly).
- ``minilm-static``: a model2vec static embedding distilled from the packaged MiniLM (one
  forward pass per vocabulary token, PCA to 256 dims, SIF weighting), no hub access.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from router_core.encoders.base import HUB_ID, default_cache_dir
from router_core.encoders.exports import EXPORT_NAMES, PACKAGED_DIR, build_lock
from router_core.encoders.minilm import default_model_path

ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _write_onnx_fp32(out: Path, cache_dir: Path) -> None:
    import torch
    from transformers import AutoModel

    source = default_model_path()
    model = AutoModel.from_pretrained(source).eval()

    class Pooled(torch.nn.Module):
        """MiniLM -> masked mean of the last hidden states -> unit vector (as in S-BERT)."""

        def __init__(self, bert: torch.nn.Module) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            weight = attention_mask.unsqueeze(-1).to(hidden.dtype)
            mean = (hidden * weight).sum(1) / weight.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(mean, dim=-1)

    example = torch.ones(2, 8, dtype=torch.long)
    axes = {name: {0: "batch", 1: "sequence"} for name in ONNX_INPUTS}
    with torch.no_grad():
        torch.onnx.export(
            Pooled(model),
            (example, torch.ones_like(example), torch.zeros_like(example)),
            str(out / "model.onnx"),
            input_names=list(ONNX_INPUTS),
            output_names=["embedding"],
            dynamic_axes={**axes, "embedding": {0: "batch"}},
            opset_version=17,
            dynamo=False,  # the TorchScript exporter: no onnxscript dependency
        )
    shutil.copy(Path(source) / "tokenizer.json", out / "tokenizer.json")


def _write_onnx_int8(out: Path, cache_dir: Path) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32 = build("minilm-onnx", cache_dir)
    quantize_dynamic(
        fp32 / "model.onnx", out / "model.onnx", per_channel=True, weight_type=QuantType.QInt8
    )
    shutil.copy(fp32 / "tokenizer.json", out / "tokenizer.json")


STATIC_FILES = ("config.json", "model.safetensors", "tokenizer.json")  # what loading reads


def _write_static(out: Path, cache_dir: Path) -> None:
    from model2vec.distill import distill

    static = distill(default_model_path(), pca_dims=256, device="cpu")
    static.save_pretrained(str(out))
    _tidy_static(out)


def _tidy_static(path: Path) -> None:
    """Keep only what loading reads, and no path of the machine that distilled it."""
    for extra in {p.name for p in path.iterdir()} - set(STATIC_FILES):
        (path / extra).unlink()
    config = json.loads((path / "config.json").read_text())
    config["tokenizer_name"] = HUB_ID
    (path / "config.json").write_text(json.dumps(config, indent=4) + "\n")


_WRITERS: dict[str, Callable[[Path, Path], None]] = {
    "minilm-onnx": _write_onnx_fp32,
    "minilm-onnx-int8": _write_onnx_int8,
    "minilm-static": _write_static,
}


def build(kind: str, cache_dir: Path | None = None, force: bool = False) -> Path:
    """Write ``kind``'s export under ``cache_dir`` (skipped when present) and return its dir."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    with build_lock(kind, cache_dir) as path:
        if path.is_dir() and not force:
            return path
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            _WRITERS[kind](tmp, cache_dir)
            if path.is_dir():
                shutil.rmtree(path)
            os.replace(tmp, path)  # readers see a complete export or none
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return path


def package(kind: str, cache_dir: Path | None = None) -> Path:
    """Copy ``kind``'s export (built if missing) into the package, where it is used first."""
    source = build(kind, cache_dir)
    target = PACKAGED_DIR / source.name
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    if kind == "minilm-static":
        _tidy_static(target)
    return target


def default_kinds() -> list[str]:
    """What a fresh install embeds with: the registry's default kind (``tollgate train`` and
    ``eval``) and the kinds the packaged routers were trained on (as their artifacts record)."""
    from router_core.artifact import DEFAULT_ROUTER_DIR, ROUTERBENCH_ROUTER_DIR, load_meta
    from router_core.encoders import DEFAULT_KIND

    kinds = [DEFAULT_KIND]
    for path in (DEFAULT_ROUTER_DIR, ROUTERBENCH_ROUTER_DIR):
        kind = dict(load_meta(path)["config"].get("encoder") or {}).get("kind", "minilm")
        if kind not in kinds:
            kinds.append(kind)
    return kinds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kinds", nargs="*", metavar="KIND", help="encoder kinds (default: all)")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--force", action="store_true", help="rebuild even when present")
    parser.add_argument(
        "--package", action="store_true", help="also copy the export into router_core's package"
    )
    parser.add_argument(
        "--defaults",
        action="store_true",
        help="build the default kind's export and those the packaged routers record",
    )
    args = parser.parse_args(argv)
    from router_core.encoders import known_kinds

    unknown = sorted(set(args.kinds) - set(known_kinds()))
    if unknown:
        parser.error(f"unknown kinds {unknown}; known: {', '.join(known_kinds())}")
    kinds = [*args.kinds, *(default_kinds() if args.defaults else [])]
    for kind in kinds or list(EXPORT_NAMES):
        if kind not in EXPORT_NAMES:
            print(f"{kind}: runs from the installed packages, nothing to build")
            continue
        path = build(kind, args.cache_dir, force=args.force)
        if args.package:
            path = package(kind, args.cache_dir)
        size = sum(f.stat().st_size for f in path.iterdir()) / 1e6
        print(f"{kind}: {path} ({size:.1f} MB)")


if __name__ == "__main__":
    main()
