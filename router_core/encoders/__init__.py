"""Query encoders Φ by kind: a router records the kind it was trained with, and serving
rebuilds exactly that encoder from the record.

A new kind is one module with a ``CachedEncoder`` subclass and one entry in ``_KINDS``.
Modules are imported only when their kind is asked for, so serving with an encoder that
does not need torch never imports it.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from router_core.encoders.base import CachedEncoder

# kind -> "module:class"
_KINDS: dict[str, str] = {
    "minilm": "router_core.encoders.minilm:Encoder",
    "minilm-onnx": "router_core.encoders.minilm_onnx:MiniLMOnnxEncoder",
    "minilm-onnx-int8": "router_core.encoders.minilm_onnx_int8:MiniLMOnnxInt8Encoder",
    "minilm-static": "router_core.encoders.minilm_static:MiniLMStaticEncoder",
    "activations": "router_core.encoders.activations:ActivationEncoder",
    "both": "router_core.encoders.both:ConcatEncoder",
}

# what `tollgate train` and `tollgate eval` embed with unless told otherwise: by issue 15's
# rule, the fastest kind whose routing AUDC is within 0.005 of torch MiniLM's on RouterBench,
# MMLU-Pro and LLMRouter (bench/encoders.py; docs/training-record.md has the table)
DEFAULT_KIND = "minilm-onnx-int8"


def known_kinds() -> tuple[str, ...]:
    return tuple(_KINDS)


def encoder_class(kind: str) -> type[CachedEncoder]:
    if kind not in _KINDS:
        raise ValueError(f"unknown encoder kind {kind!r}; known: {', '.join(_KINDS)}")
    module, _, name = _KINDS[kind].partition(":")
    return getattr(importlib.import_module(module), name)


def make_encoder(
    settings: Mapping[str, Any] | str | None = None,
    *,
    cache: bool = False,
    cache_dir: Path | None = None,
    **options: Any,
) -> CachedEncoder:
    """The encoder ``settings`` describe (a kind name, or ``CachedEncoder.settings()``);
    ``options`` (e.g. ``threads``) are runtime choices that do not change the vectors."""
    if settings is None or isinstance(settings, str):
        settings = {"kind": settings or DEFAULT_KIND}
    cls = encoder_class(str(settings.get("kind", "minilm")))
    return cls.from_settings(settings, cache=cache, cache_dir=cache_dir, **options)


def bulk_encoder(kind: str | None = None, **options: Any) -> CachedEncoder:
    """An encoder for embedding datasets (training, evaluation): with the disk cache, and as
    many threads as cores (serving's encoders use one, see ``MiniLMOnnxEncoder``)."""
    return make_encoder(kind, cache=True, **{"threads": 0, **options})


def encoder_for_router(
    config: Mapping[str, Any], *, cache: bool = False, **options: Any
) -> CachedEncoder:
    """The encoder a router was trained with (``Router.config["encoder"]``). Artifacts from
    before kinds were recorded used torch MiniLM; from before the truncation side was
    recorded, right-truncated texts."""
    recorded = dict(config.get("encoder") or {})
    recorded.setdefault("kind", "minilm")
    recorded.setdefault("truncation_side", "right")
    return make_encoder(recorded, cache=cache, **options)


__all__ = [
    "DEFAULT_KIND",
    "CachedEncoder",
    "bulk_encoder",
    "encoder_class",
    "encoder_for_router",
    "known_kinds",
    "make_encoder",
]
