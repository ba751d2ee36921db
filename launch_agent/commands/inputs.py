"""Files the commands read, where `-` means standard input (the Unix convention).

`kubectl get ... -o yaml | launch-agent validate -` and `--config -` read the piped text; every
error then names `<stdin>` where it would name the file.

Every read is bounded (`adapters/bounded.py`): at most `limit` bytes are read, so `/dev/zero`
or an endless pipe fails with "is over N, the limit for WHAT" (an `OSError`, which every
command already reports as `cannot read: ...`) instead of filling memory before a size check.
"""

from __future__ import annotations

from pathlib import Path

from launch_agent.adapters.bounded import decode_text, read_file, read_stdin

STDIN = "-"
STDIN_NAME = "<stdin>"


def is_stdin(path: str | Path) -> bool:
    return str(path) == STDIN


def display_name(path: str | Path) -> str:
    return STDIN_NAME if is_stdin(path) else str(path)


def read_bytes(path: str | Path, limit: int, *, what: str) -> bytes:
    """At most `limit` bytes of the file, or of standard input for `-`; `OSError` (including
    `InputTooLarge` past the limit) as for a file."""
    if is_stdin(path):
        return read_stdin(limit, what=what, name=STDIN_NAME)
    return read_file(path, limit, what=what)


def read_text(path: str | Path, limit: int, *, what: str) -> str:
    """`read_bytes` as text, like `Path.read_text` (`UnicodeDecodeError` if not UTF-8)."""
    return decode_text(read_bytes(path, limit, what=what))
