"""Run a command and measure its own peak memory, whatever the size of the process asking.

Linux carries a process's high-water RSS across fork and exec (`exec_mmap` records the old
mm's hiwater into `signal->maxrss`), so `wait4`'s `ru_maxrss` for a child forked straight
from pytest is at least pytest's RSS at the fork: 190 MiB late in a full run, which failed
memory bounds of 160 MiB that the command itself kept. This file is run as a script by a
fresh interpreter (a few MiB): it forks the command from itself, under an address-space
limit, and writes the command's `ru_maxrss` (bytes) to a file.

    python tests/peak_rss.py RSS_FILE ADDRESS_SPACE_BYTES -- COMMAND...

Its exit status is the command's (128 + N for a signal N), and stdin, stdout and stderr are
passed through.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SCRIPT = Path(__file__).resolve()


def measured(
    command: Sequence[str], rss_file: Path, address_space: int, **popen: Any
) -> subprocess.Popen[bytes]:
    """Start `command` through this script; its peak RSS is in `rss_file` once it exited."""
    argv = [sys.executable, str(SCRIPT), str(rss_file), str(address_space), "--", *command]
    return subprocess.Popen(argv, **popen)


def peak(rss_file: Path) -> int:
    return int(rss_file.read_text())


def _main(argv: list[str], environ: Mapping[str, str]) -> int:
    rss_file, space, sep, *command = argv
    assert sep == "--" and command, argv
    limit = int(space)

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    child = subprocess.Popen(command, env=dict(environ), preexec_fn=limited)  # noqa: PLW1509
    _, status, usage = os.wait4(child.pid, 0)
    Path(rss_file).write_text(str(usage.ru_maxrss * 1024))
    code = os.waitstatus_to_exitcode(status)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:], os.environ))
