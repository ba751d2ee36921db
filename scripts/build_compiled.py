"""Compile the quota engine's pure modules to C extensions with mypyc.

The admission engine (`launch_agent/quota/`) is plain, fully typed Python with no I/O, which
mypyc (part of mypy, as black and mypy itself ship) compiles to C extensions that run about
1.5 times as fast (`launch-agent bench quota` says which build it measured). The Python
sources stay the reference: a compiled module is the same file, and the tests run on both
builds (`make test-compiled`).

    python scripts/build_compiled.py DEST
        DEST gets a fresh copy of the launch_agent package with the engine modules compiled
        beside their sources: put DEST first on PYTHONPATH to use it (`make compiled`).
    python scripts/build_compiled.py --in-place SITE_PACKAGES
        the package is already installed there (the Docker image's build stage): only the
        compiled modules are added to it.

Needs mypy (with setuptools) and a C compiler with the Python headers.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The engine and everything it calls per decision; `requests` and `simulate` parse input once
# and stay interpreted.
MODULES = ("tree", "ledger", "runs", "candidates", "preemption", "engine")
IGNORE = shutil.ignore_patterns("__pycache__", "*.so", "*.pyd")


def compile_into(package: Path, dest: Path) -> list[Path]:
    """Compile MODULES of the package at `package` (a launch_agent directory) in a scratch
    directory and copy the extensions into `dest` (the directory that holds launch_agent/).
    Returns the files written."""
    with tempfile.TemporaryDirectory(prefix="launch-agent-mypyc-") as scratch:
        work = Path(scratch)
        # A scratch copy keeps mypyc's build/ directory and setup files out of both trees,
        # and away from the project's pyproject.toml (old setuptools cannot read it).
        shutil.copytree(package, work / "launch_agent", ignore=IGNORE)
        sources = [f"launch_agent/quota/{name}.py" for name in MODULES]
        done = subprocess.run(
            [sys.executable, "-m", "mypyc", *sources],
            cwd=work,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            sys.stderr.write(done.stdout[-6000:] + done.stderr[-6000:])
            raise SystemExit(f"mypyc failed (exit {done.returncode}); output above")
        written = []
        # The runtime shared by the compiled modules sits at the top level, next to the package.
        for built in sorted(work.glob("*.so")) + sorted((work / "launch_agent/quota").glob("*.so")):
            target = dest / built.relative_to(work)
            shutil.copy2(built, target)
            written.append(target)
    if len(written) != len(MODULES) + 1:
        raise SystemExit(f"mypyc built {len(written)} files, expected {len(MODULES) + 1}")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dest", type=Path, help="directory to hold the compiled package")
    parser.add_argument(
        "--in-place",
        action="store_true",
        help="DEST already holds an installed launch_agent package: add the extensions to it",
    )
    args = parser.parse_args(argv)
    dest: Path = args.dest.resolve()
    if args.in_place:
        package = dest / "launch_agent"
        if not (package / "quota" / "engine.py").is_file():
            parser.error(f"{package} is not an installed launch_agent package")
    else:
        package = ROOT / "launch_agent"
        shutil.rmtree(dest / "launch_agent", ignore_errors=True)
        for stale in dest.glob("*__mypyc*"):
            stale.unlink()
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copytree(package, dest / "launch_agent", ignore=IGNORE)
    written = compile_into(package, dest)
    print(f"compiled {', '.join(MODULES)} into {dest} ({len(written)} extension files)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
