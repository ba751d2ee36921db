"""The complexity ratchet (`scripts/complexity.py`, run by `make lint`): no function over ruff's
C901 at 15 or over 80 lines unless `pyproject.toml` lists it with a reason, and the list only
shrinks. Run on this checkout, and on small trees made to break it each way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "complexity.py"


def ratchet(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def branchy(name: str, branches: int, indent: str = "") -> str:
    """A function of complexity `branches + 1`."""
    body = "".join(
        f"{indent}    if x == {i}:\n{indent}        return {i}\n" for i in range(branches)
    )
    return f"{indent}def {name}(x: int) -> int:\n{body}{indent}    return -1\n"


def long(name: str, lines: int, indent: str = "") -> str:
    """A function of `lines` lines and complexity 1."""
    body = "".join(f"{indent}    x += {i}\n" for i in range(lines - 2))
    return f"{indent}def {name}(x: int) -> int:\n{body}{indent}    return x\n"


def tree(tmp_path: Path, source: str, allowed: dict[str, str]) -> Path:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "m.py").write_text(source)
    listed = "".join(f'"{where}" = "{why}"\n' for where, why in allowed.items())
    (tmp_path / "pyproject.toml").write_text(
        "[tool.launch-agent.complexity]\n"
        'package = "pkg"\nmax-complexity = 15\nmax-lines = 80\n\n'
        f"[tool.launch-agent.complexity.allowed]\n{listed}"
    )
    return tmp_path


def test_this_checkout_holds_the_ratchet() -> None:
    done = ratchet(ROOT)
    assert done.returncode == 0, done.stderr


def test_a_new_function_over_either_bar_fails(tmp_path: Path) -> None:
    source = (
        branchy("ok", 14)
        + branchy("tangled", 15)
        + "class C:\n"
        + long("fine", 80, "    ")
        + long("sprawling", 81, "    ")
    )
    done = ratchet(tree(tmp_path, source, {}))
    assert done.returncode == 1
    errors = done.stderr.splitlines()
    assert len(errors) == 2, errors
    assert errors[0].startswith("error: pkg/m.py::C.sprawling: 81 lines > 80")
    assert errors[1].startswith("error: pkg/m.py::tangled: complexity 16 > 15")


def test_a_listed_function_over_the_bar_passes(tmp_path: Path) -> None:
    source = branchy("tangled", 20) + long("sprawling", 90)
    allowed = {"pkg/m.py::tangled": "why it is whole", "pkg/m.py::sprawling": "a table"}
    done = ratchet(tree(tmp_path, source, allowed))
    assert done.returncode == 0, done.stderr


def test_the_list_only_shrinks(tmp_path: Path) -> None:
    # Listed, but split since (or gone): the entry must go.
    source = branchy("tamed", 3)
    allowed = {"pkg/m.py::tamed": "was tangled", "pkg/m.py::removed": "was long"}
    done = ratchet(tree(tmp_path, source, allowed))
    assert done.returncode == 1
    errors = done.stderr.splitlines()
    assert len(errors) == 2, errors
    assert errors[0].startswith("error: pkg/m.py::removed: listed in")
    assert errors[1].startswith("error: pkg/m.py::tamed: listed in")
    assert all("no longer over complexity 15 or 80 lines" in e for e in errors)


def test_a_listed_function_needs_a_reason(tmp_path: Path) -> None:
    done = ratchet(tree(tmp_path, branchy("tangled", 16), {"pkg/m.py::tangled": " "}))
    assert done.returncode == 1
    assert "pkg/m.py::tangled: listed without a reason" in done.stderr


def test_nested_functions_and_methods_are_named_by_their_place(tmp_path: Path) -> None:
    source = "def outer() -> None:\n" + branchy("inner", 16, "    ") + "    return None\n"
    done = ratchet(tree(tmp_path, source, {}))
    assert "error: pkg/m.py::outer.inner: complexity 17 > 15" in done.stderr
