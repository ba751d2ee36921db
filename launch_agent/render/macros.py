"""`${macro}` substitution from an allow-list, fused with the one deep copy a render makes.

W&B's agent fills `${project_name}`, `${entity_name}`, `${run_id}`, `${run_name}`,
`${image_uri}`, `${author}` and then *every environment variable of the agent process*, so a
submitter could copy `${WANDB_API_KEY}` into a pod they control (reference §2.3). Here only the
names in `MACROS` exist; any other `${...}` stays literal, and the environment is never read.
Substitution applies to string values, not keys, like W&B.

The walk rebuilds every mapping and list, which is also the copy that lets the later stages
edit the manifest in place without touching the queue spec's template.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MACROS = (
    "run_id",
    "image_uri",
    "project_name",
    "entity_name",
    "run_name",
    "author",
    "queue_name",
)

_MACRO = re.compile(r"\$\{(\w+)\}")


def substitute(obj: Any, values: Mapping[str, str]) -> Any:
    """A fresh copy of `obj` with allow-listed macros replaced in string leaves."""

    def repl(m: re.Match[str]) -> str:
        return values.get(m.group(1), m.group(0))

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        if isinstance(node, str) and "${" in node:
            return _MACRO.sub(repl, node)
        return node

    return walk(obj)


def macro_values(
    *,
    run_id: str,
    image_uri: str,
    project: str,
    entity: str,
    run_name: str | None,
    author: str | None,
    queue_name: str,
) -> dict[str, str]:
    # A missing run name or author becomes "" (W&B writes the string "None").
    return {
        "run_id": run_id,
        "image_uri": image_uri,
        "project_name": project,
        "entity_name": entity,
        "run_name": run_name or "",
        "author": author or "",
        "queue_name": queue_name,
    }
