"""The argument parser every `launch-agent` command uses: argparse with did-you-mean.

A mistyped command (`launch-agent rnu`, `launch-agent config shwo`) is an invalid choice of a
subparsers action; the error then suggests the closest valid choices (difflib), the way git
and kubectl do, instead of only listing all of them.
"""

from __future__ import annotations

import argparse
import difflib
from typing import Any


def suggestion(value: str, choices: list[str]) -> str:
    """`; did you mean 'run'?` (or two candidates), or empty when nothing is close."""
    close = difflib.get_close_matches(value, choices, n=2, cutoff=0.6)
    if not close:
        # A prefix (`launch-agent sand`) is as good a hint as a near miss.
        close = [c for c in choices if c.startswith(value)][:2] if value else []
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


class SuggestingParser(argparse.ArgumentParser):
    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is not None and value not in choices and isinstance(value, str):
            names = [str(c) for c in choices]
            message = f"invalid choice: {value!r} (choose from {', '.join(map(repr, names))})"
            raise argparse.ArgumentError(action, message + suggestion(value, names))
        super()._check_value(action, value)
