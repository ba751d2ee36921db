"""The override policy: the submitter's layer is checked against `overridable` before merging.

The W&B server merges its own queue config (and `{{variable}}` values) into
`runSpec.resource_args` before the agent sees it, so most of that layer usually repeats the
template. Only *differences* count as overrides: the layer is walked alongside the template
(named list items matched the way the merge matches them) and every leaf whose value differs
is checked against the globs. A leaf is allowed when a glob matches its path or a prefix of it.
Every violation is reported with its path; nothing is dropped silently.

`runSpec.overrides` is checked the same way under the pseudo-paths `overrides.args`,
`overrides.entry_point`, `overrides.run_config`, `overrides.artifacts` and `overrides.files`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from launch_agent.model.queue_spec import Problem
from launch_agent.model.run_item import RunItem
from launch_agent.render.merge import counterpart, is_named_list
from launch_agent.render.paths import (
    Glob,
    Item,
    Path,
    format_path,
    glob_matches_prefix,
    item_label,
)

_MISSING = object()
LAYER_PREFIX = "runSpec.resource_args.kubernetes"


def changed_leaves(overlay: Any, base: Any, path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """(path, value) of every leaf in `overlay` that differs from `base` at the same path."""
    if overlay is base or overlay == base:
        return  # an echo of the template (the common case): nothing to check
    if isinstance(overlay, dict):
        base_map = base if isinstance(base, dict) else {}
        for key, value in overlay.items():
            b = base_map.get(key, _MISSING)
            sub = (*path, key)
            if value is None:
                if b is not _MISSING:
                    yield sub, None  # a deletion is an override too
            elif is_named_list(key, value) and (b is _MISSING or is_named_list(key, b)):
                base_list = b if isinstance(b, list) else []
                for i, item in enumerate(value):
                    yield from _item_leaves(item, counterpart(base_list, item, i), sub, i)
            elif isinstance(value, dict):
                if not value and b is _MISSING:
                    continue  # an empty mapping adds nothing
                yield from changed_leaves(value, b, sub)
            elif value != b:
                yield sub, value
    elif overlay != base:
        yield path, overlay


def _item_leaves(item: Any, base_item: Any, path: Path, index: int) -> Iterator[tuple[Path, Any]]:
    # An unnamed item merges with the base item at its index: it is *that* item (`[main]`),
    # so globs and messages name it the way the merged result will.
    label = item_label(item, index)
    if label == str(index) and base_item is not None:
        label = item_label(base_item, index)
    yield from changed_leaves(item, base_item, (*path, Item(label)))


def allowed(path: Path, globs: Sequence[Glob]) -> bool:
    return any(glob_matches_prefix(g, path) for g in globs)


def check_layer(
    layer: Mapping[str, Any],
    template: Mapping[str, Any],
    globs: Sequence[Glob],
    spec_name: str,
    granted: Sequence[str],
) -> list[Problem]:
    """Problems for every changed leaf of the submitter's manifest layer not granted."""
    problems = []
    for path, _value in changed_leaves(layer, template):
        if not allowed(path, globs):
            problems.append(Problem(format_path(path, LAYER_PREFIX), _reason(spec_name, granted)))
    return problems


def check_overrides(
    item: RunItem, globs: Sequence[Glob], spec_name: str, granted: Sequence[str]
) -> list[Problem]:
    """Problems for each W&B `overrides` entry the queue spec does not grant."""
    present = {
        "args": item.args,
        "entry_point": item.entry_point,
        "run_config": item.run_config,
        "artifacts": item.artifacts,
        "files": item.files,
    }
    problems = []
    for key, value in present.items():
        if value and not allowed(("overrides", key), globs):
            problems.append(Problem(f"runSpec.overrides.{key}", _reason(spec_name, granted)))
    return problems


def _reason(spec_name: str, granted: Sequence[str]) -> str:
    listed = ", ".join(granted) if granted else "nothing"
    return f"may not be overridden: queue spec {spec_name!r} lets submitters set only {listed}"
