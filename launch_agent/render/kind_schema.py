"""The schema of a workload kind, for checking a queue spec's template and `overridable` globs.

Two sources, both shipped as package data (read with `importlib.resources`, no other I/O):

- custom resources: the CRD's openAPIV3Schema in `schemas/crds/` (self-contained, no `$ref`);
- built-in kinds (batch/v1 Job): the strict schemas `kubernetes-validate` ships, whose
  `$ref`s point into its `_definitions.json`. It is an optional dependency (`validate` extra):
  without it, built-in templates are checked at `launch-agent validate` only (which says so).

`glob_fits` walks a glob through the schema: a glob that no path the schema allows can match
(`**.contaners[*].env`) can never let a submitter set anything, which is always a typo.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from launch_agent.render.kinds import KindInfo
from launch_agent.render.paths import AnyItem, AnyKey, Deep, Glob, Item

KUBERNETES_VERSION = "1.33"
_INT32 = (-(2**31), 2**31 - 1)
_INT64 = (-(2**63), 2**63 - 1)


def format_checker() -> jsonschema.FormatChecker:
    checker = jsonschema.FormatChecker()

    @checker.checks("int32")
    def int32(value: object) -> bool:
        return not isinstance(value, int) or _INT32[0] <= value <= _INT32[1]

    @checker.checks("int64")
    def int64(value: object) -> bool:
        return not isinstance(value, int) or _INT64[0] <= value <= _INT64[1]

    return checker


@dataclass(frozen=True)
class KindSchema:
    """A kind's root schema, its `$ref` definitions and a validator over both."""

    root: Mapping[str, Any]
    defs: Mapping[str, Any]
    validator: jsonschema.protocols.Validator

    def deref(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = node.get("$ref")
        if not isinstance(ref, str):
            return node
        name = ref.rpartition("/$defs/")[2]
        found = self.defs.get(name)
        return found if isinstance(found, Mapping) else {}


@cache
def crd_schema(plural: str, group: str, version: str) -> dict[str, Any] | None:
    name = f"{plural}.{group}_{version}.json"
    path = resources.files("launch_agent.render").joinpath("schemas", "crds", name)
    if not path.is_file():
        return None
    schema: dict[str, Any] = json.loads(path.read_text())
    schema.pop("x-launch-agent-source", None)
    return schema


@cache
def _builtin_schema(api_version: str, kind: str, version: str) -> KindSchema | None:
    try:
        from referencing import Registry, Resource
    except ImportError:  # pragma: no cover - jsonschema depends on referencing
        return None
    try:
        import kubernetes_validate
    except ImportError:
        return None
    group_version = re.sub(r"^([^./]*)(?:\.[^/]*)?/", r"\1-", api_version)
    base = resources.files(kubernetes_validate).joinpath("kubernetes-json-schema")
    folder = base.joinpath(f"v{version}.0-local-strict")
    kind_file = folder.joinpath(f"{kind.lower()}-{group_version}.json")
    if not kind_file.is_file():
        return None
    root = json.loads(kind_file.read_text())
    definitions = json.loads(folder.joinpath("_definitions.json").read_text())
    registry: Registry[Any] = Resource.from_contents(root) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    validator = jsonschema.Draft202012Validator(
        root, registry=registry, format_checker=format_checker()
    )
    return KindSchema(root, definitions.get("$defs", {}), validator)


def kind_schema(info: KindInfo, version: str = KUBERNETES_VERSION) -> KindSchema | None:
    """The schema of `info`'s kind, or None when none ships (or kubernetes-validate is absent)."""
    if info.builtin:
        return _builtin_schema(info.api_version, info.kind, version)
    group, _, ver = info.api_version.rpartition("/")
    return _crd_kind_schema(info.plural, group, ver)


@cache
def _crd_kind_schema(plural: str, group: str, version: str) -> KindSchema | None:
    schema = crd_schema(plural, group, version)
    if schema is None:
        return None
    return KindSchema(
        schema, {}, jsonschema.Draft7Validator(schema, format_checker=format_checker())
    )


# ------------------------------------------------------------------------------ glob walking


class _Open:
    """A schema node that admits any key below it (`x-kubernetes-preserve-unknown-fields`)."""


OPEN = _Open()


def _alternatives(ks: KindSchema, node: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    node = ks.deref(node)
    yield node
    for key in ("allOf", "anyOf", "oneOf"):
        for sub in node.get(key, ()):
            if isinstance(sub, Mapping):
                yield from _alternatives(ks, sub)


def _is_open(node: Mapping[str, Any]) -> bool:
    if node.get("x-kubernetes-preserve-unknown-fields") is True:
        return True
    has_shape = any(k in node for k in ("properties", "items", "$ref", "allOf", "anyOf", "oneOf"))
    extra = node.get("additionalProperties", True)
    types = node.get("type")
    scalar = types is not None and not (
        types in ("object", "array")
        or (isinstance(types, list) and {"object", "array"} & set(types))
    )
    return not has_shape and extra is True and not scalar


def _children(
    ks: KindSchema,
    node: Mapping[str, Any],
    seg: str | Item | AnyKey | AnyItem,
    *,
    named_only: bool = False,
) -> list[Mapping[str, Any]] | _Open:
    out: list[Mapping[str, Any]] = []
    for alt in _alternatives(ks, node):
        if _is_open(alt):
            if named_only:
                continue
            return OPEN
        props = alt.get("properties", {})
        extra = alt.get("additionalProperties")
        if isinstance(seg, str):
            if seg in props:
                out.append(props[seg])
            elif isinstance(extra, Mapping) and not named_only:
                out.append(extra)
        elif isinstance(seg, AnyKey):
            out += list(props.values())
            if isinstance(extra, Mapping):
                out.append(extra)
        else:
            items = alt.get("items")
            if isinstance(items, Mapping):
                out.append(items)
    return out


def _descendants(ks: KindSchema, nodes: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Every schema node at or below `nodes`.

    Open nodes (free-form objects such as `managedFields[].fieldsV1`) are not entered: `**`
    then names a field the kind defines, which is what an admin means by it.
    """
    seen: dict[int, Mapping[str, Any]] = {}
    stack = list(nodes)
    while stack:
        node = ks.deref(stack.pop())
        if id(node) in seen:
            continue
        seen[id(node)] = node
        for seg in (AnyKey(), AnyItem()):
            found = _children(ks, node, seg, named_only=True)
            if not isinstance(found, _Open):
                stack += found
    return list(seen.values())


def _keys(ks: KindSchema, nodes: list[Mapping[str, Any]]) -> list[str]:
    keys: list[str] = []
    for node in nodes:
        for alt in _alternatives(ks, node):
            keys += [k for k in alt.get("properties", {}) if k not in keys]
    return keys


def glob_fits(ks: KindSchema, glob: Glob) -> tuple[bool, str]:
    """(True, "") if some path the schema allows matches `glob`; else (False, a reason)."""
    states: list[Mapping[str, Any]] = [ks.root]
    after_deep = False
    for index, seg in enumerate(glob):
        found: list[Mapping[str, Any]] = []
        if isinstance(seg, Deep):
            found = _descendants(ks, states)
        else:
            for node in states:
                # After `**` a key names a field, not an entry of a free-form map (labels).
                step = _children(ks, node, seg, named_only=after_deep and isinstance(seg, str))
                if isinstance(step, _Open):
                    return True, ""
                found += step
        after_deep = isinstance(seg, Deep)
        if not found:
            return False, _why(ks, glob, index, states)
        states = found
    return True, ""


def _why(ks: KindSchema, glob: Glob, index: int, states: list[Mapping[str, Any]]) -> str:
    seg = glob[index]
    if isinstance(seg, str):
        keys = _keys(ks, states)
        reason = f"no {seg!r} there in the kind's schema"
        match = difflib.get_close_matches(seg, keys, n=1, cutoff=0.6)
        if match:
            reason += f"; did you mean {match[0]!r}?"
        return reason
    if isinstance(seg, Item | AnyItem):
        return "a list selector where the kind's schema has no list"
    return "nothing in the kind's schema is there"


# ------------------------------------------------------------------------ misplaced keys

InstancePath = tuple[str | int, ...]
# How far below an ancestor a misplaced key is looked for: `spec.ttlSecondsAfterFinished` of a
# PyTorchJob is two fields below `spec` (`runPolicy.ttlSecondsAfterFinished`). Deeper finds are
# guesses, not the "same key nearby" that a person misplaced.
_NEARBY = 2


def misplaced(ks: KindSchema, parent: InstancePath, key: str) -> list[InstancePath]:
    """Where `key`, unknown in the object at `parent`, is a field nearby: the paths under the
    nearest of `parent`'s ancestors (itself first) that has the key within `_NEARBY` named
    fields, all at the least depth. The key's own spelling wins over a case-insensitive match
    (`backOffLimit` finds `backoffLimit`). Map entries and list items below an ancestor are not
    entered: they have no one path. Empty when nothing is nearby or the schema is open."""
    levels: list[list[Mapping[str, Any]]] = [[ks.root]]
    for seg in parent:
        step: list[Mapping[str, Any]] = []
        for node in levels[-1]:
            found = _children(ks, node, AnyItem() if isinstance(seg, int) else seg)
            if isinstance(found, _Open):
                return []
            step += found
        if not step:
            return []
        levels.append(step)
    for i in range(len(parent), -1, -1):
        # At the parent itself a key one level down is the did-you-mean's business.
        first = 2 if i == len(parent) else 1
        found_paths = _below(ks, levels[i], key, first)
        if found_paths:
            return [parent[:i] + rel for rel in found_paths]
    return []


def _below(
    ks: KindSchema, nodes: list[Mapping[str, Any]], key: str, first: int
) -> list[tuple[str, ...]]:
    frontier: list[tuple[tuple[str, ...], Mapping[str, Any]]] = [((), n) for n in nodes]
    for depth in range(1, _NEARBY + 1):
        exact: list[tuple[str, ...]] = []
        folded: list[tuple[str, ...]] = []
        deeper: list[tuple[tuple[str, ...], Mapping[str, Any]]] = []
        for rel, node in frontier:
            for alt in _alternatives(ks, node):
                for name, sub in alt.get("properties", {}).items():
                    path = (*rel, name)
                    if depth >= first and name == key and path not in exact:
                        exact.append(path)
                    elif depth >= first and name.lower() == key.lower() and path not in folded:
                        folded.append(path)
                    if isinstance(sub, Mapping):
                        deeper.append((path, sub))
        if exact or folded:
            return exact or folded
        frontier = deeper
    return []
