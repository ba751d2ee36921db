"""`-o json|yaml|table`: one way for every command that prints data to print it.

`json` and `yaml` print the records whole (for scripts); `table` prints chosen columns, one row
per record, aligned (for people). Each command keeps its own default format.

Every cell and header of a table goes through the one sanitizer (`model.display.one_line`):
records quote what submitters, pods and W&B wrote, and a newline there would forge a row, an
escape sequence reach the reader's terminal. JSON escapes every control character but DEL,
which is escaped here too; YAML escapes them all.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from launch_agent.model.display import one_line

FORMATS = ("json", "yaml", "table")


def add_output_flag(
    parser: argparse.ArgumentParser,
    *,
    default: str,
    extra: Sequence[str] = (),
    help: str = "",
) -> None:
    """`-o/--output` with `extra` formats of the command's own before json, yaml and table."""
    choices = (*extra, *(f for f in FORMATS if f not in extra))
    parser.add_argument(
        "-o",
        "--output",
        choices=choices,
        default=default,
        help=help or f"output format: {', '.join(choices)} (default: %(default)s)",
    )


def _cell(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(_cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_cell(v)}" for k, v in value.items()) or "-"
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def json_text(data: Any, **options: Any) -> str:
    """`json.dumps`, with DEL escaped as well (JSON leaves it raw)."""
    return json.dumps(data, **options).replace("\x7f", "\\u007f")


def table(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Aligned columns; headers are the column names upper-cased."""
    rows = [[one_line(c.upper()) for c in columns]]
    rows += [[one_line(_cell(r.get(c))) for c in columns] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def render(data: Any, fmt: str, columns: Sequence[str] = ()) -> str:
    """`data` (a record or a list of records) in `fmt` (json, yaml or table)."""
    if fmt == "json":
        return json_text(data, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    if fmt == "table":
        records = data if isinstance(data, list) else [data]
        return table(records, columns or list(records[0]) if records else columns)
    raise ValueError(f"unknown output format {fmt!r}")
