"""`-o json|yaml|table`: one way for every command that prints data to print it.

`json` and `yaml` print the records whole (for scripts); `table` prints chosen columns, one row
per record, aligned (for people). Each command keeps its own default format.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

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


def table(records: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """Aligned columns; headers are the column names upper-cased."""
    rows = [[c.upper() for c in columns]]
    rows += [[_cell(r.get(c)) for c in columns] for r in records]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]
    return "\n".join(lines) + "\n"


def render(data: Any, fmt: str, columns: Sequence[str] = ()) -> str:
    """`data` (a record or a list of records) in `fmt` (json, yaml or table)."""
    if fmt == "json":
        return json.dumps(data, indent=2) + "\n"
    if fmt == "yaml":
        return yaml.safe_dump(data, sort_keys=False, default_flow_style=False)
    if fmt == "table":
        records = data if isinstance(data, list) else [data]
        return table(records, columns or list(records[0]) if records else columns)
    raise ValueError(f"unknown output format {fmt!r}")
