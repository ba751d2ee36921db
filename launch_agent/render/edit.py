"""Two small helpers every render stage that edits a manifest in place shares.

They are the one definition of "the main container" (which the pipeline writes the image, the
entry point and the W&B environment into, and which the override policy therefore compares
`overrides.args` with), so the stages cannot disagree about it.
"""

from __future__ import annotations

from typing import Any


def child_map(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """`parent[key]` as a mapping, replacing a missing or mistyped value with a new one."""
    value = parent.get(key)
    if not isinstance(value, dict):
        value = {}
        parent[key] = value
    return value


def main_container(containers: list[Any], preferred: str | None) -> dict[str, Any] | None:
    """The container named `preferred`, else the first; None if that one is not a mapping."""
    if preferred is not None:
        for c in containers:
            if isinstance(c, dict) and c.get("name") == preferred:
                return c
    first = containers[0]
    return first if isinstance(first, dict) else None
