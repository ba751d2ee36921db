"""The repository is self-contained: a copy of it in an empty folder collects and runs its tests.

Fixtures once lived in a folder beside the repository; a clone in an empty folder then failed at
collection. The copy here is the tracked and untracked (not ignored) files of the working tree,
in `<empty temporary folder>/repo`, so nothing that happens to sit beside this checkout can be
reached. The tests that read the vendored fixtures (CRDs, recorded W&B operations) then run in
the copy with the copy first on PYTHONPATH.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Folders that are build or tool output, never part of what a clone holds.
NOT_SOURCE = {".git", ".venv", ".venv-reference", "build", "dist", "bench-results", "__pycache__"}
# Tests that read tests/fixtures (the CRDs and the recorded GraphQL operations) and are fast.
FIXTURE_TESTS = [
    "tests/unit/adapters/test_wandb_documents.py",
    "tests/unit/render/test_output_check.py",
]
# Built from pieces so this file does not match its own patterns.
FORBIDDEN = [
    re.compile(re.escape("../" + "shared")),
    re.compile(r'parent\s*/\s*"' + "shared" + '"'),
    re.compile(re.escape("/" + "work/")),
    re.compile(re.escape("/" + "root/")),
]


def source_files() -> list[Path]:
    """What a clone of this checkout holds: git's view when there is one, else the tree."""
    if (ROOT / ".git").exists() and shutil.which("git"):
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
        return sorted(Path(name) for name in listed.split("\0") if name and (ROOT / name).is_file())
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if (d not in NOT_SOURCE and not d.startswith(".")) or d == ".ci"]
        found += [Path(folder, f).relative_to(ROOT) for f in files if not f.endswith(".pyc")]
    return sorted(found)


@pytest.fixture(scope="module")
def copy() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="launch-agent-copy-") as empty:
        repo = Path(empty) / "repo"
        for name in source_files():
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
        assert sorted(os.listdir(empty)) == ["repo"]
        yield repo


def run_in(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(repo)
    return subprocess.run(
        [sys.executable, *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_copy_imports_its_own_package(copy: Path) -> None:
    result = run_in(copy, "-c", "import launch_agent; print(launch_agent.__file__)")
    assert result.returncode == 0, result.stderr
    assert Path(result.stdout.strip()).is_relative_to(copy)


def test_a_copy_in_an_empty_folder_collects_every_test(copy: Path) -> None:
    result = run_in(copy, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "error" not in result.stdout.splitlines()[-1].lower(), result.stdout[-4000:]
    assert re.search(r"\d+(/\d+)? tests collected", result.stdout), result.stdout[-2000:]


def test_the_fixture_tests_pass_in_the_copy(copy: Path) -> None:
    result = run_in(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FIXTURE_TESTS)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert re.search(r"\d+ passed", result.stdout), result.stdout[-2000:]
    assert "skipped" not in result.stdout.splitlines()[-1], result.stdout[-2000:]


def test_nothing_refers_outside_the_repository() -> None:
    offenders = []
    for name in source_files():
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary files name no paths a reader follows
        for number, line in enumerate(text.splitlines(), 1):
            offenders += [f"{name}:{number}: {line.strip()}" for p in FORBIDDEN if p.search(line)]
    assert offenders == []
