"""The layered merge and the normalisation of W&B's queue-config forms.

Rules (written out as tables in docs/queue-specs.md and tested as tables):

| overlay value | base value | result |
| --- | --- | --- |
| mapping | mapping | merged key by key, recursively |
| `null` | anything | the key is removed (JSON merge patch) |
| equal to the base | | no change (W&B echoes the queue config) |
| list, key in `NAMED_LISTS` | list | merged item by item: same `name` merges, new names append |
| list item without a name | item at the same index | merged (W&B's UI writes unnamed containers) |
| any other list (`command`, `args`, `tolerations`, ...) | anything | replaced |
| scalar | anything | replaced |

`merge_changes` also returns every place where the result differs from the base, which is
what the override policy checks. The merge never mutates its inputs and shares unchanged
subtrees of the base; the render pipeline copies the result once (during macro substitution)
before it edits anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launch_agent.model.queue_spec import Problem
from launch_agent.render.paths import Item, Path, item_label

# Lists whose items are identified by `name` (Ray's worker groups: `groupName`).
NAMED_LISTS = frozenset(
    {
        "containers",
        "initContainers",
        "ephemeralContainers",
        "env",
        "volumes",
        "volumeMounts",
        "volumeDevices",
        "ports",
        "imagePullSecrets",
        "resourceClaims",
        "replicatedJobs",
        "tasks",
        "workerGroupSpecs",
    }
)

# Keys W&B reads from `resource_args.kubernetes` that are not part of the manifest
# (reference §2.1), with what this agent does instead.
NON_MANIFEST_KEYS: Mapping[str, str] = {
    "configFile": "the agent uses its own cluster credentials",
    "context": "the agent uses its own cluster credentials",
    "wait_for_ready": "only used by W&B for additional_services, which are not supported",
    "wait_timeout": "only used by W&B for additional_services, which are not supported",
    "group": "the group comes from apiVersion",
    "version": "the version comes from apiVersion",
    "builder": "image builds are configured in the agent's launch-config.yaml",
}


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# The base has no value at a path (distinct from a base value of `null`).
MISSING: Any = _Sentinel("MISSING")
# The overlay's `null`: the key is removed from the result.
REMOVED: Any = _Sentinel("REMOVED")


@dataclass(frozen=True, slots=True)
class Change:
    """One place where the overlay changed the base: what the merged result has instead.

    `value` is the overlay's value (`REMOVED` for a `null`), `base` the base's (`MISSING` when
    it had none). Changes are recorded where the merge *diverges* from the base: a mapping
    merged into a mapping recurses, so a change is never a mapping over a mapping; a new key's
    value and a new list item are recorded whole.
    """

    path: Path
    value: Any
    base: Any


def is_named_list(key: str, value: Any) -> bool:
    return (
        key in NAMED_LISTS and isinstance(value, list) and all(isinstance(v, dict) for v in value)
    )


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` merged onto `base` by the rules above; neither input is modified."""
    return _merge_map(base, overlay, (), [])


def merge_changes(
    base: Mapping[str, Any], overlay: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Change]]:
    """The merge, and every place where it made the result differ from `base`.

    The override policy decides on exactly this list, so what is checked is what is applied:
    there is no second walk that could disagree with the merge about which item is which.
    """
    changes: list[Change] = []
    return _merge_map(base, overlay, (), changes), changes


def _merge_map(
    base: Mapping[str, Any], overlay: Mapping[str, Any], path: Path, changes: list[Change]
) -> dict[str, Any]:
    out = dict(base)
    for key, value in overlay.items():
        current = out.get(key, MISSING)
        if current is value or current == value:
            continue  # W&B echoes the queue config: most of the layer equals the base
        if value is None:
            if current is not MISSING:
                del out[key]
            changes.append(Change((*path, key), REMOVED, current))
            continue
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = _merge_map(current, value, (*path, key), changes)
        elif (
            isinstance(current, list) and is_named_list(key, value) and is_named_list(key, current)
        ):
            out[key] = _merge_named(current, value, (*path, key), changes)
        else:
            out[key] = value
            changes.append(Change((*path, key), value, current))
    return out


def _merge_named(
    base: list[Any], overlay: list[Any], path: Path, changes: list[Change]
) -> list[Any]:
    out = list(base)
    # One index by label, built once: looking each overlay item up by scanning the list made
    # merging 20,000 env entries quadratic. The first item of a duplicated name wins, as before.
    where: dict[str, int] = {}
    for j, b in enumerate(out):
        where.setdefault(item_label(b, j), j)
    for i, item in enumerate(overlay):
        label = item_label(item, i)
        # An unnamed item merges with the base item at its index (W&B's UI writes unnamed
        # containers); a named one with the base item of that name.
        unnamed = label == str(i)
        pos = (i if i < len(base) else None) if unnamed else where.get(label)
        if unnamed and pos is not None:
            # Paths name an item by its name and a name resolves to its first item; an
            # unnamed item at the index of a later duplicate merges with that first one, so
            # what the policy checks (the path) is what is changed.
            pos = where.get(item_label(out[pos], pos), pos)
        if pos is None:
            new_label = item_label(item, len(out))
            where.setdefault(new_label, len(out))
            changes.append(Change((*path, Item(new_label)), item, MISSING))
            out.append(item)
        else:
            # An unnamed item *is* the base item it merges with: paths name it that way.
            target = Item(item_label(out[pos], pos))
            out[pos] = _merge_map(out[pos], item, (*path, target), changes)
    return out


def normalise(
    raw: Mapping[str, Any], where: str, *, infer_job: bool = True
) -> tuple[dict[str, Any], str | None, list[Problem], list[Problem]]:
    """A W&B queue config (either documented form) or a manifest → a manifest.

    Returns (manifest, namespace it named or None, problems, warnings). The forms:

    - the Job-spec form: `{metadata, spec, namespace?}` with no apiVersion/kind → batch/v1 Job;
    - the custom-resource form: `{kubernetes: {apiVersion, kind, metadata, spec}}`;
    - a full manifest `{apiVersion, kind, metadata, spec}`.

    `infer_job=False` is for the submitter's layer, which inherits the template's kind.
    """
    problems: list[Problem] = []
    warnings: list[Problem] = []
    body: Mapping[str, Any] = raw
    prefix = where
    if set(raw) == {"kubernetes"} and isinstance(raw["kubernetes"], dict):
        body = raw["kubernetes"]
        prefix = f"{where}.kubernetes"
    manifest = dict(body)
    namespace: str | None = None
    for key, why in NON_MANIFEST_KEYS.items():
        if key in manifest:
            del manifest[key]
            warnings.append(Problem(f"{prefix}.{key}", f"ignored: {why}"))
    top_ns = manifest.pop("namespace", None)
    meta = manifest.get("metadata")
    meta_ns = meta.get("namespace") if isinstance(meta, dict) else None
    if isinstance(meta, dict) and "namespace" in meta:
        manifest["metadata"] = {k: v for k, v in meta.items() if k != "namespace"}
    for path, ns in ((f"{prefix}.namespace", top_ns), (f"{prefix}.metadata.namespace", meta_ns)):
        if ns is None:
            continue
        if not isinstance(ns, str):
            problems.append(Problem(path, "must be a string"))
        elif namespace is not None and ns != namespace:
            problems.append(Problem(path, f"{ns!r} contradicts namespace {namespace!r}"))
        else:
            namespace = ns
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    if not infer_job and api_version is None and kind is None:
        pass  # a submitter layer without apiVersion/kind keeps the template's
    elif api_version is None and kind in (None, "Job"):
        # W&B's default (`_inject_defaults`): no apiVersion/kind means a batch/v1 Job.
        manifest["apiVersion"], manifest["kind"] = "batch/v1", "Job"
    elif not isinstance(api_version, str) or not api_version:
        problems.append(Problem(f"{prefix}.apiVersion", f"is required when kind is {kind!r}"))
    elif not isinstance(kind, str) or not kind:
        problems.append(
            Problem(f"{prefix}.kind", f"is required when apiVersion is set ({api_version})")
        )
    for key in ("metadata", "spec"):
        if key in manifest and not isinstance(manifest[key], dict):
            problems.append(Problem(f"{prefix}.{key}", "must be a mapping"))
    return manifest, namespace, problems, warnings
