"""scripts/install_helm.py: the pinned helm, offline, idempotent, replacing anything else."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

from tests.chart.helm import ROOT

SCRIPT = ROOT / "scripts" / "install_helm.py"
PINNED = "b66cb19f2b31f9d427632ea6c4b4a1ff89b74ecaeaee323cd166da41a7af53bd"


def install(dest: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--dest", str(dest)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_installs_the_pinned_binary_then_does_nothing(tmp_path: Path) -> None:
    dest = tmp_path / "bin" / "helm"
    first = install(dest)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("installed helm v4.3.1")
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == PINNED
    assert dest.stat().st_mode & 0o111
    inode = dest.stat().st_ino
    second = install(dest)
    assert second.returncode == 0 and "already installed" in second.stdout
    assert dest.stat().st_ino == inode, "an up-to-date binary is not rewritten"
    version = subprocess.run(
        [str(dest), "version", "--short"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"HOME": str(tmp_path)},
        check=False,
    )
    assert version.stdout.startswith("v4.3.1"), version.stdout + version.stderr


def test_replaces_a_different_binary(tmp_path: Path) -> None:
    dest = tmp_path / "helm"
    dest.write_bytes(b"#!/bin/sh\necho not helm\n")
    result = install(dest)
    assert result.returncode == 0, result.stderr
    assert hashlib.sha256(dest.read_bytes()).hexdigest() == PINNED
    assert [p.name for p in tmp_path.iterdir()] == ["helm"], "no temporary file left behind"
