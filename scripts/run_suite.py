"""`make test`'s pytest: the tests marked `long` in a pytest of their own, beside the rest.

A handful of tests wait a minute or more of wall-clock time each (a 60-second W&B outage, the
one-minute soak, wandb-core's minute of retries, the short chaos bench) while using little CPU.
Run one after the other with everything else they made up a quarter of the suite's wall time on
this 2-core machine; run beside it they cost almost nothing. Each process keeps its own
guardrails (tests/conftest.py measures CPU time per callback, which a neighbour does not move).

The selection is the project's own (`addopts`' `-m` in pyproject.toml) split in two, so a test
runs in exactly one of the two processes. The long ones' output is kept in a file and printed
after the rest, so the two reports do not interleave. Exit status: the first failure's, 0 when
both passed (or one selected nothing, which a `-k` or a path in the arguments may do).

Usage: python scripts/run_suite.py [pytest arguments ...]
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_TESTS = 5  # pytest's exit status when nothing was selected


def base_selection() -> str:
    """The `-m` expression pyproject.toml's addopts give every pytest run."""
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    addopts = list(options["ini_options"]["addopts"])
    return str(addopts[addopts.index("-m") + 1])


def pytest(selection: str, args: list[str]) -> list[str]:
    # A later `-m` replaces addopts' own, so each carries the base selection with it.
    return [sys.executable, "-m", "pytest", "-m", selection, *args]


def main(args: list[str]) -> int:
    base = base_selection()
    log = ROOT / "build" / "pytest-long.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        # The long ones write no cache: two sessions would race on .pytest_cache.
        long = subprocess.Popen(
            pytest(f"({base}) and long", ["-p", "no:cacheprovider", *args]),
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            rest = subprocess.run(pytest(f"({base}) and not long", args), cwd=ROOT, check=False)
            long_status = long.wait()
        finally:
            if long.poll() is None:
                long.terminate()
                long.wait()
    sys.stdout.write(f"\n===== the tests marked long (their own pytest, {log}) =====\n")
    sys.stdout.write(log.read_text(errors="replace"))
    sys.stdout.flush()
    statuses = [s for s in (rest.returncode, long_status) if s not in (0, NO_TESTS)]
    if statuses:
        return statuses[0]
    return NO_TESTS if rest.returncode == long_status == NO_TESTS else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
