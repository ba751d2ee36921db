"""`fieldValidation=Strict`: reject unknown fields, as kube-apiserver does for kubectl.

Core kinds are checked against the strict JSON schemas bundled with `kubernetes_validate`
(Kubernetes 1.37, `additionalProperties: false` everywhere; an optional dependency, the
`validate` extra, so without it a Strict request for a core kind is answered 500 with the
install hint rather than passed unchecked); custom resources against their
CRD's `openAPIV3Schema`, closed the way `../shared/reference/helm-and-validators.md` §8 explains:
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
import json
from collections.abc import Mapping
from importlib import resources as importlib_resources
from typing import Any

import jsonschema
from referencing import Registry, Resource

from launch_agent.sandbox.kube import errors
from launch_agent.sandbox.kube.resources import ResourceType

K8S_SCHEMA_VERSION = "v1.37.0-local-strict"


def _field_path(parts: Any) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


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


def _load_core(kind: str, api_version: str) -> jsonschema.protocols.Validator | None:
    base = (
        importlib_resources.files("kubernetes_validate")
        / "kubernetes-json-schema"
        / K8S_SCHEMA_VERSION
    )
    group, _, version = api_version.rpartition("/")
    short = f"{group.split('.')[0]}-{version}" if group else version
    path = base / f"{kind.lower()}-{short}.json"
    if not path.is_file():
        return None
    schema = json.loads(path.read_text(encoding="utf-8"))
    definitions = json.loads((base / "_definitions.json").read_text(encoding="utf-8"))
    registry: Registry[Any] = Resource.from_contents(schema) @ Registry()
    registry = Resource.from_contents(definitions) @ registry
    return jsonschema.Draft202012Validator(schema, registry=registry)


def _build_crd(schema: Mapping[str, Any]) -> jsonschema.protocols.Validator:
    closed = close_schema(dict(schema))
    closed.setdefault("properties", {})
    return jsonschema.Draft7Validator(closed)


class StrictValidators:
    """Validators by resource, built on demand off the event loop."""

    def __init__(self) -> None:
        self._ready: dict[tuple[str, str], jsonschema.protocols.Validator | None] = {}
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
                    built = await loop.run_in_executor(None, _load_core, rt.kind, rt.api_version)
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
        validator = self._ready.get((rt.api_version, rt.kind))
        if validator is None:
            return  # no schema known for this kind: accept, like a CRD without a schema
        error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
        if error is None:
            return
        name = str((obj.get("metadata") or {}).get("name", ""))
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = set(
                (error.schema.get("properties") or {}) if isinstance(error.schema, dict) else ()
            )
            unknown = sorted(k for k in error.instance if k not in allowed)
            where = _field_path(error.absolute_path)
            fields = ", ".join(
                f'unknown field "{where + "." if where else ""}{u}"' for u in unknown
            )
            raise errors.bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}:'
                f" strict decoding error: {fields}"
            )
        raise errors.invalid(
            rt, name, [(_field_path(error.absolute_path) or "(root)", error.message)]
        )
