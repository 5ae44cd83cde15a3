"""Versioned router artifacts: a directory loadable without the training code.

Layout of ``DIR``:
    router.json   version, created_at, config, experts (name, cost_usd, kind), calibration,
                  head activation, training metrics, training-data hash, probe-set info
    arrays.npz    head.{i}.weight / head.{i}.bias, descriptors (m, d), and with an encoder
                  cascade (router_core/tuning/cascade_fit.py) its static head, cascade.head.{i}.*
                  (float16, widened to float32 at load)
    probes.json   the probe prompts (ids and text) the descriptors were computed on
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from router_core.runtime.router import CASCADE_DTYPE, Calibration, Cascade, Expert, Head, Router

FORMAT = 1
DEFAULT_ROUTER_DIR = Path(__file__).parent / "default_router"
# RouterBench only, experts by RouterBench's names: what `tollgate demo` routes with
ROUTERBENCH_ROUTER_DIR = Path(__file__).parent / "routerbench_router"


def save_router(
    router: Router,
    path: str | Path,
    *,
    metrics: Mapping[str, Any] | None = None,
    data_hash: str | None = None,
    probes: list[dict] | None = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``router`` to ``path`` atomically (a temp dir renamed into place)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    tmp.chmod(0o755)  # mkdtemp makes it owner-only; a server running as another user reads it
    arrays: dict[str, np.ndarray] = {}
    for i, (w, b) in enumerate(router.head.layers):
        arrays[f"head.{i}.weight"] = np.asarray(w, dtype=np.float32)
        arrays[f"head.{i}.bias"] = np.asarray(b, dtype=np.float32)
    arrays["descriptors"] = (
        np.stack([e.descriptor for e in router.experts]).astype(np.float32)
        if router.experts
        else np.zeros((0, router.head.out_dim), dtype=np.float32)
    )
    if router.cascade is not None:
        for i, (w, b) in enumerate(router.cascade.head.layers):
            arrays[f"cascade.head.{i}.weight"] = np.asarray(w, dtype=CASCADE_DTYPE)
            arrays[f"cascade.head.{i}.bias"] = np.asarray(b, dtype=CASCADE_DTYPE)
    np.savez(tmp / "arrays.npz", **arrays)
    old = load_meta(path) if (path / "router.json").exists() else {}
    meta = {
        "format": FORMAT,
        "version": router.version,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "k": router.k,
        "delta": router.delta,
        "config": dict(router.config),
        "head": {"activation": router.head.activation, "n_layers": len(router.head.layers)},
        "experts": [
            {"name": e.name, "cost_usd": float(e.cost_usd), "kind": e.kind}
            for e in router.experts
        ],
        "calibration": {
            "a": dict(router.calibration.a),
            "b": dict(router.calibration.b),
            "a0": router.calibration.a0,
            "b0": router.calibration.b0,
        },
        "metrics": dict(metrics if metrics is not None else old.get("metrics", {})),
        "data_hash": data_hash if data_hash is not None else old.get("data_hash"),
        **({"cascade": router.cascade.settings()} if router.cascade is not None else {}),
        **dict(extra or {}),
    }
    (tmp / "router.json").write_text(json.dumps(meta, indent=2, default=float))
    if probes is not None:
        (tmp / "probes.json").write_text(json.dumps(probes))
    elif (path / "probes.json").exists():
        (tmp / "probes.json").write_text((path / "probes.json").read_text())
    if path.exists():
        trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.old.", dir=path.parent))
        os.replace(path, trash / "x")
        os.replace(tmp, path)
        _rmtree(trash)
    else:
        os.replace(tmp, path)
    return path


def _rmtree(p: Path) -> None:
    import shutil

    shutil.rmtree(p, ignore_errors=True)


def load_meta(path: str | Path) -> dict:
    return json.loads((Path(path) / "router.json").read_text())


def load_probes(path: str | Path) -> list[dict]:
    f = Path(path) / "probes.json"
    return json.loads(f.read_text()) if f.exists() else []


def load_router(path: str | Path | None = None) -> Router:
    """Load an artifact directory (default: the packaged router)."""
    path = Path(path) if path is not None else DEFAULT_ROUTER_DIR
    meta = load_meta(path)
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: unsupported artifact format {meta.get('format')}")
    with np.load(path / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    head = _head(arrays, "head", meta["head"])
    experts = tuple(
        Expert(name=e["name"], descriptor=arrays["descriptors"][i], cost_usd=e["cost_usd"],
               kind=e.get("kind", "probe-outcome"))
        for i, e in enumerate(meta["experts"])
    )
    cal = meta["calibration"]
    return Router(
        version=meta["version"],
        head=head,
        experts=experts,
        calibration=Calibration(a=cal["a"], b=cal["b"], a0=cal["a0"], b0=cal["b0"]),
        k=meta.get("k", 4),
        delta=meta.get("delta", 0.02),
        config=meta.get("config", {}),
        cascade=_cascade(arrays, meta.get("cascade")),
    )


def _head(arrays: Mapping[str, np.ndarray], prefix: str, spec: Mapping[str, Any]) -> Head:
    # float32 whatever it was stored in (the cascade's head is float16 on disk: CASCADE_DTYPE)
    layers = tuple((arrays[f"{prefix}.{i}.weight"].astype(np.float32, copy=False),
                    arrays[f"{prefix}.{i}.bias"].astype(np.float32, copy=False))
                   for i in range(int(spec["n_layers"])))
    return Head(layers=layers, activation=spec["activation"])


def _cascade(arrays: Mapping[str, np.ndarray], spec: Mapping[str, Any] | None
             ) -> Cascade | None:
    if not spec:
        return None
    return Cascade(head=_head(arrays, "cascade.head", spec["head"]),
                   threshold=float(spec["threshold"]), encoder=dict(spec["encoder"]),
                   fit=dict(spec.get("fit") or {}))
