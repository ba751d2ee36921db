"""`fieldValidation=Strict`: reject unknown fields, as kube-apiserver does for kubectl.

Core kinds are checked against the strict JSON schemas bundled with `kubernetes_validate`
(Kubernetes 1.37, `additionalProperties: false` everywhere; an optional dependency, the
`validate` extra, so without it a Strict request for a core kind is answered 500 with the
install hint rather than passed unchecked); custom resources against their
CRD's `openAPIV3Schema`, closed the way `scripts/extract_crd_schemas.py` explains:
`additionalProperties: false` on every object node that lists `properties` and neither sets
`additionalProperties` nor `x-kubernetes-preserve-unknown-fields`, `nullable` turned into a
JSON-schema null type, and fields with a `default` dropped from `required` (the API server
defaults them before it validates).

Schemas are large (1.8 MB of definitions; a CRD schema up to 1.4 MB), so `prepare()` builds a
validator once per kind, in an executor thread, and `check()` is then a fast synchronous call.
An unknown field is a 400 BadRequest "strict decoding error", any other schema violation a 422
Invalid, with the field path in both.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources as importlib_resources
from typing import Any

from launch_agent.sandbox.kube import errors
from launch_agent.sandbox.kube.resources import ResourceType

K8S_SCHEMA_VERSION = "v1.37.0-local-strict"


def close_schema(schema: Any) -> Any:
    """A copy of an openAPIV3Schema that rejects unknown fields (see the module docstring)."""
    if isinstance(schema, list):
        return [close_schema(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: close_schema(v) for k, v in schema.items() if k != "nullable"}
    if schema.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    props = schema.get("properties")
    if (
        isinstance(props, dict)
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if isinstance(props, dict) and isinstance(schema.get("required"), list):
        out["required"] = [
            r
            for r in schema["required"]
            if not (isinstance(props.get(r), dict) and "default" in props[r])
        ]
    return out


_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _type_names(schema: Mapping[str, Any]) -> list[str] | None:
    kinds = schema.get("type")
    if kinds is None:
        return None
    return list(kinds) if isinstance(kinds, list) else [str(kinds)]


@dataclass(slots=True)
class _Node:
    """One schema node, resolved and pre-digested so the walk does no lookups it can avoid."""

    types: tuple[type, ...] | None  # None: any type
    bools: bool  # whether True/False are allowed (bool is an int subclass in Python)
    expected: str
    enum: list[Any] | None
    props: dict[str, Any] | None
    extra: Any  # additionalProperties: True, False or a schema
    required: tuple[str, ...]
    items: Any
    alternatives: list[Any] | None  # oneOf/anyOf that are not plain type unions
    all_of: list[Any]


class Walker:
    """Checks an object against a schema: unknown fields, types, enums, required fields.

    A purpose-built walk instead of a general JSON-schema validator: kube-apiserver's strict
    decoding is exactly these checks, and the walk costs tens of microseconds per Job where
    `jsonschema` takes most of a millisecond, which would cap the sandbox below 1,000
    strict creates per second. Schema nodes are digested once (`_Node`) and reused.
    """

    def __init__(
        self, schema: Mapping[str, Any], definitions: Mapping[str, Any] | None = None
    ) -> None:
        self.schema = schema
        self.definitions = definitions or {}
        self._nodes: dict[int, _Node] = {}

    def _node(self, schema: Mapping[str, Any]) -> _Node:
        node = self._nodes.get(id(schema))
        if node is not None:
            return node
        resolved = schema
        while "$ref" in resolved:
            resolved = self.definitions[str(resolved["$ref"]).rsplit("/", 1)[-1]]
        names = _type_names(resolved)
        alternatives = None
        for key in ("oneOf", "anyOf"):
            branches = resolved.get(key)
            if not branches:
                continue
            plain = [_type_names(self._resolve(b)) for b in branches]
            if all(
                p is not None and set(self._resolve(b)) <= {"type", "description"}
                for p, b in zip(plain, branches, strict=True)
            ):
                # int-or-string and quantities: a union of types, checked in one isinstance.
                union = [n for p in plain for n in p or ()]
                names = union if names is None else [n for n in names if n in union]
            else:
                alternatives = list(branches)
        types = None if names is None else tuple(t for n in names for t in _TYPES.get(n, (object,)))
        node = _Node(
            types=types,
            bools=names is None or "boolean" in names,
            expected=" or ".join(n for n in names or () if n != "null"),
            enum=resolved.get("enum"),
            props=resolved.get("properties"),
            extra=resolved.get("additionalProperties", True),
            required=tuple(resolved.get("required") or ()),
            items=resolved.get("items") if isinstance(resolved.get("items"), dict) else None,
            alternatives=alternatives,
            all_of=list(resolved.get("allOf") or ()),
        )
        # Keyed by id: every node is part of `self.schema` or `self.definitions`, which this
        # walker holds, so ids stay unique for its lifetime.
        self._nodes[id(schema)] = node
        return node

    def _resolve(self, schema: Mapping[str, Any]) -> Mapping[str, Any]:
        while "$ref" in schema:
            schema = self.definitions[str(schema["$ref"]).rsplit("/", 1)[-1]]
        return schema

    def check(self, value: Any) -> tuple[list[str], list[tuple[str, str]]]:
        """(unknown field paths, other (path, message) problems)."""
        unknown: list[str] = []
        problems: list[tuple[str, str]] = []
        self._walk(self.schema, value, "", unknown, problems)
        return unknown, problems

    def _fits(self, schema: Mapping[str, Any], value: Any) -> bool:
        unknown: list[str] = []
        problems: list[tuple[str, str]] = []
        self._walk(schema, value, "", unknown, problems)
        return not unknown and not problems

    def _walk(
        self,
        schema: Mapping[str, Any],
        value: Any,
        path: str,
        unknown: list[str],
        problems: list[tuple[str, str]],
    ) -> None:
        node = self._node(schema)
        if node.alternatives is not None and not any(
            self._fits(b, value) for b in node.alternatives
        ):
            problems.append(
                (path or "(root)", f"Invalid value: {value!r}: matches no allowed type")
            )
            return
        for branch in node.all_of:
            self._walk(branch, value, path, unknown, problems)
        if node.types is not None and (
            not isinstance(value, node.types) or (isinstance(value, bool) and not node.bools)
        ):
            problems.append(
                (path or "(root)", f"Invalid value: {value!r}: must be of type {node.expected}")
            )
            return
        if node.enum is not None and value not in node.enum:
            choices = ", ".join(repr(e) for e in node.enum if e is not None)
            problems.append(
                (path or "(root)", f"Unsupported value: {value!r}: supported values: {choices}")
            )
        if isinstance(value, dict):
            props, extra = node.props, node.extra
            for key, item in value.items():
                if props is not None and key in props:
                    self._walk(
                        props[key], item, f"{path}.{key}" if path else key, unknown, problems
                    )
                elif extra is False:
                    unknown.append(f"{path}.{key}" if path else str(key))
                elif isinstance(extra, dict):
                    self._walk(extra, item, f"{path}.{key}" if path else key, unknown, problems)
            for key in node.required:
                if key not in value:
                    problems.append((f"{path}.{key}" if path else key, "Required value"))
        elif isinstance(value, list) and node.items is not None:
            for i, item in enumerate(value):
                self._walk(node.items, item, f"{path}[{i}]", unknown, problems)


def _schema_dir() -> Any:
    files = importlib_resources.files("kubernetes_validate")
    return files / "kubernetes-json-schema" / K8S_SCHEMA_VERSION


@functools.cache
def _definitions() -> dict[str, Any]:
    text = (_schema_dir() / "_definitions.json").read_text(encoding="utf-8")
    definitions: dict[str, Any] = json.loads(text)["$defs"]
    # Hundreds of thousands of immutable objects kept for the process: out of the collected
    # generations, so full collections do not rescan them (see apiserver.load_crd_documents).
    gc.freeze()
    return definitions


@functools.cache
def core_walker(kind: str, api_version: str) -> Walker | None:
    """The strict checker of a built-in kind, None if Kubernetes has no such kind.

    Blocking (reads 1.8 MB of definitions once per process, under the GIL): call it from a
    thread, or before the event loop runs, as the tests do to keep the loop responsive.
    """
    group, _, version = api_version.rpartition("/")
    short = f"{group.split('.')[0]}-{version}" if group else version
    path = _schema_dir() / f"{kind.lower()}-{short}.json"
    if not path.is_file():
        return None
    return Walker(json.loads(path.read_text(encoding="utf-8")), _definitions())


def _build_crd(schema: Mapping[str, Any]) -> Walker:
    return Walker(close_schema(dict(schema)))


class StrictValidators:
    """Validators by resource, built on demand off the event loop."""

    def __init__(self) -> None:
        self._ready: dict[tuple[str, str], Walker | None] = {}
        self._lock = asyncio.Lock()

    async def prepare(self, rt: ResourceType) -> None:
        key = (rt.api_version, rt.kind)
        if key in self._ready:
            return
        async with self._lock:
            if key in self._ready:
                return
            loop = asyncio.get_running_loop()
            if rt.schema is not None:
                built = await loop.run_in_executor(None, _build_crd, rt.schema)
            elif rt.is_custom:
                built = None
            else:
                try:
                    built = await loop.run_in_executor(None, core_walker, rt.kind, rt.api_version)
                except ModuleNotFoundError:
                    # The schemas ship in the optional `validate` extra; refusing is better
                    # than pretending a field was checked.
                    raise errors.ApiError(
                        500,
                        "InternalError",
                        "fieldValidation=Strict for built-in kinds needs the kubernetes-validate"
                        " package: pip install 'launch-agent[validate]'",
                    ) from None
            self._ready[key] = built

    def check(self, rt: ResourceType, obj: Mapping[str, Any]) -> None:
        """Raise 400 for unknown fields, 422 for other violations; call `prepare` first."""
        walker = self._ready.get((rt.api_version, rt.kind))
        if walker is None:
            return  # no schema known for this kind: accept, like a CRD without a schema
        unknown, problems = walker.check(obj)
        if unknown:
            fields = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise errors.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}:'
                f" strict decoding error: {fields}"
            )
        if problems:
            name = str((obj.get("metadata") or {}).get("name", ""))
            raise errors.invalid(rt, name, problems)
