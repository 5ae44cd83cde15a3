"""The rooms of gateway/ and of gateway/serving/ (docs/architecture.md): a room imports only
rooms below it, lazy imports inside functions included, and router_core never imports gateway;
no module runs past 400 lines but a named few being split."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RANK = {"store": 0, "config": 1, "errors": 1, "pricing": 1, "prompt_tokens": 1, "price_like": 1, "context": 1, "auth": 1,
        "litellm_sections": 1, "provider": 1, "seams": 1,
        "reliability": 2, "pool": 3, "serving": 4, "learning": 5, "review": 6, "admin": 6, "app": 7,
        "sandbox": 8, "cli": 9}
# gateway/serving/'s rooms (a subpackage, or a module at its top level), in the order a request
# meets them; rooms of one rank never import each other (no endpoint room imports another)
SERVING_RANK = {"budget": 0, "tracing": 0, "response_headers": 0,  # held money; spans; headers
                "request": 1,  # the body read: what every endpoint shares
                "plan": 2, "forwarding": 3, "record": 4,
                "endpoint": 5, "delivery": 5, "body_limit": 5,  # the frame: refused, answered
                "named_call": 5,  # the one call of a request answered by the backend it names
                "chat": 7, "responses": 7, "completions": 7, "messages": 7, "embeddings": 7,
                "units": 7,  # the endpoints
                "more_routes": 8, "models_endpoint": 8}  # the route tables


# a module past this many lines holds more than one concept: split it by concept
MAX_LINES = 400
# the modules still past it: none now (a module that grows past it is split by concept)
LONG_MODULES: set[str] = set()


def _room(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "gateway" else None


def _serving_room(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["gateway", "serving"] else None


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
            if node.module in ("gateway", "gateway.serving"):
                found += [f"{node.module}.{a.name}" for a in node.names
                          if not a.name.startswith("__")]  # __version__ is no room
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names]
    return found


def _upward_imports() -> list[str]:
    bad = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        here = _room(module)
        if here in (None, "__init__"):
            continue
        assert here in RANK, f"{module}: room {here!r} has no rank in docs/architecture.md"
        for name in _imports(path):
            there = _room(name)
            if there in (None, here, "__init__"):
                continue
            if RANK[there] > RANK[here] or (RANK[there] == RANK[here] and RANK[here] != 1):
                bad.append(f"{module} imports {name}")
    return bad


def _serving_crossings(module: str, imported: list[str]) -> list[str]:
    """What ``module`` imports from a serving room at or above its own (its own room aside)."""
    here = _serving_room(module)
    if here in (None, "__init__"):
        return []
    assert here in SERVING_RANK, f"{module}: room {here!r} has no rank in docs/architecture.md"
    bad = []
    for name in imported:
        there = _serving_room(name)
        if there in (None, here, "__init__"):
            continue
        if SERVING_RANK[there] >= SERVING_RANK[here]:
            bad.append(f"{module} imports {name}")
    return bad


def _serving_upward_imports() -> list[str]:
    bad = []
    for path in sorted((ROOT / "gateway" / "serving").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        bad += _serving_crossings(module, _imports(path))
    return bad


def test_no_room_imports_a_room_above_it():
    assert _upward_imports() == []


def test_no_room_of_serving_imports_a_room_above_it_or_beside_it():
    assert _serving_upward_imports() == []


def test_the_serving_check_sees_a_cross_room_import(tmp_path):
    """One endpoint room reaching into another, lazily, and a shared room reaching up to the
    frame through the package are both caught; an endpoint's import of request/ is not."""
    beside = tmp_path / "beside.py"
    beside.write_text("def f():\n"
                      "    from gateway.serving.responses.responses_handler import x\n")
    assert _serving_crossings("gateway.serving.messages.m", _imports(beside)) == [
        "gateway.serving.messages.m imports gateway.serving.responses.responses_handler"]
    up = tmp_path / "up.py"
    up.write_text("from gateway.serving import delivery\n"
                  "from gateway.serving.request.chat_request import ChatRequest\n")
    assert _serving_crossings("gateway.serving.plan.m", _imports(up)) == [
        "gateway.serving.plan.m imports gateway.serving.delivery"]
    assert _serving_crossings("gateway.serving.chat.m", _imports(up)) == []


LITELLM_MODULES = ("litellm", "router_core.env.litellm_env")  # the latter: litellm, loaded offline


def _imports_litellm(path: Path) -> bool:
    return any(n in LITELLM_MODULES or n.startswith("litellm.") for n in _imports(path))


def test_only_the_provider_room_imports_litellm():
    """litellm lives behind the upstream seam (gateway/provider/transport.py): every other
    module, lazy imports included, goes through gateway/provider/ (issue 50.2)."""
    outside = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "gateway").rglob("*.py"))
               if "provider" not in p.relative_to(ROOT / "gateway").parts[:1]
               and _imports_litellm(p)]
    assert outside == []
    assert _imports_litellm(ROOT / "gateway/provider/litellm_transport.py")  # the check sees


def test_the_litellm_check_sees_a_lazy_import(tmp_path):
    lazy = tmp_path / "m.py"
    lazy.write_text("def f():\n    from router_core.env.litellm_env import litellm\n")
    other = tmp_path / "n.py"
    other.write_text("import litellm.main\n")
    assert _imports_litellm(lazy) and _imports_litellm(other)


def test_router_core_never_imports_gateway():
    offenders = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "router_core").rglob("*.py"))
                 if any(n == "gateway" or n.startswith("gateway.") for n in _imports(p))]
    assert offenders == []


def test_the_check_sees_an_upward_import(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("def f():\n    from gateway.cli import main\n")
    assert "gateway.cli" in _imports(bad)


def test_no_module_imports_another_modules_private_names():
    """What modules share is public: ``from gateway.x import _name`` couples a module to
    another's internals (issue 38)."""
    found = []
    for top in ("gateway", "router_core"):
        for path in sorted((ROOT / top).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if (isinstance(node, ast.ImportFrom) and node.module
                        and node.module.split(".")[0] in ("gateway", "router_core")):
                    private = [a.name for a in node.names
                               if a.name.startswith("_") and not a.name.startswith("__")]
                    if private:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno} {private}")
    assert found == []


def _long_modules(root: Path) -> set[str]:
    """The modules of gateway/ and router_core/ under ``root`` past ``MAX_LINES`` lines."""
    return {p.relative_to(root).as_posix() for top in ("gateway", "router_core")
            for p in sorted((root / top).rglob("*.py"))
            if len(p.read_text().splitlines()) > MAX_LINES}


def test_no_module_runs_past_400_lines_but_the_named_few():
    assert _long_modules(ROOT) <= LONG_MODULES


def test_the_length_check_sees_a_module_past_400_lines(tmp_path):
    (tmp_path / "gateway" / "room").mkdir(parents=True)
    (tmp_path / "router_core").mkdir()
    (tmp_path / "gateway" / "room" / "long.py").write_text("x = 1\n" * 401)
    (tmp_path / "router_core" / "full.py").write_text("x = 1\n" * 400)
    assert _long_modules(tmp_path) == {"gateway/room/long.py"}
