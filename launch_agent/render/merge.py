"""The layered merge and the normalisation of W&B's queue-config forms.

Rules (written out as tables in docs/queue-specs.md and tested as tables):

| overlay value | base value | result |
| --- | --- | --- |
| mapping | mapping | merged key by key, recursively |
| `null` | anything | the key is removed (JSON merge patch) |
| list, key in `NAMED_LISTS` | list | merged item by item: same `name` merges, new names append |
| list item without a name | item at the same index | merged (W&B's UI writes unnamed containers) |
| any other list (`command`, `args`, `tolerations`, ...) | anything | replaced |
| scalar | anything | replaced |

The merge never mutates its inputs and shares unchanged subtrees of the base; the render
pipeline copies the result once (during macro substitution) before it edits anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from launch_agent.model.queue_spec import Problem
from launch_agent.render.paths import item_label

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


def counterpart(base: Any, item: Any, index: int) -> Any:
    """The item of `base` that overlay `item` (at `index`) merges with, or None."""
    if not isinstance(base, list):
        return None
    label = item_label(item, index)
    if label != str(index):  # named: find the same name
        for i, b in enumerate(base):
            if item_label(b, i) == label:
                return b
        return None
    return base[index] if index < len(base) else None


def is_named_list(key: str, value: Any) -> bool:
    return (
        key in NAMED_LISTS and isinstance(value, list) and all(isinstance(v, dict) for v in value)
    )


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """`overlay` merged onto `base` by the rules above; neither input is modified."""
    out = dict(base)
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
            continue
        current = out.get(key)
        if current is value or current == value:
            continue  # W&B echoes the queue config: most of the layer equals the base
        if isinstance(value, dict) and isinstance(current, dict):
            out[key] = merge(current, value)
        elif (
            isinstance(current, list) and is_named_list(key, value) and is_named_list(key, current)
        ):
            out[key] = merge_named(current, value)
        else:
            out[key] = value
    return out


def merge_named(base: list[Any], overlay: list[Any]) -> list[Any]:
    out = list(base)
    for i, item in enumerate(overlay):
        label = item_label(item, i)
        if label != str(i):
            pos = next((j for j, b in enumerate(out) if item_label(b, j) == label), None)
        else:
            pos = i if i < len(base) else None
        if pos is None:
            out.append(item)
        else:
            out[pos] = merge(out[pos], item)
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
