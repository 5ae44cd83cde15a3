"""The layers of router_core/ (docs/architecture.md): a package, a top-level module, or a
module of a group (runtime/, tuning/, env/: code grouped by when it runs, each module its own
layer) imports only layers below it, lazy imports inside functions included; the gateway side
is tests/gateway/test_layers.py, which also holds that router_core never imports gateway."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GROUPS = ("runtime", "tuning", "env")  # grouped by when code runs, not by layer
RANK = {
    # leaves: nothing of router_core below them
    "runtime.decision": 0, "runtime.margin": 0,
    "env.sqlite_cache": 0, "env.litellm_env": 0, "env.hub_reach": 0,
    "identity": 0,
    "losses": 0, "baselines": 0,
    "runtime.router": 1,
    "artifact": 2, "tuning.calibration_fit": 2, "tuning.lambda_choice": 2, "data": 2,
    "descriptors": 3, "cold_start": 3,
    "fingerprints": 4,
    "encoders": 5,
    "training": 6,
    "promise": 7, "tuning.cascade_fit": 7,
    "evaluation": 8, "tuning.promise_measure": 8,
    "cli": 9,
}


def _layer(module: str) -> str | None:
    """``router_core.training.fit`` -> ``training``; in a group, ``router_core.runtime.router``
    -> ``runtime.router`` (the group's own ``__init__`` -> ``runtime``)."""
    parts = module.split(".")
    if len(parts) < 2 or parts[0] != "router_core":
        return None
    if parts[1] not in GROUPS or parts[2:] in ([], ["__init__"]):
        return parts[1]
    return ".".join(parts[1:3])


def _imports(path: Path) -> list[str]:
    """Modules imported by ``path``, outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    typing_only = {id(sub) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for sub in ast.walk(node)}
    found: list[str] = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            found.append(node.module)
            if node.module == "router_core" or node.module.removeprefix("router_core.") in GROUPS:
                found += [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found


def _modules() -> list[tuple[str, Path]]:
    return [(".".join(p.relative_to(ROOT).with_suffix("").parts), p)
            for p in sorted((ROOT / "router_core").rglob("*.py"))]


def _upward_imports() -> list[str]:
    bad = []
    for module, path in _modules():
        here = _layer(module)
        if here in (None, "__init__", *GROUPS):
            continue
        assert here in RANK, f"{module}: layer {here!r} has no rank in docs/architecture.md"
        for name in _imports(path):
            there = _layer(name)
            if there in (None, here):
                continue
            if RANK[there] >= RANK[here]:
                bad.append(f"{module} imports {name}")
    return bad


def test_no_layer_imports_a_layer_above_or_beside_it():
    assert _upward_imports() == []


def test_no_private_name_is_imported_across_modules():
    offenders = [f"{module}: {node.module}.{a.name}"
                 for module, path in _modules()
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("router")
                 for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []


def test_the_check_sees_a_lazy_import(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from router_core.training import train_router\n")
    assert "router_core.training" in _imports(bad)
