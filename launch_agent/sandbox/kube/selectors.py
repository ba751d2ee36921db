"""Label and field selectors, parsed once per request and matched against every object.

The grammar is Kubernetes' own (`k8s.io/apimachinery/pkg/labels`): requirements separated by
commas, each one of `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a,b)`, `k` (exists) and `!k`
(does not exist). A `!=` or `notin` requirement also matches objects without the label, as in
Kubernetes. Field selectors support `=`, `==` and `!=` on the fields a real API server indexes
for the resources the sandbox serves: `metadata.name`, `metadata.namespace` and, for pods,
`status.phase` and `spec.nodeName`. Anything else is a `SelectorError` whose message the server
returns as a 400, like kube-apiserver does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
_SET = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_EQ = re.compile(r"^\s*([^\s!=]+)\s*(==|=|!=)\s*([^\s]*)\s*$")
_EXISTS = re.compile(r"^\s*(!?)\s*([^\s!=()]+)\s*$")

FIELDS_BY_RESOURCE: Mapping[str, frozenset[str]] = {
    "pods": frozenset({"status.phase", "spec.nodeName", "spec.restartPolicy"}),
    "events": frozenset(
        {"involvedObject.name", "involvedObject.kind", "involvedObject.uid", "reason", "type"}
    ),
    "secrets": frozenset({"type"}),
}
COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


class SelectorError(ValueError):
    """A selector that does not parse; the message says which part and why."""


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        return not present or value not in self.values


@dataclass(frozen=True)
class LabelSelector:
    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        have = labels or {}
        return all(r.matches(have) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside `in (...)` parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise SelectorError(f"unbalanced '(' in {text!r}")
    parts.append("".join(current))
    return parts


def _check_key(key: str, text: str) -> str:
    if not _KEY.match(key) or len(key.rsplit("/", maxsplit=1)[-1]) > 63:
        raise SelectorError(f"invalid label key {key!r} in selector {text!r}")
    return key


def _check_value(value: str, text: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise SelectorError(f"invalid label value {value!r} in selector {text!r}")
    return value


def parse_label_selector(text: str | None) -> LabelSelector:
    """Parse a `labelSelector` query parameter; empty or None selects everything."""
    if text is None or not text.strip():
        return LabelSelector()
    requirements = []
    for part in _split_top_level(text):
        if not part.strip():
            raise SelectorError(f"empty requirement in selector {text!r}")
        if m := _SET.match(part):
            if m.group(1):
                raise SelectorError(f"'!' cannot be combined with {m.group(3)} in {part!r}")
            values = frozenset(
                _check_value(v.strip(), text) for v in m.group(4).split(",") if v.strip()
            )
            if not values:
                raise SelectorError(f"{m.group(3)} needs at least one value in {part!r}")
            requirements.append(Requirement(_check_key(m.group(2), text), m.group(3), values))
        elif m := _EQ.match(part):
            op = "!=" if m.group(2) == "!=" else "="
            key, value = _check_key(m.group(1), text), _check_value(m.group(3), text)
            requirements.append(Requirement(key, op, frozenset({value})))
        elif m := _EXISTS.match(part):
            op = "!exists" if m.group(1) else "exists"
            requirements.append(Requirement(_check_key(m.group(2), text), op))
        else:
            raise SelectorError(f"unable to parse requirement {part.strip()!r} in {text!r}")
    return LabelSelector(tuple(requirements))


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        current: Any = obj
        for part in self.path.split("."):
            current = current.get(part) if isinstance(current, Mapping) else None
        actual = "" if current is None else str(current)
        return (actual == self.value) != self.negate


@dataclass(frozen=True)
class FieldSelector:
    requirements: tuple[FieldRequirement, ...] = ()

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return all(r.matches(obj) for r in self.requirements)


def parse_field_selector(text: str | None, resource: str) -> FieldSelector:
    """Parse a `fieldSelector` for `resource` (a plural such as "pods")."""
    if text is None or not text.strip():
        return FieldSelector()
    allowed = COMMON_FIELDS | FIELDS_BY_RESOURCE.get(resource, frozenset())
    requirements = []
    for part in text.split(","):
        m = _EQ.match(part)
        if m is None:
            raise SelectorError(f"invalid field selector requirement {part.strip()!r}")
        path, op, value = m.groups()
        if path not in allowed:
            raise SelectorError(
                f'field label not supported: "{path}" for {resource}'
                f" (supported: {', '.join(sorted(allowed))})"
            )
        requirements.append(FieldRequirement(path, value, negate=op == "!="))
    return FieldSelector(tuple(requirements))


def selector_from_label_selector(spec: Mapping[str, Any] | None) -> LabelSelector:
    """A `metav1.LabelSelector` object (matchLabels / matchExpressions) as a `LabelSelector`."""
    if not spec:
        return LabelSelector()
    requirements = [
        Requirement(k, "=", frozenset({str(v)})) for k, v in (spec.get("matchLabels") or {}).items()
    ]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}
    for expr in spec.get("matchExpressions") or []:
        op = ops.get(str(expr.get("operator")))
        if op is None:
            raise SelectorError(f"unknown matchExpressions operator {expr.get('operator')!r}")
        values = frozenset(str(v) for v in expr.get("values") or [])
        requirements.append(Requirement(str(expr.get("key")), op, values))
    return LabelSelector(tuple(requirements))
