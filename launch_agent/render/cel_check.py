"""A rendered custom resource against its CRD's `x-kubernetes-validations` (CEL), as a create.

`launch-agent validate` renders each queue spec with a sample item; this finds what the API
server would refuse with 422 Invalid for a CEL rule (a TrainJob's name that is no RFC 1035
label, a JobSet with both `startupPolicy: InOrder` and `dependsOn`, a storageUri without a
scheme) before any run is submitted. The rules come from the CRD schemas shipped in
`schemas/crds/` (`scripts/extract_crd_schemas.py` keeps them).

Semantics follow kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/
cel/validation.go` (`validateExpressions`) for a create: `self` is the node's value (the root
sees `apiVersion`, `kind` and only `metadata.name`/`generateName`), absent values are not
checked, rules naming `oldSelf` are transition rules and skipped (there is no old object)
unless `optionalOldSelf`, the message is `messageExpression`'s, else `message`, else
`failed rule: <rule>`, at the node's path plus `fieldPath`, worded like `field.Error`
(`Invalid value: "<string>": <message>`; objects' values omitted since Kubernetes 1.35).
Property names are escaped as `k8s.io/apiserver/pkg/cel/escaping.go` does.

Pure: no I/O; the CEL implementation is cel-python (`celpy`, in the `validate` extra with
kubernetes-validate), imported on first use. This is a second, independent use of the
library: the sandbox's API server (`launch_agent/sandbox/kube/cel.py`) has its own, since the
agent and the world it is tested against share no code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from launch_agent.model.queue_spec import Problem

CEL_HINT = "CRD rule checks need cel-python: pip install 'launch-agent[validate]'"
_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)
_PLAIN = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_ESCAPES = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
_ESCAPABLE = re.compile(r"(__|[-./]|[^a-zA-Z0-9\-./_])")


class MissingCel(RuntimeError):
    def __init__(self) -> None:
        super().__init__(CEL_HINT)


def _celpy() -> Any:
    try:
        import celpy
        import celpy.celparser
        import celpy.celtypes
        import celpy.evaluation
    except ImportError as exc:
        raise MissingCel from exc
    return celpy


def _names(name: str) -> list[str]:
    """The names CEL selects a property by (escaping.go `Escape`); [] when inaccessible."""
    if not name or name[0].isdigit():
        return []
    if name in _RESERVED:
        return [f"__{name}__", name]
    if _PLAIN.fullmatch(name) and "__" not in name:
        return [name]
    parts = _ESCAPABLE.split(name)
    if any(p and _ESCAPABLE.fullmatch(p) and p not in _ESCAPES for p in parts):
        return []
    return ["".join(_ESCAPES.get(p, p) for p in parts)]


@dataclass(frozen=True)
class _Rule:
    text: str
    message: str
    reason: str | None
    field_path: str
    program: Any
    message_program: Any


@cache
def _program(text: str) -> tuple[Any, bool]:
    """(program or None when celpy cannot parse it, whether it names oldSelf)."""
    env = _environment()
    try:
        ast = env.compile(text)
    except _celpy().celparser.CELParseError:
        return None, False  # the API server refuses such a CRD: no object meets the rule
    uses_old = any(
        t.data == "ident" and str(t.children[0]) == "oldSelf" for t in ast.iter_subtrees()
    )
    return env.program(ast), uses_old


@cache
def _environment() -> Any:
    return _celpy().Environment()


def _rules(schema: Mapping[str, Any]) -> Iterator[_Rule]:
    for spec in schema.get("x-kubernetes-validations") or ():
        text = str(spec.get("rule") or "")
        program, uses_old = _program(text)
        if program is None or (uses_old and not spec.get("optionalOldSelf")):
            continue
        message_expression = str(spec.get("messageExpression") or "")
        yield _Rule(
            text=text,
            message=str(spec.get("message") or "").strip(),
            reason=spec.get("reason"),
            field_path=str(spec.get("fieldPath") or "").lstrip("."),
            program=program,
            message_program=_program(message_expression)[0] if message_expression else None,
        )


def _to_cel(value: Any, schema: Any, *, root: bool = False) -> Any:
    t = _celpy().celtypes
    schema = schema if isinstance(schema, Mapping) else {}
    if value is None:
        return None
    if isinstance(value, bool):
        return t.BoolType(value)
    if isinstance(value, int):
        return t.IntType(value)
    if isinstance(value, float):
        return t.DoubleType(value)
    if isinstance(value, str):
        return t.StringType(value)
    if isinstance(value, list):
        return t.ListType([_to_cel(v, schema.get("items")) for v in value])
    if not isinstance(value, dict):
        return value
    props = schema.get("properties")
    extra = schema.get("additionalProperties")
    if root:
        meta = value.get("metadata") or {}
        value = {
            **value,
            "metadata": {k: meta[k] for k in ("name", "generateName") if k in meta},
        }
        props = {**(props or {}), "metadata": {"type": "object", "properties": {}}}
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if isinstance(props, Mapping) and props:
            converted = _to_cel(item, props.get(key, extra))
            for name in _names(str(key)):
                out[t.StringType(name)] = converted
        else:
            out[t.StringType(str(key))] = _to_cel(item, extra)
    return t.MapType(out)


def _shown(value: Any) -> str | None:
    if isinstance(value, dict | list):
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return json.dumps(value) if isinstance(value, str) else str(value)


def _body(rule: _Rule, value: Any, detail: str) -> str:
    """field.Error.ErrorBody for validation.go's `fieldErrorForReason`."""
    if rule.reason == "FieldValueForbidden":
        return f"Forbidden: {detail}"
    if rule.reason == "FieldValueRequired":
        return f"Required value: {detail}"
    shown = _shown(value)
    return f"Invalid value: {detail}" if shown is None else f"Invalid value: {shown}: {detail}"


def _detail(rule: _Rule, activation: dict[str, Any]) -> str:
    if rule.message_program is not None:
        try:
            text = rule.message_program.evaluate(activation)
        except _celpy().evaluation.CELEvalError:
            text = None  # validation.go falls back to the message too
        if isinstance(text, str) and text.strip() and "\n" not in text:
            return text.strip()
    return rule.message or f"failed rule: {rule.text.strip()}"


def _join(path: str, child: str) -> str:
    return f"{path}.{child}" if path else child


def _walk(schema: Any, value: Any, path: str, out: list[Problem], *, root: bool = False) -> None:
    if value is None or not isinstance(schema, Mapping):
        return
    rules = list(_rules(schema))
    if rules:
        activation = {"self": _to_cel(value, schema, root=root), "oldSelf": None}
        celpy = _celpy()
        for rule in rules:
            try:
                result = rule.program.evaluate(activation)
            except celpy.evaluation.CELEvalError as exc:
                reason = str(exc.args[0] if exc.args else exc)
                out.append(Problem(path, f"{reason} evaluating rule: {rule.message or rule.text}"))
                continue
            if isinstance(result, celpy.celtypes.BoolType) and bool(result):
                continue
            at = _join(path, rule.field_path) if rule.field_path else path
            out.append(Problem(at, _body(rule, value, _detail(rule, activation))))
    for branch in schema.get("allOf") or ():
        _walk(branch, value, path, out)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            _walk(props.get(key, extra), item, _join(path, str(key)), out)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _walk(schema.get("items"), item, f"{path}[{i}]", out)


def has_rules(schema: Any) -> bool:
    return '"x-kubernetes-validations"' in json.dumps(schema)


def rule_problems(schema: Mapping[str, Any], obj: Mapping[str, Any]) -> list[Problem]:
    """What kube-apiserver's CEL validation reports for creating `obj` (none: it passes).

    Raises `MissingCel` when a rule is met and cel-python is not installed."""
    out: list[Problem] = []
    _walk(schema, dict(obj), "", out, root=True)
    return out
