"""What the API server and etcd would refuse in a rendered object, checked before the create.

A run copies some of the item into every pod template (the run name, args and entry point, the
W&B payload variables), so a 900 KB item can render to a 1.8 MB PyTorchJob. Kubernetes refuses
such an object in ways the agent cannot tell apart from an outage or from a bad queue spec:

- all annotations of one object's metadata together at most 256 KiB (kubernetes apimachinery
  `pkg/api/validation/objectmeta.go`, `TotalAnnotationSizeLimitB`, counted as key plus value
  bytes in `ValidateAnnotationsSize`): a 422 naming `metadata.annotations`, not the runSpec;
- the whole object at most etcd's request limit, 1.5 MiB by default (etcd `embed/config.go`
  `DefaultMaxRequestBytes`); kube-apiserver answers a larger write with a 500
  (`etcdserver: request is too large`), which a client retries as a server fault, so the item
  would come back after every lease, forever.

- env var names printable ASCII without `=`, and no NUL in env values, commands or args
  (runc cannot pass one to the process, so the pod never starts, with no reason given);
- every label key and annotation key a qualified name, every label value a label value, all of
  them strings (`ValidateLabels`, `ValidateAnnotations`): a layer writing `team: a b` or
  `team: 5` gets a 422 (or a 400 decode error) that names the object's field, not the runSpec.

So render refuses each, naming the runSpec path (for size, the item's largest values), and the
item fails in W&B with that reason. The object is measured as compact JSON: larger than the
protobuf etcd stores, and the headroom covers what the API server adds (`managedFields`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from launch_agent.model.labels import is_label_value, is_qualified_name
from launch_agent.model.queue_spec import Problem
from launch_agent.render.paths import Item, Path, format_path, item_label

LAYER = "runSpec.resource_args.kubernetes"  # policy.LAYER_PREFIX: where metadata comes from
MAX_ANNOTATION_BYTES = 256 * 1024
MAX_OBJECT_BYTES = 1_400_000  # of 1,572,864: room for managedFields and status

# runSpec values the render copies into the workload, for blame.
COPIED = (
    ("name",),
    ("author",),
    ("job",),
    ("overrides", "args"),
    ("overrides", "entry_point"),
    ("overrides", "run_config"),
    ("overrides", "files"),
    ("overrides", "artifacts"),
    ("resource_args", "kubernetes"),
)


def _bytes(value: Any) -> int:
    if isinstance(value, str):
        return len(value.encode("utf-8", "surrogatepass"))
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    return len(text.encode("utf-8", "surrogatepass"))


def largest_values(run_spec: Mapping[str, Any], count: int = 3) -> list[tuple[str, int]]:
    """The item's largest copied values: (runSpec path, JSON bytes), largest first."""
    sizes = []
    for path in COPIED:
        node: Any = run_spec
        for key in path:
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is not None:
            sizes.append(("runSpec." + ".".join(path), _bytes(node)))
    return sorted(sizes, key=lambda s: -s[1])[:count]


def _blame(run_spec: Mapping[str, Any]) -> tuple[str, str]:
    found = largest_values(run_spec)
    if not found:
        return "runSpec", ""
    listed = ", ".join(f"{path} ({size:,} bytes)" for path, size in found)
    return found[0][0], f"; the item's largest values: {listed}"


def _under(node: Any, keys: frozenset[str], path: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every value under one of `keys`, anywhere (`metadata` of the object, its pod templates
    and any other; `env`, `command`, `args` of every container), with its path."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in keys:
                yield (*path, key), value
            if isinstance(value, dict | list):
                yield from _under(value, keys, (*path, str(key)))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            if isinstance(value, dict | list):
                yield from _under(value, keys, (*path, Item(item_label(value, i))))


def _metadata(node: Any) -> Iterator[tuple[Path, Any]]:
    return _under(node, frozenset({"metadata"}))


def _quote(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def metadata_problems(manifest: Mapping[str, Any]) -> list[Problem]:
    """Metadata, labels and annotations kube-apiserver would refuse, at runSpec paths. Run
    before the pipeline stamps its own labels, which would replace a mistyped mapping."""
    problems = []
    for path, meta in _metadata(manifest):
        where = format_path(path)
        if isinstance(meta, Mapping):
            problems += _labels_and_annotations(where, meta)
        elif meta is not None:
            problems.append(Problem(f"{LAYER}.{where}", f"must be a mapping, not {_quote(meta)}"))
    return problems


# kubernetes `pkg/apis/core/validation/validation.go` `validateEnvVarName` with
# RelaxedEnvironmentVariableValidation (on by default since 1.32): printable ASCII but `=`.
_ENV_NAME = re.compile(r"[\x20-\x3c\x3e-\x7e]+")
_PROCESS_FIELDS = frozenset({"env", "command", "args"})
_NUL = "holds a NUL character, which no process can receive in argv or env"


def process_problems(manifest: Mapping[str, Any]) -> list[Problem]:
    """Env names the API server refuses (a look-alike `ＷANDB_API_KEY`), and NUL in env
    values, commands and args, which no process can receive (runc refuses the container, the
    run never starts), at runSpec paths."""
    problems = []
    for path, value in _under(manifest, _PROCESS_FIELDS):
        if not isinstance(value, list):
            continue
        where = f"{LAYER}.{format_path(path)}"
        if path[-1] != "env":
            for i, arg in enumerate(value):
                if isinstance(arg, str) and "\x00" in arg:
                    problems.append(Problem(f"{where}[{i}]", _NUL))
            continue
        for entry in value:
            if not isinstance(entry, dict):
                continue
            name = entry.get("name")
            at = f"{where}[{str(name)[:80]}]"
            if isinstance(name, str) and not _ENV_NAME.fullmatch(name):
                problems.append(
                    Problem(
                        at,
                        f"{_quote(name)} is not a valid env var name (printable ASCII, no '=');"
                        " the API server would refuse it",
                    )
                )
            if isinstance(entry.get("value"), str) and "\x00" in entry["value"]:
                problems.append(Problem(f"{at}.value", _NUL))
    return problems


def _labels_and_annotations(where: str, meta: Mapping[str, Any]) -> list[Problem]:
    problems = []
    for field, value_check in (("labels", True), ("annotations", False)):
        entries = meta.get(field)
        if entries is None:
            continue
        path = f"{LAYER}.{where}.{field}"
        if not isinstance(entries, Mapping):
            problems.append(Problem(path, f"must be a mapping of strings, not {_quote(entries)}"))
            continue
        for key, value in entries.items():
            at = f'{path}["{str(key)[:80]}"]'
            # apimachinery lower-cases annotation keys before `IsQualifiedName`.
            if not isinstance(key, str) or not is_qualified_name(
                key if value_check else key.lower()
            ):
                problems.append(
                    Problem(
                        at,
                        f"{_quote(key)} is not a valid {field[:-1]} key (an optional DNS"
                        " subdomain and '/', then at most 63 of A-Z a-z 0-9 - _ . starting and"
                        " ending with a letter or digit)",
                    )
                )
            if not isinstance(value, str):
                problems.append(Problem(at, f"must be a string, not {_quote(value)}"))
            elif value_check and not is_label_value(value):
                problems.append(
                    Problem(
                        at,
                        f"{_quote(value)} is not a valid label value (at most 63 of A-Z a-z 0-9"
                        " - _ . starting and ending with a letter or digit, or empty)",
                    )
                )
    return problems


def size_problems(
    manifest: Mapping[str, Any], run_spec: Mapping[str, Any], templates: int
) -> list[Problem]:
    """What of the rendered `manifest` Kubernetes would refuse for its size; `run_spec` is the
    item's, for blame, and `templates` the number of pod templates the run was copied into."""
    problems = []
    for path, meta in _metadata(manifest):
        annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
        if not isinstance(annotations, Mapping):
            continue
        total = sum(_bytes(str(k)) + _bytes(str(v)) for k, v in annotations.items())
        if total > MAX_ANNOTATION_BYTES:
            biggest = max(annotations, key=lambda k: _bytes(str(annotations[k])))
            where = format_path((*path, "annotations"))
            problems.append(
                Problem(
                    f"{LAYER}.{where}",
                    f"the annotations of {where} would be {total:,} bytes; Kubernetes allows"
                    f" {MAX_ANNOTATION_BYTES:,} (the largest: {str(biggest)[:80]!r},"
                    f" {_bytes(str(annotations[biggest])):,} bytes)",
                )
            )
    size = _bytes(manifest)
    if size > MAX_OBJECT_BYTES:
        blamed, listed = _blame(run_spec)
        kind = manifest.get("kind", "workload")
        problems.append(
            Problem(
                blamed,
                f"the rendered {kind} would be {size:,} bytes (the run is copied into"
                f" {templates} pod template{'s' if templates != 1 else ''}); Kubernetes stores"
                f" objects up to 1.5 MiB and the agent allows {MAX_OBJECT_BYTES:,}{listed}",
            )
        )
    return problems
