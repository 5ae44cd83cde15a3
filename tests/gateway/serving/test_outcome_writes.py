"""Only gateway/serving/record/outcome.py writes an ``Outcome`` (issue 50, item 3): every other
module reads it or calls its methods, so what a request's record says is decided in one place.

An AST walk, like tests/gateway/test_layers.py: an Outcome is a name ``out`` or ``outcome``,
a parameter annotated ``Outcome``, or an attribute ``.out`` (``Frame.out``, a relay's ``out``);
a write is an assignment (``=``, ``+=``, ``del``) to something reached through one of its
attributes (``out.x = ...``, ``out.attempts[-1]["error"] = ...``), a mutating call on one
(``out.cache.chunks.append(...)``), or ``setattr(out, ...)``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HOME = ROOT / "gateway" / "serving" / "record" / "outcome.py"
NAMES = frozenset({"out", "outcome"})
MUTATORS = frozenset({"append", "extend", "insert", "remove", "pop", "clear", "update",
                      "setdefault", "popitem", "add", "discard", "sort", "reverse"})


def _annotated_outcomes(tree: ast.AST) -> set[str]:
    """Names of parameters annotated ``Outcome`` anywhere in the module."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None and \
                "Outcome" in ast.unparse(node.annotation):
            found.add(node.arg)
    return found


def _is_outcome(node: ast.AST, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and node.attr == "out"


def _through_attribute(node: ast.AST, names: set[str]) -> bool:
    """Whether ``node`` is reached from an Outcome through one of its attributes."""
    while isinstance(node, (ast.Attribute, ast.Subscript)):
        if _is_outcome(node.value, names):
            return isinstance(node, ast.Attribute)
        node = node.value
    return False


def writes(source: str) -> list[str]:
    """The Outcome writes in ``source`` (module docstring), as ``line: code``."""
    tree = ast.parse(source)
    names = NAMES | _annotated_outcomes(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr in MUTATORS and \
                    _through_attribute(f.value, names):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
            if isinstance(f, ast.Name) and f.id == "setattr" and node.args and \
                    _is_outcome(node.args[0], names):
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
        found += [f"{node.lineno}: {ast.unparse(t)}" for t in flat
                  if _through_attribute(t, names)]
    return found


def test_only_the_outcome_module_writes_an_outcome():
    offenders = {str(p.relative_to(ROOT)): w for p in sorted((ROOT / "gateway").rglob("*.py"))
                 if p != HOME and (w := writes(p.read_text()))}
    assert offenders == {}


def test_the_check_sees_each_kind_of_write():
    source = (
        "def f(out, rec: Outcome, other):\n"
        "    out.attribution = 1\n"
        "    out.attempts[-1]['error'] = 'x'\n"
        "    out.cache.chunks.append(2)\n"
        "    rec.cost_usd += 1.0\n"
        "    self.out.plan = None\n"
        "    setattr(out, 'plan', None)\n"
        "    del outcome.plan\n"
        "    out.answered, x = None, 1\n"
    )
    assert len(writes(source)) == 8


def test_the_check_leaves_reads_calls_and_other_objects_alone():
    source = (
        "def f(out, other):\n"
        "    out['model'] = 'm'\n"  # a dict named out: no attribute of it
        "    out.setdefault('k', 1)\n"
        "    out.finish(200, None)\n"
        "    out.hold.ensure(1.0)\n"
        "    self.out = Outcome()\n"
        "    other.plan = None\n"
        "    x = out.attempts[-1]['error']\n"
    )
    assert writes(source) == []
