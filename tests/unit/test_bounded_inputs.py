"""Every command that reads a file or standard input stops at its limit while reading.

Each case runs the real CLI (`python -m launch_agent ...`, the argv path a user's shell takes)
on `/dev/zero` or on a pipe that never ends, and asserts: exit status (the command's status for
bad input), one `error:` line naming the input and the limit, and the child's peak memory
(`wait4`'s `ru_maxrss` for that child alone, forked from a small process: `tests/peak_rss.py`) under the limit plus the interpreter's baseline.
The child runs under an address-space limit, so code that reads everything first ends in a
MemoryError quickly instead of taking the machine's memory with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO

import pytest

from tests.peak_rss import measured, peak

MIB = 1024 * 1024
# What the interpreter and the imports of the biggest command take before any input.
BASELINE = 160 * MIB
ADDRESS_SPACE = 3 * 1024 * MIB


def _feed_forever(stream: IO[bytes]) -> None:
    """Write YAML-looking lines into the child's stdin until it closes the pipe."""
    line = b"key: value\n" * 6000
    write = stream.write
    try:
        while True:
            write(line)
    except (BrokenPipeError, ValueError, OSError):
        pass


def _run(argv: list[str], *, endless_stdin: bool, cwd: Path) -> tuple[int, str, int]:
    """(exit status, stderr, peak RSS in bytes) of the CLI with `argv`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LAUNCH_AGENT_"))}
    env["HOME"] = str(cwd)
    rss = cwd / ".peak-rss"
    child = measured(
        [sys.executable, "-m", "launch_agent", *argv],
        rss,
        ADDRESS_SPACE,
        stdin=subprocess.PIPE if endless_stdin else subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env=env,
    )
    feeder = None
    if endless_stdin:
        assert child.stdin is not None
        feeder = threading.Thread(target=_feed_forever, args=(child.stdin,), daemon=True)
        feeder.start()
    assert child.stderr is not None
    err = child.stderr.read().decode()
    child.wait()
    if feeder is not None:
        feeder.join(timeout=10)
        assert child.stdin is not None
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
    return child.returncode, err, peak(rss)


ROOT = Path(__file__).resolve().parents[2]
ITEM = {
    "runQueueItemId": "i1",
    "runSpec": {
        "entity": "ent",
        "project": "proj",
        "resource": "kubernetes",
        "docker": {"docker_image": "registry.example.com/img:1"},
    },
}

# (argv, endless stdin, exit status, what the error names, the limit in bytes)
CASES = [
    (["diagnose", "-f", "/dev/zero"], False, 2, "/dev/zero", "256 MiB", 256 * MIB),
    (["diagnose", "-f", "-"], True, 2, "<stdin>", "256 MiB", 256 * MIB),
    (
        ["migrate", "--from-file", "/dev/zero", "--queue", "q", "--dry-run"],
        False,
        2,
        "/dev/zero",
        "1,000,000 bytes",
        1_000_000,
    ),
    (
        ["migrate", "--from-file", "-", "--queue", "q", "--dry-run"],
        True,
        2,
        "<stdin>",
        "1,000,000 bytes",
        1_000_000,
    ),
    (["validate", "-"], True, 1, "<stdin>", "10,000,000 bytes", 10_000_000),
    (
        ["render", "--spec", "/dev/zero", "--item", "item.yaml"],
        False,
        2,
        "/dev/zero",
        "10,000,000 bytes",
        10_000_000,
    ),
    (["render", "--spec", "spec.yaml", "--item", "-"], True, 2, "<stdin>", "1 MiB", MIB),
    (["quota", "check", "--tree", "/dev/zero"], False, 2, "/dev/zero", "10,000,000 bytes", 10**7),
    (["config", "show", "--config", "-"], True, 2, "<stdin>", "1,000,000 bytes", 1_000_000),
    (
        [
            "sandbox",
            "submit",
            "--resource-args",
            "/dev/zero",
            "--queue",
            "q",
            "--image",
            "busybox",
            "--base-url",
            "http://127.0.0.1:9",
            "--api-key",
            "k",
        ],
        False,
        2,
        "/dev/zero",
        "1 MiB",
        MIB,
    ),
]


@pytest.mark.parametrize(
    ("argv", "endless", "status", "name", "limit_text", "limit"),
    CASES,
    ids=[" ".join(c[0]) for c in CASES],
)
def test_an_endless_input_is_refused_at_its_limit_while_reading(
    tmp_path: Path,
    argv: list[str],
    endless: bool,
    status: int,
    name: str,
    limit_text: str,
    limit: int,
) -> None:
    (tmp_path / "spec.yaml").write_text((ROOT / "queue-specs" / "job.yaml").read_text())
    (tmp_path / "item.yaml").write_text(json.dumps(ITEM))
    code, err, peak = _run(argv, endless_stdin=endless, cwd=tmp_path)
    lines = err.strip().splitlines()
    assert code == status, err[-2000:]
    assert len(lines) == 1, err[-2000:]
    assert lines[0].startswith("error: ") and name in lines[0], lines[0]
    assert f"is over {limit_text}, the limit for " in lines[0], lines[0]
    assert peak < limit + BASELINE, f"peak RSS {peak / MIB:.0f} MiB"


def test_a_file_of_nul_bytes_under_the_limit_is_an_error_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    """What `/dev/zero` reads under a limit: YAML's reader refuses NUL before parsing, and
    that refusal was not caught (a traceback from `quota check`)."""
    (tmp_path / "nul.yaml").write_bytes(b"\0" * 3000)
    code, err, _ = _run(["quota", "check", "--tree", "nul.yaml"], endless_stdin=False, cwd=tmp_path)
    lines = err.strip().splitlines()
    assert code == 2, err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: nul.yaml: "), err[-2000:]
    assert "the character U+0000 is not allowed in YAML" in lines[0]
