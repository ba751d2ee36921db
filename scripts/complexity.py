"""The complexity ratchet: no function in `launch_agent/` over ruff's C901 (mccabe) complexity
or over a length in lines, except those listed in `pyproject.toml`, each with its reason.

    python scripts/complexity.py            # `make lint` runs it; exit 1 lists what is wrong

The bars and the list are `[tool.launch-agent.complexity]` in pyproject.toml. The list only
shrinks: a function over a bar that is not listed fails (split it, or list it with why it is
better whole), and so does a listed one that is no longer over any bar (take it off the list),
so the list always says exactly which functions are over and why.
`tests/unit/test_complexity_ratchet.py` runs the same check on the tree and on trees made to
fail it.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class Over:
    """A function over a bar: `where` is `path::Qualified.name`."""

    where: str
    complexity: int | None  # None: within the complexity bar
    lines: int

    def describe(self, max_complexity: int, max_lines: int) -> str:
        parts = []
        if self.complexity is not None:
            parts.append(f"complexity {self.complexity} > {max_complexity}")
        if self.lines > max_lines:
            parts.append(f"{self.lines} lines > {max_lines}")
        return ", ".join(parts)


def _functions(path: Path) -> dict[int, tuple[str, int]]:
    """`def` line -> (qualified name, length in lines) of every function in a module."""
    found: dict[int, tuple[str, int]] = {}

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                end = child.end_lineno or child.lineno
                found[child.lineno] = (name, end - child.lineno + 1)
                walk(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                walk(child, f"{prefix}{child.name}.")
            else:
                walk(child, prefix)

    walk(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def _ruff() -> str:
    beside = Path(sys.executable).with_name("ruff")
    return str(beside) if beside.exists() else "ruff"


def _complexities(root: Path, package: str, max_complexity: int) -> dict[tuple[str, int], int]:
    """(module path, `def` line) -> complexity, for every function over `max_complexity`."""
    command = [
        _ruff(),
        "check",
        package,
        "--isolated",
        "--select",
        "C901",
        "--config",
        f"lint.mccabe.max-complexity={max_complexity}",
        "--output-format",
        "json",
        "--exit-zero",
    ]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True)
    out: dict[tuple[str, int], int] = {}
    for finding in json.loads(done.stdout):
        # "`name` is too complex (23 > 15)"
        value = int(finding["message"].rsplit("(", 1)[1].split(" ", 1)[0])
        where = Path(finding["filename"]).resolve().relative_to(root.resolve()).as_posix()
        out[(where, finding["location"]["row"])] = value
    return out


def over_the_bars(root: Path, package: str, max_complexity: int, max_lines: int) -> list[Over]:
    complex_ = _complexities(root, package, max_complexity)
    found = []
    for path in sorted((root / package).rglob("*.py")):
        module = path.relative_to(root).as_posix()
        for line, (name, lines) in _functions(path).items():
            complexity = complex_.get((module, line))
            if complexity is not None or lines > max_lines:
                found.append(Over(f"{module}::{name}", complexity, lines))
    return found


def check(root: Path = ROOT) -> list[str]:
    """Every way the tree at `root` breaks the ratchet (empty: it holds)."""
    with (root / "pyproject.toml").open("rb") as f:
        table = tomllib.load(f)["tool"]["launch-agent"]["complexity"]
    max_complexity, max_lines = int(table["max-complexity"]), int(table["max-lines"])
    allowed: dict[str, str] = dict(table.get("allowed", {}))
    problems = []
    over = {o.where: o for o in over_the_bars(root, table["package"], max_complexity, max_lines)}
    for where, found in sorted(over.items()):
        if where not in allowed:
            problems.append(
                f"{where}: {found.describe(max_complexity, max_lines)}: split it, or list it in"
                " [tool.launch-agent.complexity.allowed] in pyproject.toml with why it is better"
                " whole"
            )
    for where, reason in sorted(allowed.items()):
        if where not in over:
            problems.append(
                f"{where}: listed in [tool.launch-agent.complexity.allowed] but no longer over"
                f" complexity {max_complexity} or {max_lines} lines (or gone): take it off the list"
            )
        elif not str(reason).strip():
            problems.append(f"{where}: listed without a reason")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    args = parser.parse_args(argv)
    problems = check(args.root)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
