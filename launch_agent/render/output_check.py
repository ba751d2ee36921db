"""Validate rendered objects the way the API server would (`fieldValidation=Strict`).

- Built-in kinds (batch/v1 Job) go through `kubernetes_validate` with the strict schemas of
  the target Kubernetes version.
- Custom resources are checked against their CRD's openAPIV3Schema, shipped in
  `schemas/crds/` by `scripts/extract_crd_schemas.py` (closed against unknown fields, defaulted
  required fields relaxed, `nullable` translated), plus the checks JSON Schema cannot make:
  apiVersion/kind, the name's length and DNS form, label values; then, when the schema
  passes, the CRD's CEL rules (`x-kubernetes-validations`, `cel_check`, cel-python).
- Every pod template inside a custom resource is also wrapped as a `v1 PodTemplate` and checked
  with `kubernetes_validate`, which catches what the CRD's copy of the pod schema may not.

`kubernetes-validate` is an optional dependency (`pip install 'launch-agent[validate]'`, 100 MB
of schemas); `MissingValidator` says so when it is absent. This is for `launch-agent validate`,
tests and an optional pre-submit check, never the render hot path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from functools import cache
from typing import Any

import jsonschema

from launch_agent.model.labels import is_label_value
from launch_agent.model.queue_spec import CustomKind, Problem
from launch_agent.render.cel_check import MissingCel, has_rules, rule_problems
from launch_agent.render.kind_schema import crd_schema, format_checker
from launch_agent.render.kinds import KindInfo, kind_info, unknown_kind
from launch_agent.render.paths import format_path
from launch_agent.render.spec_load import json_path

KUBERNETES_VERSION = "1.33"
INSTALL_HINT = (
    "output validation needs kubernetes-validate (and cel-python for the CRDs' CEL rules):"
    " pip install 'launch-agent[validate]'"
    " (or pip install kubernetes-validate==1.37.0 cel-python==0.5.0)"
)
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class MissingValidator(RuntimeError):
    def __init__(self) -> None:
        super().__init__(INSTALL_HINT)


@cache
def crd_validator(info_key: tuple[str, str, str]) -> jsonschema.protocols.Validator | None:
    """The validator for `(plural, group, version)`, or None if no schema ships for it."""
    schema = crd_schema(*info_key)
    if schema is None:
        return None
    return jsonschema.Draft7Validator(schema, format_checker=format_checker())


@cache
def _crd_has_rules(info_key: tuple[str, str, str]) -> bool:
    return has_rules(crd_schema(*info_key))


def _kubernetes_validate() -> Any:
    try:
        import kubernetes_validate
    except ImportError as exc:
        raise MissingValidator from exc
    return kubernetes_validate


def _k8s_problems(obj: Mapping[str, Any], prefix: str, version: str) -> list[Problem]:
    kv = _kubernetes_validate()
    try:
        kv.validate(dict(obj), version, strict=True)
    except kv.ValidationError as exc:
        where = json_path(getattr(exc, "path", ()))
        return [Problem(f"{prefix}{'.' if where and prefix else ''}{where}", exc.message)]
    return []


def _meta_problems(obj: Mapping[str, Any], info: KindInfo) -> list[Problem]:
    problems = []
    if obj.get("apiVersion") != info.api_version or obj.get("kind") != info.kind:
        problems.append(Problem("apiVersion", f"must be {info.api_version} {info.kind}"))
    meta = obj.get("metadata") or {}
    name = meta.get("name", "")
    if not isinstance(name, str) or not _DNS_LABEL.match(name) or len(name) > info.max_name:
        problems.append(
            Problem(
                "metadata.name",
                f"{name!r} must be a DNS label starting with a letter, at most {info.max_name}"
                f" characters for a {info.label}",
            )
        )
    return problems


def _label_problems(labels: Any, where: str) -> list[Problem]:
    if not isinstance(labels, dict):
        return []
    return [
        Problem(f'{where}["{k}"]', f"{v!r} is not a valid label value")
        for k, v in labels.items()
        if not isinstance(v, str) or not is_label_value(v)
    ]


def validate_object(
    obj: Mapping[str, Any],
    custom: CustomKind | None = None,
    *,
    version: str = KUBERNETES_VERSION,
) -> list[Problem]:
    """Every problem the API server would report for `obj` (as far as schemas can tell)."""
    api_version, kind = str(obj.get("apiVersion", "")), str(obj.get("kind", ""))
    info = kind_info(api_version, kind, custom)
    if info is None:
        return [Problem("kind", unknown_kind(api_version, kind))]
    problems = _meta_problems(obj, info)
    problems += _label_problems((obj.get("metadata") or {}).get("labels"), "metadata.labels")
    if info.builtin:
        return problems + _k8s_problems(obj, "", version)
    group, _, ver = api_version.rpartition("/")
    validator = crd_validator((info.plural, group, ver))
    if validator is not None:
        body = {k: v for k, v in obj.items() if k != "metadata"}
        for err in sorted(validator.iter_errors(body), key=lambda e: list(map(str, e.path))):
            problems.append(Problem(json_path(err.absolute_path), _short(err.message)))
        if not problems and _crd_has_rules((info.plural, group, ver)):
            # The CRD's CEL rules run only on an object that passed its schema
            # (customresource/strategy.go, hasBlockingErr).
            schema = crd_schema(info.plural, group, ver) or {}
            try:
                problems += rule_problems(schema, obj)
            except MissingCel as exc:
                raise MissingValidator from exc
    for path, tmpl in info.pod_template_matches(obj):
        where = format_path(path)
        problems += _label_problems(
            (tmpl.get("metadata") or {}).get("labels"), f"{where}.metadata.labels"
        )
        wrapped = {
            "apiVersion": "v1",
            "kind": "PodTemplate",
            "metadata": {"name": "x"},
            "template": tmpl,
        }
        for p in _k8s_problems(wrapped, "", version):
            inner = p.path.removeprefix("template").lstrip(".")
            problems.append(Problem(f"{where}.{inner}" if inner else where, p.reason))
    return problems


def validate_objects(
    objects: Iterable[Mapping[str, Any]],
    custom: CustomKind | None = None,
    *,
    version: str = KUBERNETES_VERSION,
) -> list[Problem]:
    """Problems of every object; paths are prefixed with the object's index when there are
    several."""
    objects = list(objects)
    out = []
    for i, obj in enumerate(objects):
        prefix = f"[{i}]." if len(objects) > 1 else ""
        problems = validate_object(obj, custom, version=version)
        out += [Problem(prefix + p.path, p.reason) for p in problems]
    return out


def _short(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
