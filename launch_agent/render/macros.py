"""`${macro}` substitution from an allow-list, fused with the one deep copy a render makes.

W&B's agent fills `${project_name}`, `${entity_name}`, `${run_id}`, `${run_name}`,
`${image_uri}`, `${author}` and then *every environment variable of the agent process*, so a
submitter could copy `${WANDB_API_KEY}` into a pod they control (reference §2.3). Here only the
names in `MACROS` exist; any other `${...}` stays literal, and the environment is never read.
Substitution applies to string values, not keys, like W&B.

The walk rebuilds every mapping and list, which is also the copy that lets the later stages
edit the manifest in place without touching the queue spec's template.

Macro values come from the item, so each is checked where it lands (`substitute_checked`):

- every macro has a charset (`CHARSETS`); a value outside it refuses the item, naming the macro
  and the runSpec field it came from;
- in a path-like field or a name (`mountPath`, `subPath`, `path`, `workingDir`, `name`, keys
  ending in `Path`, `Name` or `Dir`) a value may not hold `/`, `\\`, be `.` or `..`: a run
  named `../../etc` must not pick the directory a volume is mounted from;
- in a field the kubelet expands (`command`, `args`, `env[].value`, `subPathExpr`, and
  RayJob's `entrypoint`, `runtimeEnvYAML` and `entrypointResources`, which KubeRay turns into
  the submitter's command) every `$` of the value is doubled,
  so `${run_name}` = `$(WANDB_API_KEY)` stays that text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from launch_agent.model.queue_spec import Problem
from launch_agent.render.kubelet import KUBELET_LISTS, KUBELET_SCALARS

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


# Where each macro's value comes from, for error messages.
SOURCES = {
    "run_id": "runSpec.run_id",
    "image_uri": "runSpec.docker.docker_image",
    "project_name": "runSpec.project",
    "entity_name": "runSpec.entity",
    "run_name": "runSpec.name",
    "author": "runSpec.author",
    "queue_name": "queue",
}
_PRINTABLE = r"[^\x00-\x1f\x7f-\x9f]*"
CHARSETS: Mapping[str, re.Pattern[str]] = {
    "run_id": re.compile(r"[A-Za-z0-9_-]{1,128}"),
    # Docker references: registry/host:port/path:tag@sha256:digest
    "image_uri": re.compile(r"[A-Za-z0-9._/:@+-]{1,512}"),
    "project_name": re.compile(r"[A-Za-z0-9._-]{1,128}"),
    "entity_name": re.compile(r"[A-Za-z0-9._-]{1,128}"),
    "run_name": re.compile(_PRINTABLE),
    "author": re.compile(r"[A-Za-z0-9._@+-]{0,128}"),
    "queue_name": re.compile(_PRINTABLE),
}
_PATH_KEYS = frozenset({"mountPath", "subPath", "subPathExpr", "path", "workingDir", "name"})


def _path_like(key: str) -> bool:
    return key in _PATH_KEYS or key.endswith(("Path", "Name", "Dir"))


def _unsafe_in_path(value: str) -> bool:
    return "/" in value or "\\" in value or value in (".", "..")


def _shown(value: str, limit: int = 80) -> str:
    """`value` quoted for an error: a 900 KB run name is not echoed back to W&B and the log."""
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit]!r}... ({len(value):,} characters)"


def substitute(obj: Any, values: Mapping[str, str]) -> Any:
    """A fresh copy of `obj` with allow-listed macros replaced in string leaves (unchecked)."""
    return substitute_checked(obj, values)[0]


def substitute_checked(obj: Any, values: Mapping[str, str]) -> tuple[Any, list[Problem]]:
    """A fresh copy of `obj` with allow-listed macros replaced, and the problems of the macro
    values that were used (see the module docstring)."""
    problems: list[Problem] = []
    reported: set[tuple[str, str]] = set()

    def refuse(name: str, why: str) -> None:
        if (name, why) not in reported:
            reported.add((name, why))
            problems.append(Problem(SOURCES.get(name, name), f"macro ${{{name}}} {why}"))

    def fill(text: str, key: str, kubelet: bool) -> str:
        out: list[str] = []
        pos = 0
        for m in _MACRO.finditer(text):
            name = m.group(1)
            out.append(text[pos : m.start()])
            pos = m.end()
            if name not in values:
                out.append(m.group(0))
                continue
            value = values[name]
            charset = CHARSETS.get(name)
            if charset is not None and not charset.fullmatch(value):
                refuse(
                    name, f"{_shown(value)} has characters outside its charset ({charset.pattern})"
                )
            if _path_like(key) and _unsafe_in_path(value):
                refuse(name, f"{_shown(value)} may not hold '/', '\\' or be '.' or '..' in {key!r}")
            if kubelet:
                if value.startswith(("(", "$")) and "".join(out).endswith("$"):
                    refuse(name, f"{_shown(value)} after '$' would form a kubelet reference")
                # Every `$` doubled, not just `$(`: text after the macro could complete one.
                value = value.replace("$", "$$")
            out.append(value)
        out.append(text[pos:])
        return "".join(out)

    def walk(node: Any, key: Any, kubelet: bool) -> Any:
        if isinstance(node, dict):
            # An env entry is a mapping inside the `env` list; only its `value` is expanded.
            env_entry = key == "env"
            if key == "exec":
                # A probe's or hook's `exec.command` is run as written, not expanded.
                return {k: walk(v, f"exec.{k}", kubelet) for k, v in node.items()}
            return {k: walk(v, k, kubelet or (env_entry and k == "value")) for k, v in node.items()}
        if isinstance(node, list):
            child = kubelet or key in KUBELET_LISTS
            return [walk(v, key, child) for v in node]
        if isinstance(node, str) and "${" in node:
            return fill(node, str(key), kubelet or key in KUBELET_SCALARS)
        return node

    return walk(obj, "", False), problems


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
