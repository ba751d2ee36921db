"""`make test` on a fresh clone installs what the suite needs, the browser included."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _dry_run(*variables: str) -> str:
    """What `make test` would run (`make -n` prints the recipes without running them)."""
    make = shutil.which("make")
    assert make is not None, "make is needed to run the README's commands"
    done = subprocess.run(
        [make, "-n", "--no-print-directory", "test", *variables],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("present", [False, True], ids=["fresh-machine", "installed"])
def test_make_test_installs_chromium_only_where_it_is_missing(
    tmp_path: Path, present: bool
) -> None:
    chromium = tmp_path / "chromium"
    if present:
        chromium.write_text("#!/bin/sh\n")
        chromium.chmod(0o755)
    recipes = _dry_run(f"CHROMIUM={chromium}")
    assert ("scripts/install_chromium.sh" in recipes) is not present, recipes[-2000:]
    # The browser comes before the suite that needs it.
    if not present:
        assert recipes.index("scripts/install_chromium.sh") < recipes.index("scripts/run_suite.py")
