"""CRD `x-kubernetes-validations`: the CEL rules kube-apiserver applies to custom resources.

Modelled on kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/
validation.go` (`Validator.validate`, `validateExpressions`, `validateMap`, `validateArray`) and
called where `pkg/registry/customresource/strategy.go` calls it (`Validate` on create,
`ValidateUpdate` with the old object on update, after the schema checks passed):

- each rule is evaluated with `self` bound to the value of the schema node that declares it
  (the resource root sees only `apiVersion`, `kind` and `metadata.name`/`generateName`,
  `model.WithTypeAndObjectMeta`); a null or absent value is not validated;
- a rule that names `oldSelf` (a transition rule) runs only on update, and only where the old
  value can be correlated: the same property of an object or map, the item with the same keys
  of an `x-kubernetes-list-type: map` list; never items of other lists (`validateArray`,
  `makeMapList`). `optionalOldSelf: true` rules also run without one (`oldSelf` is then an
  absent optional; the vendored CRDs use none, so this model binds null);
- ratcheting (`CRDValidationRatcheting`, on by default since 1.30): on update, a failing rule
  that does not use `oldSelf` is only a warning when the value it checks (or its nearest
  correlatable ancestor) is unchanged, so such rules are not evaluated there (an operator's
  status write costs about 0.2 ms instead of 2 ms for a JobSet);
- a failing rule is a field error at the node's path (plus the rule's `fieldPath`) with the
  rule's `message`, the evaluated `messageExpression`, or `failed rule: <rule>`, typed by its
  `reason` (`fieldErrorForReason`); since Kubernetes 1.35 the value of an object or array is
  omitted from the text (`<path>: Invalid value: <message>`), a scalar's is quoted; a rule on
  the root reports the path `<nil>` (a nil `field.Path`);
- a rule that fails to evaluate (no such key, no such overload) is an Invalid error
  `<error> evaluating rule: <rule>` (validation.go's wording).

Property names are bound the way `k8s.io/apiserver/pkg/cel/escaping.go` (`Escape`) exposes them:
`a-b` as `a__dash__b`, `.` `__dot__`, `/` `__slash__`, `__` `__underscores__`; a CEL reserved
word as `__word__` and, since `DeclTypeProvider.recognizeKeywordAsFieldName`
(`pkg/cel/types.go`), also as itself (`t.metadata.namespace` in JobSet's CRD). Lists of type
`set` and `map` compare equal whatever their order (`valuesunstructured.go`,
`unstructuredSetList`/`unstructuredMapList`).

The CEL implementation is cel-python (`celpy`); it parses without type-checking, so a rule
calling a function it does not have would only fail when evaluated. `compile_rule` therefore
refuses rules that call functions outside celpy's standard library and the Kubernetes
extensions below: such a rule is skipped, logged and counted (`skipped_rules`), and
`tests/unit/sandbox/test_cel_crds.py` pins the list, so a newly vendored CRD whose rules this
model cannot run fails a test instead of passing unchecked. The vendored CRDs' rules use only
CEL's standard library (`has`, `all`, `exists`, `filter`, `size`, `matches`, `in`), so no
Kubernetes library function (`pkg/cel/library/`) is implemented yet.

Compiling is pure Python (celpy's Lark parser takes about 70 ms to build, then about 1 ms a
rule), so `prepare_documents` compiles a CRD file's rules in the executor thread that parsed
it, and the store finds them cached by schema object.
"""

from __future__ import annotations

import gc
import json
import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import celpy
import celpy.evaluation
from celpy import celtypes
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError

log = logging.getLogger(__name__)

# escaping.go, celReservedSymbols.
RESERVED = frozenset(
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
_EXPAND = re.compile(r"(__|[-./]|[^a-zA-Z0-9\-./_])")
_NO_MEMBER = re.compile(r"no such member in mapping: '(.*)'")
_PLAIN = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
# Macros celpy expands itself; everything else must be in its function table.
_MACROS = frozenset({"has", "all", "exists", "exists_one", "map", "filter", "dyn"})
# Kubernetes CEL library functions (pkg/cel/library/) this model implements: none yet, since
# no vendored rule calls one. Add each with the upstream file it mirrors.
K8S_FUNCTIONS: dict[str, Any] = {}
_KNOWN = frozenset(celpy.evaluation.base_functions) | _MACROS | frozenset(K8S_FUNCTIONS)


def escape(name: str) -> list[str]:
    """The names a property is selectable by in CEL (escaping.go `Escape`; none: inaccessible)."""
    if not name or name[0].isdigit():
        return []
    if name in RESERVED:
        return [f"__{name}__", name]
    if _PLAIN.fullmatch(name) and "__" not in name:
        return [name]
    ok = True

    def expand(m: re.Match[str]) -> str:
        nonlocal ok
        found = {"__": "__underscores__", ".": "__dot__", "-": "__dash__", "/": "__slash__"}
        if m.group(0) not in found:
            ok = False
            return ""
        return found[m.group(0)]

    escaped = _EXPAND.sub(expand, name)
    return [escaped] if ok else []


# --------------------------------------------------------------------------- compiling


class RuleError(ValueError):
    """A rule this model cannot run (parse error, or a function celpy does not provide)."""


@dataclass(frozen=True, slots=True)
class Rule:
    text: str
    message: str
    reason: str | None
    field_path: str
    uses_old_self: bool
    optional_old_self: bool
    program: celpy.Runner
    message_program: celpy.Runner | None
    message_expression: str


# Built at import (about 70 ms: celpy's Lark parser), so no event-loop callback pays for it.
# One parser serves the executor threads that prepare CRD files and the loop thread compiling
# a CRD POSTed over HTTP, so compiles take turns.
_ENV = celpy.Environment()
_ENV_LOCK = threading.Lock()
_PROGRAMS: dict[str, tuple[celpy.Runner, bool]] = {}


def _compile(text: str) -> tuple[celpy.Runner, bool]:
    """(program, whether it names oldSelf); cached by text (`self == oldSelf` is everywhere)."""
    cached = _PROGRAMS.get(text)
    if cached is not None:
        return cached
    with _ENV_LOCK:
        try:
            ast = _ENV.compile(text)
        except CELParseError as exc:
            raise RuleError(f"compilation failed: {exc}") from None
    uses_old = False
    for tree in ast.iter_subtrees():
        if tree.data == "ident" and str(tree.children[0]) == "oldSelf":
            uses_old = True
        name = None
        if tree.data == "ident_arg":
            name = str(tree.children[0])
        elif tree.data == "member_dot_arg":
            name = str(tree.children[1])
        if name is not None and name not in _KNOWN:
            raise RuleError(f"undeclared reference to {name!r} (not in this model's CEL library)")
    program = _ENV.program(ast, functions=K8S_FUNCTIONS or None)
    _PROGRAMS[text] = (program, uses_old)
    return program, uses_old


def compile_rule(spec: Mapping[str, Any]) -> Rule:
    text = str(spec.get("rule") or "")
    program, uses_old = _compile(text)
    message_expression = str(spec.get("messageExpression") or "")
    message_program = _compile(message_expression)[0] if message_expression else None
    return Rule(
        text=text,
        message=str(spec.get("message") or ""),
        reason=spec.get("reason"),
        field_path=str(spec.get("fieldPath") or "").lstrip("."),
        uses_old_self=uses_old,
        optional_old_self=bool(spec.get("optionalOldSelf")),
        program=program,
        message_program=message_program,
        message_expression=message_expression,
    )


@dataclass(slots=True)
class Node:
    """A schema node with rules at or below it (subtrees without rules are left out)."""

    schema: Mapping[str, Any]
    rules: list[Rule] = field(default_factory=list)
    properties: dict[str, Node] = field(default_factory=dict)
    additional: Node | None = None
    items: Node | None = None
    all_of: list[Node] = field(default_factory=list)

    @property
    def map_keys(self) -> tuple[str, ...]:
        if self.schema.get("x-kubernetes-list-type") != "map":
            return ()
        return tuple(self.schema.get("x-kubernetes-list-map-keys") or ())


@dataclass(frozen=True, slots=True)
class Skipped:
    path: str
    rule: str
    reason: str


@dataclass(slots=True)
class CompiledSchema:
    schema: Mapping[str, Any]  # held so the cache key (its id) stays unique
    root: Node | None
    skipped: list[Skipped]


def _build(schema: Any, path: str, skipped: list[Skipped]) -> Node | None:
    if not isinstance(schema, Mapping):
        return None
    node = Node(schema)
    for spec in schema.get("x-kubernetes-validations") or ():
        try:
            node.rules.append(compile_rule(spec))
        except RuleError as exc:
            rule = str(spec.get("rule", ""))
            skipped.append(Skipped(path or "<root>", rule, str(exc)))
            log.warning("CEL rule at %s skipped: %s: %s", path or "<root>", rule, exc)
    for name, sub in (schema.get("properties") or {}).items():
        child = _build(sub, f"{path}.{name}" if path else name, skipped)
        if child is not None:
            node.properties[name] = child
    node.additional = _build(schema.get("additionalProperties"), f"{path}[*]", skipped)
    node.items = _build(schema.get("items"), f"{path}[*]", skipped)
    node.all_of = [n for s in schema.get("allOf") or () if (n := _build(s, path, skipped))]
    if node.rules or node.properties or node.additional or node.items or node.all_of:
        return node
    return None


_COMPILED: dict[int, CompiledSchema] = {}
_COMPILED_LOCK = threading.Lock()


def compile_schema(schema: Mapping[str, Any]) -> CompiledSchema:
    """The rules of one CRD version's openAPIV3Schema, compiled once per schema object."""
    found = _COMPILED.get(id(schema))
    if found is not None and found.schema is schema:
        return found
    skipped: list[Skipped] = []
    compiled = CompiledSchema(schema, _build(schema, "", skipped), skipped)
    with _COMPILED_LOCK:
        _COMPILED[id(schema)] = compiled
    return compiled


def crd_schemas(crd: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for version in (crd.get("spec") or {}).get("versions") or ():
        schema = ((version or {}).get("schema") or {}).get("openAPIV3Schema")
        if isinstance(schema, Mapping):
            yield str(version.get("name", "")), schema


def prepare_documents(docs: Iterable[Mapping[str, Any]]) -> None:
    """Compile the rules of every CRD in `docs` (blocking: the executor thread that parsed them)."""
    for doc in docs:
        if doc.get("kind") == "CustomResourceDefinition":
            for _, schema in crd_schemas(doc):
                compile_schema(schema)
    # The compiled programs (parse trees of many small objects) live as long as the schemas:
    # frozen like them (`apiserver.load_crd_documents`), so full collections, which otherwise
    # land as >100 ms pauses on whatever callback the event loop runs, do not rescan them.
    gc.freeze()


# --------------------------------------------------------------------------- binding


class _UnorderedList(celtypes.ListType):
    """A `set` or `map` list: equal to another with the same items in any order."""

    def __eq__(self, other: Any) -> bool:
        if not isinstance(other, list) or len(self) != len(other):
            return super().__eq__(other)
        rest = list(other)
        for item in self:
            for i, candidate in enumerate(rest):
                try:
                    same = bool(item == candidate)
                except TypeError:
                    same = False
                if same:
                    del rest[i]
                    break
            else:
                return False
        return True

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    __hash__ = None  # type: ignore[assignment]


def to_cel(value: Any, schema: Mapping[str, Any] | None, *, root: bool = False) -> Any:
    """`value` as the CEL value a rule on `schema` sees (`UnstructuredToVal`)."""
    schema = schema if isinstance(schema, Mapping) else {}
    if value is None:
        return None
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, float):
        return celtypes.DoubleType(value)
    if isinstance(value, str):
        return celtypes.StringType(value)
    if isinstance(value, list):
        items = [to_cel(v, schema.get("items")) for v in value]
        if schema.get("x-kubernetes-list-type") in ("set", "map"):
            return _UnorderedList(items)
        return celtypes.ListType(items)
    if isinstance(value, dict):
        props = schema.get("properties")
        if root:
            # WithTypeAndObjectMeta: a rule on the root sees only these of the metadata.
            value = {**value}
            meta = value.get("metadata") or {}
            value["metadata"] = {k: meta[k] for k in ("name", "generateName") if k in meta}
            props = {**(props or {}), "metadata": {"type": "object", "properties": {}}}
        out: dict[Any, Any] = {}
        if isinstance(props, Mapping) and props:
            for key, item in value.items():
                sub = props.get(key, schema.get("additionalProperties"))
                converted = to_cel(item, sub if isinstance(sub, Mapping) else None)
                for name in escape(str(key)):
                    out[celtypes.StringType(name)] = converted
        else:
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                out[celtypes.StringType(str(key))] = to_cel(
                    item, extra if isinstance(extra, Mapping) else None
                )
        return celtypes.MapType(out)
    return value


# --------------------------------------------------------------------------- validating


@dataclass(frozen=True, slots=True)
class FieldError:
    """One `field.Error`: path, type (the Status cause's reason) and `ErrorBody()`."""

    path: str
    type: str
    body: str

    def __str__(self) -> str:
        return f"{self.path}: {self.body}"


def _bad_value(value: Any, schema: Mapping[str, Any]) -> str | None:
    """field.Error's rendering of the value (None: omitted, for objects and arrays)."""
    kind = schema.get("type")
    if kind in ("object", "array") or isinstance(value, dict | list):
        return None
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _field_error(
    path: str, value: Any, schema: Mapping[str, Any], detail: str, reason: Any
) -> FieldError:
    """validation.go `fieldErrorForReason` and field.Error.ErrorBody."""
    if reason == "FieldValueForbidden":
        return FieldError(path, "FieldValueForbidden", f"Forbidden: {detail}")
    if reason == "FieldValueRequired":
        return FieldError(path, "FieldValueRequired", f"Required value: {detail}")
    shown = _bad_value(value, schema)
    if reason == "FieldValueDuplicate":
        body = "Duplicate value" if shown is None else f"Duplicate value: {shown}"
        return FieldError(path, "FieldValueDuplicate", body)
    body = "Invalid value" if shown is None else f"Invalid value: {shown}"
    return FieldError(path, "FieldValueInvalid", f"{body}: {detail}")


def _rule_string(rule: Rule) -> str:
    return rule.message.strip() or rule.text.strip()


def _join(path: str, child: str) -> str:
    return f"{path}.{child}" if path != "<nil>" else child


class _Walk:
    def __init__(self, updating: bool) -> None:
        self.updating = updating
        self.errors: list[FieldError] = []

    def node(
        self,
        node: Node,
        path: str,
        value: Any,
        old: Any,
        unchanged: bool,
        *,
        root: bool = False,
    ) -> None:
        if value is None:
            return
        if node.rules:
            self.rules(node, path, value, old, unchanged=unchanged, root=root)
        for branch in node.all_of:
            self.node(branch, path, value, old, unchanged)
        if isinstance(value, dict):
            old_map = old if isinstance(old, dict) else None
            for key, item in value.items():
                declared = key in (node.schema.get("properties") or {})
                child = node.properties.get(key) if declared else node.additional
                if child is None:
                    continue
                old_item = None if old_map is None else old_map.get(key)
                same = unchanged if old_map is None else (old_item is not None and item == old_item)
                self.node(child, _join(path, str(key)), item, old_item, same)
        elif isinstance(value, list) and node.items is not None:
            keys = node.map_keys
            by_key: dict[str, Any] = {}
            if keys and isinstance(old, list):
                for entry in old:
                    if isinstance(entry, dict):
                        by_key[json.dumps([entry.get(k) for k in keys])] = entry
            for i, item in enumerate(value):
                old_item = None
                if keys and isinstance(item, dict):
                    old_item = by_key.get(json.dumps([item.get(k) for k in keys]))
                # Items of other lists cannot be correlated: they ratchet with the nearest
                # correlatable ancestor (ratchetingOptions.index).
                same = (old_item is not None and item == old_item) if keys else unchanged
                self.node(node.items, f"{path}[{i}]", item, old_item, same)

    def rules(
        self, node: Node, path: str, value: Any, old: Any, *, unchanged: bool, root: bool
    ) -> None:
        runnable = [
            rule
            for rule in node.rules
            # Transition rules need a comparable existing value.
            if (old is not None or not rule.uses_old_self or rule.optional_old_self)
            # Ratcheting: a rule without oldSelf on an unchanged value can only warn, so it is
            # not evaluated (upstream still reports a runtime error there; converting the value
            # for nothing doubled the cost of an operator's status write).
            and (rule.uses_old_self or not (self.updating and unchanged))
        ]
        if not runnable:
            return
        self_value = to_cel(value, node.schema, root=root)
        uses_old = old is not None and any(rule.uses_old_self for rule in runnable)
        old_value = to_cel(old, node.schema, root=root) if uses_old else None
        for rule in runnable:
            activation = {"self": self_value, "oldSelf": old_value}
            try:
                result = rule.program.evaluate(activation)
            except CELEvalError as exc:
                self.errors.append(_eval_error(path, node.schema, exc, rule))
                continue
            if isinstance(result, celtypes.BoolType) and bool(result):
                continue
            at = _join(path, rule.field_path) if rule.field_path else path
            detail = _message(rule, activation)
            self.errors.append(_field_error(at, value, node.schema, detail, rule.reason))


def _eval_error(path: str, schema: Mapping[str, Any], exc: CELEvalError, rule: Rule) -> FieldError:
    reason = str(exc.args[0] if exc.args else exc)
    missing = _NO_MEMBER.fullmatch(reason)
    if missing:
        reason = f"no such key: {missing.group(1)}"  # cel-go's wording (types/err.go)
    if str(reason).startswith("no such overload"):
        detail = (
            f"'{reason}': call arguments did not match a supported operator, function or macro"
            f" signature for rule: {_rule_string(rule)}"
        )
    else:
        detail = f"{reason} evaluating rule: {_rule_string(rule)}"
    return FieldError(
        path,
        "FieldValueInvalid",
        f"Invalid value: {json.dumps(schema.get('type', 'object'))}: {detail}",
    )


def _message(rule: Rule, activation: dict[str, Any]) -> str:
    """validation.go: messageExpression when it gives a usable string, else message or the
    default (`ruleMessageOrDefault`)."""
    if rule.message_program is not None:
        try:
            text = rule.message_program.evaluate(activation)
        except CELEvalError:
            text = None
        if isinstance(text, str) and text.strip() and "\n" not in text and len(text) <= 5120:
            return text.strip()
    if rule.message.strip():
        return rule.message.strip()
    return f"failed rule: {rule.text.strip()}"


def validate(
    compiled: CompiledSchema, obj: Mapping[str, Any], old: Mapping[str, Any] | None
) -> list[FieldError]:
    """The field errors of `obj` (an update's when `old` is given); empty when it passes."""
    if compiled.root is None:
        return []
    walk = _Walk(updating=old is not None)
    walk.node(compiled.root, "<nil>", obj, old, old is not None and obj == old, root=True)
    return walk.errors


def skipped_rules(schemas: Iterable[Mapping[str, Any]]) -> list[Skipped]:
    return [s for schema in schemas for s in compile_schema(schema).skipped]


__all__ = [
    "CompiledSchema",
    "FieldError",
    "RuleError",
    "Skipped",
    "compile_rule",
    "compile_schema",
    "crd_schemas",
    "escape",
    "prepare_documents",
    "skipped_rules",
    "to_cel",
    "validate",
]
