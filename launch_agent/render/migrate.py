"""A W&B run queue's config → a queue spec for `launch-agent migrate`. Pure: data in, text out.

W&B keeps each queue's config in W&B (`defaultResourceConfig`: `{"resource_args":
{"kubernetes": ...}}` with `{{name}}` template variables, each with a JSON schema). The
reference agent applies it as it is, and W&B fills the variables server-side when a run is
pushed, merging the filled config into the item's `resource_args`. So here:

- the config becomes `spec.template` unchanged in form (the Job-spec form or the
  `kubernetes: {...}` custom-resource form; `render.merge.normalise` reads both), with each
  `{{name}}` replaced by its schema's default (or, failing that, its first `enum` value or its
  `minimum`); a variable with none of those stays `{{name}}` and is listed as a decision;
- the template variables come in any shape W&B and its tools write them
  (`read_template_variables`), and a `{{name}}` none defines is a decision naming its paths
  (the written spec is then refused, `spec_load.placeholder_problems`);
- with `fix_misplaced_keys`, a key the kind's schema has in one free place nearby
  (`kind_schema.misplaced`: W&B's examples put a PyTorchJob's `ttlSecondsAfterFinished` at
  `spec`) is moved there first, and every move is listed for review;
- every value a template variable fills becomes an `overridable` path: W&B writes the
  submitter's value there, and anything else in `resource_args` is refused by the override
  policy (a decision: W&B let submitters change everything);
- what the restricted profile forbids and the config needs (privileged, host namespaces,
  hostPath, added capabilities, root, a service account, Secrets) is **not** granted: each is
  listed with its path and the `security:` key that would grant it, as comments in the spec,
  so the admin decides and the spec refuses to load until they do.

The spec is built as data and written by the YAML dumper; nothing of the config is ever
pasted into YAML text. The comments that list what to review quote config values (a volume's
name, a hostPath, a Secret), and a line break in one would end the comment and make the rest
YAML (`name: "data\n  security:\n    privileged: true"` granted `privileged` this way), so
every comment line is printable ASCII only: each other character is written as its escape
(`\n`, `\x85`, `\u2028`), values in the commented grants are JSON (a YAML flow value the
admin can uncomment as it is). Then the written text is read back with the project's loader
(`model.safe_load`) and must be exactly the document: `check_written` refuses anything else,
and a spec whose `spec` holds any key but `queues`, `namespace`, `template` and `overridable`
(a `security` block above all: nothing is granted without the admin), or an `overridable`
entry that is a pattern rather than the one path a template variable fills.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from launch_agent.model.display import one_line
from launch_agent.model.queue_spec import API_VERSION, KIND, InvalidInput, Problem
from launch_agent.model.safe_load import SPEC_LIMITS, InputError, load_yaml
from launch_agent.render.kind_schema import InstancePath, kind_schema, misplaced
from launch_agent.render.kinds import kind_info
from launch_agent.render.merge import normalise
from launch_agent.render.paths import (
    Item,
    Path,
    PathSyntaxError,
    format_path,
    item_label,
    parse_glob,
)

_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")
_DNS_LABEL = re.compile(r"[^a-z0-9-]+")
# W&B's overrides a submitter may set on any W&B queue (`render.policy` checks them).
DEFAULT_OVERRIDES = ("overrides.args", "overrides.entry_point", "overrides.run_config")


# The only keys of `spec` a migrated spec has: no `security`, `sweeps`, `quota` or `kueue`.
SPEC_KEYS = ("queues", "namespace", "template", "overridable")


class NotAQueueConfig(ValueError):
    """The input is not a W&B queue config this command can turn into a spec."""


class UnsafeOutput(ValueError):
    """The written spec would not read back as the document it was written from."""


def comment(text: str) -> str:
    """`text` as the body of one YAML comment line: printable ASCII only, every other
    character as its escape, so no value can end the comment (`\n`, `\r`, NEL, U+2028,
    U+2029) or hold a character the YAML reader refuses."""
    return one_line(text).encode("ascii", "backslashreplace").decode("ascii")


def flow(value: Any) -> str:
    """A value as a one-line YAML flow value (JSON, ASCII, DEL escaped too)."""
    return json.dumps(value, ensure_ascii=True).replace("\x7f", "\\u007f")


@dataclass(frozen=True)
class Finding:
    """Something the config does that the restricted profile forbids: where, what, and the
    `security` key and value that would grant it (data, never YAML text)."""

    path: str
    what: str
    key: str
    value: Any
    # False for what the template may do without a grant but an admin should know (Secrets
    # it names: pods of the queue read them; a submitter may name only granted ones).
    needed: bool = True

    @property
    def grant(self) -> str:
        """`key: value` as the commented grant shows it (the value as JSON: one line)."""
        return f"{self.key}: {flow(self.value)}"


@dataclass(frozen=True)
class Migrated:
    queue: str
    name: str
    document: dict[str, Any]
    findings: tuple[Finding, ...] = ()
    decisions: tuple[str, ...] = ()
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Keys `--fix-misplaced` moved where the kind's schema has them: (from, to), as paths.
    moves: tuple[tuple[str, str], ...] = ()

    def text(self, source: str) -> str:
        """The spec as YAML, with the review list as comments (never as grants), checked by
        reading it back (`check_written`; raises `UnsafeOutput`)."""
        head = [
            f"Queue spec for W&B run queue {self.queue!r}, written by `launch-agent migrate`",
            f"from {source}. Review it before the agent loads it:",
        ]
        head += [f"  - moved {src} to {dst}: review" for src, dst in self.moves]
        head += [f"  - {line}" for line in self.decisions]
        body = yaml.safe_dump(
            self.document, sort_keys=False, default_flow_style=False, allow_unicode=False
        )
        tail: list[str] = []
        needed = tuple(f for f in self.findings if f.needed)
        known = tuple(f for f in self.findings if not f.needed)
        if needed:
            tail += [
                "The config needs these exceptions to the restricted profile. None is granted:",
                "the agent refuses this spec until each is removed from the template or",
                "granted (uncomment; see docs/queue-specs.md#security).",
                "security:",
            ]
            tail += _grant_lines(needed)
        if known:
            tail += [
                "Secrets the template names: every pod of this queue can read them. A",
                "submitter may name a Secret only if it is listed in security.secrets:",
            ]
            tail += _grant_lines(known)
        for name, schema in self.variables.items():
            tail.append(
                f"template variable {name!r}: W&B checked values against"
                f" {flow(schema)}; the agent does not"
            )
        text = (
            "".join(f"# {comment(line)}\n" for line in head)
            + body
            + "".join(f"  # {comment(line)}\n" for line in tail)
        )
        check_written(text, self.document)
        return text


def _grant_lines(findings: tuple[Finding, ...]) -> list[str]:
    """The commented grants, one per `security` key (list values merged, so uncommenting
    them all gives no duplicate key), each followed by the paths that need it."""
    keys: dict[str, list[Finding]] = {}
    for f in findings:
        keys.setdefault(f.key, []).append(f)
    lines = []
    for key, found in keys.items():
        values = [f.value for f in found]
        if all(isinstance(v, list) for v in values):
            merged: list[Any] = []
            for v in values:
                merged += [x for x in v if x not in merged]
            grants = [f"{key}: {flow(merged)}"]
        else:
            grants = list(dict.fromkeys(f"{key}: {flow(v)}" for v in values))
        lines += [f"  {g}" for g in grants]
        lines += [f"    # {f.path}: {f.what}" for f in found]
    return lines


def check_written(text: str, document: dict[str, Any]) -> None:
    """Refuse (`UnsafeOutput`) a written spec that does not read back as exactly `document`,
    or whose `spec` could grant anything: a key but `SPEC_KEYS`, or an `overridable` entry
    that is a pattern rather than one path."""
    try:
        parsed = load_yaml(text, source="the written spec", limits=SPEC_LIMITS)
    except InputError as exc:
        raise UnsafeOutput(f"it cannot be read back: {exc}") from None
    if parsed != document:
        raise UnsafeOutput("it does not read back as the spec it was written from")
    spec = parsed.get("spec") if isinstance(parsed, dict) else None
    if not isinstance(spec, dict) or set(spec) - set(SPEC_KEYS):
        raise UnsafeOutput(f"its spec may hold only {', '.join(SPEC_KEYS)}")
    for glob in spec.get("overridable", []):
        if glob not in DEFAULT_OVERRIDES and literal_path(glob) is None:
            raise UnsafeOutput(f"overridable entry {glob!r} is a pattern, not one path")


def literal_path(glob: str) -> Path | None:
    """The one concrete path `glob` names, or None if it names several (`*`, `[*]`, `**`) or
    is not a path at all."""
    try:
        segs = parse_glob(glob)
    except PathSyntaxError:
        return None
    if not all(isinstance(s, str | Item) for s in segs):
        return None
    return tuple(s for s in segs if isinstance(s, str | Item))


def unwrap(config: Mapping[str, Any]) -> dict[str, Any]:
    """The `kubernetes` part of a queue config, in whichever form W&B gave it.

    Accepts the whole config (`{"resource_args": {"kubernetes": X}}`, optionally with
    `resource`), or X itself as pasted from the W&B UI (the Job-spec form, the
    `kubernetes: {...}` custom-resource form, or a full manifest).
    """
    if not isinstance(config, Mapping):
        raise NotAQueueConfig("a queue config is a JSON/YAML object")
    body: Any = config
    if "resource_args" in body:
        resource = body.get("resource", "kubernetes")
        if resource != "kubernetes":
            raise NotAQueueConfig(f"resource {resource!r}: only kubernetes queues are migrated")
        args = body["resource_args"]
        if not isinstance(args, Mapping) or "kubernetes" not in args:
            raise NotAQueueConfig("resource_args has no `kubernetes` config")
        body = args["kubernetes"]
    if not isinstance(body, Mapping) or not body:
        raise NotAQueueConfig("the kubernetes config is empty: there is nothing to migrate")
    if not ({"spec", "kubernetes", "metadata", "apiVersion"} & set(body)):
        raise NotAQueueConfig(
            "neither W&B form: expected `spec`/`metadata` (Job spec), `kubernetes:` (custom"
            " resource) or a manifest with `apiVersion`/`kind`"
        )
    return copy.deepcopy(dict(body))


def colliding(queues: list[str]) -> list[list[str]]:
    """The groups of queues whose specs would be written to one file (`spec_name` maps them
    to one name: `gpu` and `GPU`, `gpu queue` and `gpu-queue`, the Kelvin sign and `k`,
    names alike in their first 40 characters), each in the given order."""
    by_name: dict[str, list[str]] = {}
    for queue in dict.fromkeys(queues):
        by_name.setdefault(spec_name(queue), []).append(queue)
    return [group for group in by_name.values() if len(group) > 1]


def spec_name(queue: str) -> str:
    """A DNS label from a W&B queue name (`GPU Queue #1` → `gpu-queue-1`)."""
    name = _DNS_LABEL.sub("-", queue.lower()).strip("-")
    if not name or not name[0].isalpha():
        name = f"q-{name}".rstrip("-")
    return name[:40].rstrip("-")


def _default(schema: Mapping[str, Any]) -> tuple[bool, Any]:
    if "default" in schema:
        return True, schema["default"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return True, enum[0]
    if "minimum" in schema:
        return True, schema["minimum"]
    return False, None


def _walk(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _walk(child, (*path, str(key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _walk(child, (*path, Item(item_label(child, index))))


def _fill(
    value: Any, variables: Mapping[str, Mapping[str, Any]], used: dict[str, list[Path]], path: Path
) -> Any:
    """Replace `{{name}}` by the variable's default; remember where each variable lands."""
    if isinstance(value, dict):
        return {k: _fill(v, variables, used, (*path, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [
            _fill(v, variables, used, (*path, Item(item_label(v, i)))) for i, v in enumerate(value)
        ]
    if not isinstance(value, str) or not _VARIABLE.search(value):
        return value
    names = _VARIABLE.findall(value)
    for name in names:
        used.setdefault(name, []).append(path)
    whole = _VARIABLE.fullmatch(value.strip())
    if whole is not None:
        # W&B keeps the type of a leaf that is exactly one variable (`replicas: "{{n}}"` → 3).
        ok, default = _default(variables.get(whole.group(1), {}))
        return default if ok else value

    def one(match: re.Match[str]) -> str:
        ok, default = _default(variables.get(match.group(1), {}))
        return str(default) if ok else match.group(0)

    return _VARIABLE.sub(one, value)


def placeholders(value: Any, path: Path = ()) -> Iterator[tuple[Path, str]]:
    """(path, name) of every `{{name}}` in a string leaf of `value`."""
    for where, leaf in _walk(value, path):
        if isinstance(leaf, str) and "{{" in leaf:
            for name in _VARIABLE.findall(leaf):
                yield where, name


# The keys of one variable in W&B's GraphQL answer (`TemplateVariable {name schema}`), the
# SDK's `RunQueue.template_variables` and the Terraform provider's `template_variables`.
_ENTRY_KEYS = ("name", "schema")


def read_template_variables(data: Any) -> dict[str, dict[str, Any]]:
    """Template variables in any shape W&B and its tools write them → name → JSON schema.

    - `{cpus: {type: integer, default: 2}}`: name → schema, as the W&B UI shows them;
    - `[{name: cpus, schema: ...}]`: W&B's GraphQL `templateVariables`, wandb's public API;
    - `{cpus: {name: cpus, schema: ...}}` (`name` optional): the Terraform provider's map.

    A schema is an object or the JSON text of one (W&B sends `schema` as a JSONString). A
    mapping whose keys are only `name` and `schema` is an entry, anything else a schema.
    Raises `InvalidInput` with every problem, each at its path in the input.
    """
    problems: list[Problem] = []
    out: dict[str, dict[str, Any]] = {}
    if isinstance(data, list):
        for i, entry in enumerate(data):
            where = f"[{i}]"
            if not isinstance(entry, Mapping):
                problems.append(Problem(where, "expected a mapping with `name` and `schema`"))
                continue
            name = entry.get("name")
            if not isinstance(name, str) or not name:
                problems.append(Problem(f"{where}.name", "expected the variable's name"))
                continue
            _entry(out, name, entry, where, problems)
    elif isinstance(data, Mapping):
        for name, value in data.items():
            if _is_entry(value):
                if value.get("name", name) != name:
                    problems.append(
                        Problem(f"{name}.name", f"{value['name']!r} differs from its key {name!r}")
                    )
                    continue
                _entry(out, str(name), value, str(name), problems)
            else:
                schema = _schema(value, str(name), problems)
                if schema is not None:
                    out[str(name)] = schema
    else:
        problems.append(
            Problem(
                "",
                "expected template variables: a mapping of name to JSON schema, a list of"
                " {name, schema} or a mapping of name to {name, schema}",
            )
        )
    if problems:
        raise InvalidInput(problems)
    return out


def _is_entry(value: Any) -> bool:
    return isinstance(value, Mapping) and "schema" in value and set(value) <= set(_ENTRY_KEYS)


def _entry(
    out: dict[str, dict[str, Any]],
    name: str,
    entry: Mapping[str, Any],
    where: str,
    problems: list[Problem],
) -> None:
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        problems.append(
            Problem(f"{where}.{unknown[0]}", f"unknown key {unknown[0]!r}; expected name, schema")
        )
        return
    if name in out:
        problems.append(Problem(where, f"variable {name!r} is defined twice"))
        return
    if "schema" not in entry:
        problems.append(Problem(f"{where}.schema", "missing: the variable's JSON schema"))
        return
    schema = _schema(entry["schema"], f"{where}.schema", problems)
    if schema is not None:
        out[name] = schema


def _schema(value: Any, where: str, problems: list[Problem]) -> dict[str, Any] | None:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            problems.append(Problem(where, f"is not a JSON schema: not JSON ({exc})"))
            return None
    if not isinstance(value, Mapping):
        problems.append(Problem(where, f"expected a JSON schema object, not {_kind(value)}"))
        return None
    return dict(value)


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number" if isinstance(value, int | float) else "a string"


def _manifest_path(path: Path, wrapped: bool) -> Path:
    return path[1:] if wrapped and path[:1] == ("kubernetes",) else path


_CONTAINER_FLAGS = (
    ("privileged", "a privileged container"),
    ("allowPrivilegeEscalation", "privilege escalation allowed"),
)
_POD_FLAGS = ("hostNetwork", "hostPID", "hostIPC")


def _security_context(where: str, value: dict[str, Any]) -> list[Finding]:
    out = []
    for field_, what in _CONTAINER_FLAGS:
        if value.get(field_) is True:
            out.append(Finding(f"{where}.{field_}", what, field_, True))
    caps = value.get("capabilities")
    added = caps.get("add") if isinstance(caps, dict) else None
    if isinstance(added, list) and added:
        names = [str(c) for c in added]
        out.append(Finding(f"{where}.capabilities.add", "adds capabilities", "capabilities", names))
    if value.get("runAsUser") == 0 or value.get("runAsNonRoot") is False:
        out.append(Finding(where, "runs as root", "runAsRoot", True))
    seccomp = value.get("seccompProfile")
    if isinstance(seccomp, dict) and seccomp.get("type") == "Unconfined":
        out.append(
            Finding(f"{where}.seccompProfile", "seccomp unconfined", "seccompUnconfined", True)
        )
    return out


def _secrets(where: str, key: str, value: Any) -> list[Finding]:
    if key in ("secretKeyRef", "secretRef", "secret") and isinstance(value, dict):
        name = value.get("name", value.get("secretName"))
        if isinstance(name, str):
            return [Finding(where, "reads a Secret", "secrets", [name], needed=False)]
    if key == "imagePullSecrets" and isinstance(value, list):
        return [
            Finding(where, "pulls with a Secret", "secrets", [entry["name"]], needed=False)
            for entry in value
            if isinstance(entry, dict) and isinstance(entry.get("name"), str)
        ]
    return []


def findings(template: Any) -> list[Finding]:
    """What in `template` needs an exception to the restricted profile or names a Secret.

    The values (capabilities, a hostPath, a service account, Secret names) are kept as data in
    `Finding.value`; `what` is the project's own words only."""
    out: list[Finding] = []
    for path, value in _walk(template, ()):
        where = format_path(path, "spec.template")
        key = path[-1] if path and isinstance(path[-1], str) else None
        if key == "securityContext" and isinstance(value, dict):
            out += _security_context(where, value)
        elif key in _POD_FLAGS and value is True:
            out.append(Finding(where, f"uses the node's {key[4:]} namespace", key, True))
        elif key == "hostPath" and isinstance(value, dict):
            out.append(
                Finding(where, "mounts a node directory", "hostPaths", [value.get("path", "")])
            )
        elif key == "hostPort" and value:
            out.append(Finding(where, "binds a node port", "hostPorts", True))
        elif key in ("serviceAccountName", "serviceAccount") and isinstance(value, str):
            out.append(Finding(where, "runs as a service account", "serviceAccountName", value))
        elif key == "automountServiceAccountToken" and value is True:
            out.append(Finding(where, "mounts an API token", "automountServiceAccountToken", True))
        elif key is not None:
            out += _secrets(where, key, value)
    return out


def _variable_paths(
    used: dict[str, list[Path]],
    variables: Mapping[str, Mapping[str, Any]],
    wrapped: bool,
    decisions: list[str],
) -> list[str]:
    """The `overridable` path of each place a template variable fills (W&B writes the
    submitter's value there), each naming exactly that place; what needs deciding is appended
    to `decisions`."""
    overridable: list[str] = []
    for name in sorted(used):
        for path in used[name]:
            place = _manifest_path(path, wrapped)
            glob = format_path(place)
            if literal_path(glob) != place:
                # A list item named `*` (or holding `]` or `"`) has no path of its own: the
                # glob would grant more than this one place, or nothing at all.
                decisions.append(
                    f"template variable {name!r} fills {glob}, which no overridable path names"
                    " exactly (a list item's name is a pattern or cannot be written in a"
                    " path): it is not overridable; add a glob if submitters need it"
                )
            elif glob not in overridable:
                overridable.append(glob)
        if name not in variables:
            decisions.append(
                f"template variable {name!r} has no definition (W&B gave no schema for it):"
                f" '{{{{{name}}}}}' stays at {', '.join(format_path(p) for p in used[name])},"
                " which the agent refuses; define it or write a value"
            )
        elif not _default(variables[name])[0]:
            decisions.append(
                f"template variable {name!r} has no default: the template keeps"
                f" '{{{{{name}}}}}' at {', '.join(format_path(p) for p in used[name])};"
                " write a value"
            )
    unused = sorted(set(variables) - set(used))
    if unused:
        decisions.append(f"template variables not used by the config: {', '.join(unused)}")
    return overridable


@dataclass(frozen=True)
class Misplaced:
    """A key the kind's schema does not have where it is, and where it has it nearby."""

    source: InstancePath
    targets: tuple[InstancePath, ...]


def misplaced_keys(manifest: Mapping[str, Any]) -> list[Misplaced]:
    """Every unknown key of `manifest` that its kind's schema has nearby (`kind_schema.
    misplaced`); nothing for a kind without a shipped schema."""
    api_version, kind = manifest.get("apiVersion"), manifest.get("kind")
    info = kind_info(api_version, kind) if isinstance(api_version, str) and kind else None
    ks = kind_schema(info) if info is not None else None
    if info is None or ks is None:
        return []
    # As `spec_load` checks it: a custom resource's metadata is the API server's, not the CRD's.
    body = manifest if info.builtin else {k: v for k, v in manifest.items() if k != "metadata"}
    out = []
    for error in sorted(ks.validator.iter_errors(body), key=lambda e: list(map(str, e.path))):
        if error.validator != "additionalProperties" or not isinstance(error.instance, dict):
            continue
        schema = error.schema if isinstance(error.schema, Mapping) else {}
        known = schema.get("properties", {})
        parent = tuple(error.absolute_path)
        for key in error.instance:
            if key in known or not isinstance(key, str):
                continue
            targets = misplaced(ks, parent, key)
            if targets:
                out.append(Misplaced((*parent, key), tuple(targets)))
    return out


def _instance_text(path: InstancePath) -> str:
    out = "spec.template"
    for seg in path:
        out += f"[{seg}]" if isinstance(seg, int) else f".{seg}"
    return out


def _take(root: Any, path: InstancePath) -> tuple[bool, Any]:
    node = root
    for seg in path:
        in_list = isinstance(seg, int) and isinstance(node, list) and 0 <= seg < len(node)
        if not (in_list or (isinstance(seg, str) and isinstance(node, dict) and seg in node)):
            return False, None
        node = node[seg]
    return True, node


def _free(root: Any, path: InstancePath) -> bool:
    """Whether `path` holds nothing, every list item on the way exists and every mapping on
    the way is one or missing (then `_put` makes it)."""
    node = root
    for seg in path[:-1]:
        if isinstance(seg, int):
            if not (isinstance(node, list) and 0 <= seg < len(node)):
                return False
            node = node[seg]
        elif isinstance(node, dict):
            node = node.get(seg, {})
        else:
            return False
    return isinstance(node, dict) and path[-1] not in node


def _put(root: Any, path: InstancePath, value: Any) -> None:
    node = root
    for seg in path[:-1]:
        node = node[seg] if isinstance(seg, int) else node.setdefault(seg, {})
    node[path[-1]] = value


def fix_misplaced(
    body: dict[str, Any], decisions: list[str], *, fix: bool
) -> tuple[tuple[str, str], ...]:
    """Move each misplaced key of the W&B config `body` (in place) where its kind's schema has
    it, when that place is one and free; return the moves. Without `fix`, or for a key with no
    one free place, nothing moves and `decisions` says why."""
    manifest, _ns, problems, _w = normalise(body, "spec.template")
    if problems:
        return ()
    root = body["kubernetes"] if set(body) == {"kubernetes"} else body
    found = misplaced_keys(manifest)
    if found and not fix:
        decisions.append(
            f"{len(found)} key(s) are not where the kind's schema has them (each is refused"
            " with the place it belongs): --fix-misplaced moves those with one free place"
        )
        return ()
    moves: list[tuple[str, str]] = []
    for item in found:
        src = _instance_text(item.source)
        if len(item.targets) > 1:
            places = ", ".join(_instance_text(t) for t in item.targets)
            decisions.append(f"{src} was not moved: the kind's schema has it at {places}")
            continue
        target = item.targets[0]
        ok, value = _take(root, item.source)
        if not ok or not _free(root, target):
            decisions.append(f"{src} was not moved: {_instance_text(target)} already holds a value")
            continue
        parent_ok, parent = _take(root, item.source[:-1])
        if parent_ok and isinstance(parent, dict):
            del parent[item.source[-1]]
            _put(root, target, value)
            moves.append((src, _instance_text(target)))
    return tuple(moves)


def _namespace(
    manifest: Any, namespace: str | None, default_namespace: str, decisions: list[str]
) -> str:
    """The spec's namespace: --namespace, else the config's, else the agent's; a config's own
    that --namespace overrides is removed from `manifest` (a template must agree with it)."""
    meta = manifest.get("metadata") if isinstance(manifest, dict) else None
    named = manifest.get("namespace") if isinstance(manifest, dict) else None
    if isinstance(meta, dict) and isinstance(meta.get("namespace"), str):
        named = meta["namespace"]
    if namespace is None:
        if isinstance(named, str):
            return named
        decisions.append(
            f"namespace {default_namespace!r}: the config names none (W&B's agent used its"
            " own); pass --namespace to choose"
        )
        return default_namespace
    if isinstance(named, str) and named != namespace:
        decisions.append(
            f"namespace: the config says {named!r}; --namespace {namespace!r} wins. W&B's server"
            " merges the config into every item it pushes, and the agent refuses an item for"
            f" another namespace: change the queue's config in W&B to {namespace!r} (or remove"
            " its namespace) too"
        )
        for where in (manifest, meta):
            if isinstance(where, dict):
                where.pop("namespace", None)
    return namespace


def migrate(
    queue: str,
    config: Mapping[str, Any],
    template_variables: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    namespace: str | None = None,
    default_namespace: str = "default",
    fix_misplaced_keys: bool = False,
) -> Migrated:
    """Build the queue spec for `queue` from its W&B config; raises `NotAQueueConfig`.

    With `fix_misplaced_keys`, keys the kind's schema has one free place for nearby are moved
    there first (so template variables in them are granted where they land), each listed."""
    variables = {k: dict(v) for k, v in (template_variables or {}).items()}
    body = unwrap(config)
    wrapped = set(body) == {"kubernetes"}
    decisions: list[str] = []
    moves = fix_misplaced(body, decisions, fix=fix_misplaced_keys)
    if moves:
        decisions.append(
            "W&B's server merges the queue's config into every item it pushes, with the keys"
            " moved here where they were: make the same moves in the queue's config in W&B,"
            " or every launch is refused at the key's old path"
        )
    used: dict[str, list[Path]] = {}
    template = _fill(body, variables, used, ())

    manifest = template["kubernetes"] if wrapped else template
    namespace = _namespace(manifest, namespace, default_namespace, decisions)

    overridable = _variable_paths(used, variables, wrapped, decisions)
    overridable += DEFAULT_OVERRIDES
    decisions.append(
        "W&B let submitters change any field of resource_args; this spec lets them change only"
        " the template variables' paths and W&B's overrides (args, entry_point, run_config):"
        " add `overridable` globs for anything else they relied on"
    )

    found = tuple(findings(template))
    needed = [f for f in found if f.needed]
    if needed:
        decisions.append(
            f"{len(needed)} security exception(s) listed at the end: grant or remove each"
        )
    if len(needed) < len(found):
        decisions.append("Secrets the template names are listed at the end: review them")
    name = spec_name(queue)
    document: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "description": f"migrated from W&B run queue {queue!r}"},
        "spec": {
            "queues": [queue],
            "namespace": namespace,
            "template": template,
            "overridable": overridable,
        },
    }
    return Migrated(
        queue,
        name,
        document,
        found,
        tuple(decisions),
        {k: variables[k] for k in sorted(variables) if k in used},
        moves,
    )
