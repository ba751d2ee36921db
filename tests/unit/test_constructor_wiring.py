"""The runtime is wired through constructors: no callback, observer or listener is assigned to
another object after it was made (docs/architecture.md, "Wiring").

An AST check over `launch_agent/runtime/`. It flags an assignment to an attribute of an object
other than `self` (or to `self.x.y`) when the attribute is named like a callback (`on_*`,
`observer`, `listener`, `callback`, `hook`, `transform`, `wake`) or the value is callable
(a lambda, a `functools.partial`, a bound method `x.y` where `y` is a method name, or a function
defined in the package) or one of the wiring object's own collaborators (`other.x = self.y`);
calls of another object's callback setters (`runs.set_listener(...)`); and callback names
assigned on `self` outside `__init__` (rewiring an object after its construction). Data
attributes of records (`record.state = ...`) stay free.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "launch_agent" / "runtime"
PACKAGE = ROOT / "launch_agent"

CALLBACK_NAME = re.compile(
    r"^(on_.*|.*observers?|.*listeners?|.*callbacks?|.*hooks?|transform|wake)$"
)
# Methods of the standard objects the runtime hands around as callbacks (asyncio.Event, Queue).
STDLIB_METHODS = frozenset({"set", "clear", "put_nowait", "cancel", "append"})


@functools.cache
def package_functions() -> frozenset[str]:
    """Names of every function and method defined in the package (callable if referenced)."""
    names: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(node.name)
    return frozenset(names)


def _callable_value(value: ast.expr | None, functions: frozenset[str]) -> bool:
    if value is None:
        return False
    if isinstance(value, ast.Lambda):
        return True
    if isinstance(value, ast.Call):
        func = value.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name == "partial"
    if isinstance(value, ast.Attribute):
        return value.attr in functions or value.attr in STDLIB_METHODS
    if isinstance(value, ast.Name):
        return _is_def(value.id, functions)
    return False


def _is_def(name: str, functions: frozenset[str]) -> bool:
    # A bare name that is a function of the package (`tracking_view`), not a local variable that
    # happens to share a method's name (`obj`, `now`): only names with an underscore count.
    return name in functions and "_" in name.strip("_")


def _collaborator(value: ast.expr | None) -> bool:
    """`other.x = self.y`: one of the wiring object's collaborators handed over afterwards."""
    return isinstance(value, ast.Attribute) and _is_self(value.value)


SETTER = re.compile(r"^(set|add|install)_(on_\w+|\w*listener|\w*observer|\w*callback|\w*hook)$")


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def wiring_violations(source: str, where: str, functions: frozenset[str]) -> list[str]:
    found: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        line = getattr(node, "lineno", 0)
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets, value = [node.target], node.value
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            named = bool(CALLBACK_NAME.match(target.attr))
            text = f"{where}:{line}: {ast.unparse(target)} = {ast.unparse(value or target)}"
            if _is_self(target.value):
                if named and function not in ("__init__", None):
                    found.append(f"{text} (rewired outside __init__)")
            elif named or _callable_value(value, functions) or _collaborator(value):
                found.append(text)
        func = node.func if isinstance(node, ast.Call) else None
        if isinstance(func, ast.Attribute) and SETTER.match(func.attr) and not _is_self(func.value):
            found.append(f"{where}:{line}: {ast.unparse(node)} (a setter for a callback)")
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "setattr"
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and CALLBACK_NAME.match(str(node.args[1].value))
        ):
            found.append(f"{where}:{line}: {ast.unparse(node)}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source), None)
    return found


def test_nothing_in_the_runtime_is_wired_after_construction() -> None:
    functions = package_functions()
    found: list[str] = []
    for path in sorted(RUNTIME.rglob("*.py")):
        found += wiring_violations(path.read_text(), str(path.relative_to(ROOT)), functions)
    assert found == [], "pass these to the constructor instead:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        # What the runtime did before it was wired through constructors.
        "self.quota.on_room = poller.wake.set",
        "admission.on_change = self.wake.set",
        "tracker.observer = self.quota.observe",
        "settings.transform = tracking_view",
        "self.runs.listener = poller.wake.set",
        "dispatcher.finish = lambda record: None",
        "client.notify = functools.partial(report, 'x')",
        "setattr(tracker, 'observer', observe)",
        "self.runs.set_listener(poller.wake.set)",
        "dispatcher.quota = self.quota",
    ],
)
def test_the_check_catches_wiring_by_assignment(line: str) -> None:
    source = f"def build(self):\n    {line}\n"
    assert wiring_violations(source, "x.py", package_functions()), line


def test_rewiring_self_after_construction_is_caught_and_data_is_not() -> None:
    source = (
        "class A:\n"
        "    def __init__(self, on_change):\n"
        "        self.on_change = on_change\n"
        "    def later(self, record, obj):\n"
        "        self.on_change = print\n"
        "        record.state = obj\n"
        "        record.acked = True\n"
        "        self.runs.dispatching += 1\n"
    )
    found = wiring_violations(source, "x.py", package_functions())
    assert found == ["x.py:5: self.on_change = print (rewired outside __init__)"]
