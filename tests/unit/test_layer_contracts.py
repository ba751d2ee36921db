"""The import-linter contracts catch a broken layer rule (so CI fails when one is broken).

Each case copies the package to a temporary directory, adds one forbidden import and runs
`lint-imports` there with the project's own contracts.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

VIOLATIONS = [
    ("model", "import asyncio", "Pure layers import no I/O library"),
    ("runtime/status", "import aiohttp", "The status snapshot and page are pure"),
    ("render", "import aiohttp", "Pure layers import no I/O library"),
    ("quota", "import socket", "Pure layers import no I/O library"),
    ("runtime", "import kubernetes_asyncio", "Only adapters import"),
    ("runtime", "import boto3", "Only adapters import"),
    ("commands", "from google.cloud import storage", "Only adapters import"),
    ("sandbox", "import launch_agent.render", "The sandbox does not import the code it tests"),
    ("sandbox", "import launch_agent.adapters", "The sandbox does not import the code it tests"),
    ("model", "import launch_agent.runtime", "Layers: each layer imports only the layers below it"),
    (
        "render",
        "import launch_agent.tracking",
        "Layers: each layer imports only the layers below it",
    ),
    (
        "runtime",
        "import launch_agent.sandbox",
        "Layers: each layer imports only the layers below it",
    ),
]


def _run(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture
def project_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "launch_agent", tmp_path / "launch_agent")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_contracts_hold_on_the_real_tree(project_copy: Path) -> None:
    result = _run(project_copy)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(("layer", "statement", "contract"), VIOLATIONS)
def test_a_forbidden_import_breaks_a_contract(
    project_copy: Path, layer: str, statement: str, contract: str
) -> None:
    (project_copy / "launch_agent" / layer / "_violation.py").write_text(statement + "\n")
    result = _run(project_copy)
    assert result.returncode != 0
    broken = [line for line in result.stdout.splitlines() if line.endswith("BROKEN")]
    assert any(line.startswith(contract) for line in broken), result.stdout
