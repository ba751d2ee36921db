"""Files the commands read, where `-` means standard input (the Unix convention).

`kubectl get ... -o yaml | launch-agent validate -` and `--config -` read the piped text; every
error then names `<stdin>` where it would name the file.
"""

from __future__ import annotations

import sys
from pathlib import Path

STDIN = "-"
STDIN_NAME = "<stdin>"


def is_stdin(path: str | Path) -> bool:
    return str(path) == STDIN


def display_name(path: str | Path) -> str:
    return STDIN_NAME if is_stdin(path) else str(path)


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, or all of standard input for `-`; OSError as for a file."""
    if is_stdin(path):
        return sys.stdin.buffer.read()
    return Path(path).read_bytes()


def read_text(path: str | Path) -> str:
    """The file's UTF-8 text, or all of standard input for `-`."""
    if is_stdin(path):
        return sys.stdin.read()
    return Path(path).read_text(encoding="utf-8")
