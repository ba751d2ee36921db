"""Queue spec text → a checked `QueueSpec`, or every problem with its path.

Checks, in order, all collected before anything is raised:

1. size (a spec is an admin's YAML file, not a data dump) and YAML syntax, with line/column;
2. the JSON Schema shipped as `schemas/queue-spec.v1.schema.json` (also usable by editors);
3. the template: either W&B queue-config form normalised (`merge.normalise`), its namespace
   agrees with `spec.namespace`, its kind is in the table or described by `podTemplatePaths`,
   and every declared path finds a pod template in it;
4. `overridable` and `podTemplatePaths` parse as paths; Kueue is only asked of kinds it can
   queue;
5. the template already meets the restricted profile, or the admin granted the exception:
   enforcement would otherwise change the admin's own settings behind their back; and every
   pod it makes is one enforcement reaches (no pod spec outside the kind's pod templates, no
   RayJob `clusterSelector` or SidecarMode, a TrainJob runtime named in
   `security.trainingRuntimes`).

6. the template against the kind's schema (CRD or Kubernetes, `kind_schema`): types, enums
   and unknown fields (`replicas: four` in a PyTorchJob is refused here, not at apply time);
   and every `overridable` glob can match some path the schema allows (`**.contaners[*].env`
   never could).

Every problem of a text carries its line and column (`load_queue_spec` maps each problem's
path back to the YAML node), and an unknown key comes with a did-you-mean, like the launch
config's (`model/config_resolve.py`).

The text comes in as a string: reading files is the caller's business (this layer is pure).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache, partial
from importlib import resources
from typing import Any

import jsonschema
import yaml

from launch_agent.model.queue_spec import InvalidInput, Problem, QueueSpec
from launch_agent.model.safe_load import SPEC_LIMITS, InputError, Limits, compose_yaml
from launch_agent.render.kind_schema import KindSchema, glob_fits, kind_schema, misplaced
from launch_agent.render.kinds import (
    MULTIKUEUE_CONTROLLER,
    KindInfo,
    kind_info,
    lookup,
    unknown_kind,
)
from launch_agent.render.macros import substitute
from launch_agent.render.merge import normalise
from launch_agent.render.migrate import placeholders
from launch_agent.render.paths import (
    AnyKey,
    Deep,
    PathSyntaxError,
    find,
    format_path,
    item_label,
    parse_glob,
)
from launch_agent.render.pipeline import enforce_every_pod

MAX_SPEC_BYTES = 1_000_000
SCHEMA_FILE = "queue-spec.v1.schema.json"


@cache
def queue_spec_schema() -> dict[str, Any]:
    text = resources.files("launch_agent.render").joinpath("schemas", SCHEMA_FILE).read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = queue_spec_schema()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def json_path(parts: Any) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def parse_yaml(text: str, *, max_bytes: int = MAX_SPEC_BYTES, max_depth: int | None = None) -> Any:
    """YAML text → data; `InvalidInput` with the line and column of what the loader refused.

    The loader (`model.safe_load`) refuses duplicate keys, merge keys, unsafe tags, non-string
    keys, alias bombs and nesting deeper than the limit, besides syntax errors.
    """
    return _parse(text, max_bytes=max_bytes, max_depth=max_depth)[0]


def _parse(
    text: str, *, max_bytes: int = MAX_SPEC_BYTES, max_depth: int | None = None
) -> tuple[Any, yaml.Node]:
    limits = Limits(max_bytes=max_bytes, max_depth=max_depth or SPEC_LIMITS.max_depth)
    try:
        data, node = compose_yaml(text, limits=limits)
    except InputError as exc:
        reason = f"{exc.path}: {exc.reason}" if exc.path and exc.line is not None else exc.reason
        raise InvalidInput([Problem(exc.where, reason)]) from None
    if node is None:
        raise InvalidInput([Problem("", "must hold exactly one YAML document, found 0")])
    return data, node


def schema_problems(data: Any) -> list[Problem]:
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [p for e in errors for p in _from_schema_error(e, "")]


# Where an unknown key belongs instead: (the path of the object it is in, the key) → a hint.
Hint = Callable[[tuple[str | int, ...], str], str | None]


def _from_schema_error(
    error: jsonschema.ValidationError, prefix: str, hint: Hint | None = None
) -> list[Problem]:
    """One problem per unknown key (with a did-you-mean, or `hint`'s nearby place for it),
    else the schema's own message."""
    where = list(error.absolute_path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(schema.get("properties", {}))
        patterns = list(schema.get("patternProperties", {}))
        problems = []
        for key in error.instance:
            if key in known or any(_re_search(p, key) for p in patterns):
                continue
            reason = f"unknown key {key!r}"
            match = _suggest(key, known)
            nearby = hint(tuple(where), key) if hint is not None and not match else None
            if match:
                reason += f"; did you mean {match!r}?"
            elif nearby:
                reason += f"; {nearby}"
            problems.append(Problem(_join(prefix, json_path([*where, key])), reason))
        if problems:
            return problems
    return [Problem(_join(prefix, json_path(where)), _short(error.message))]


def _re_search(pattern: str, key: str) -> bool:
    try:
        return re.search(pattern, key) is not None
    except re.error:
        return False


def _suggest(key: str, valid: list[str]) -> str | None:
    by_lower = {v.lower(): v for v in valid}
    if key.lower() in by_lower:
        return by_lower[key.lower()]
    match = difflib.get_close_matches(key.lower(), list(by_lower), n=1, cutoff=0.6)
    return by_lower[match[0]] if match else None


def _join(prefix: str, path: str) -> str:
    if not prefix:
        return path
    if not path:
        return prefix
    return f"{prefix}{path}" if path.startswith("[") else f"{prefix}.{path}"


def _short(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def load_queue_spec(text: str) -> tuple[QueueSpec, list[Problem]]:
    """Parse and check one spec; returns (spec, warnings) or raises `InvalidInput`.

    Every problem and warning carries the line and column of the nearest YAML node its path
    names.
    """
    data, node = _parse(text)
    positions = node_positions(node)
    try:
        spec, warnings = build_queue_spec(data)
    except InvalidInput as exc:
        raise InvalidInput([locate(p, positions) for p in exc.problems]) from None
    return spec, [locate(p, positions) for p in warnings]


Position = tuple[int, int]


def node_positions(root: yaml.Node) -> dict[str, Position]:
    """Every key and item of a YAML document → (line, column), 1-based.

    Problems name list items by index (JSON Schema) or by `name` (`render.paths`), and
    template problems name the manifest, which W&B's form wraps in `kubernetes:`: each node is
    registered under both spellings (never a mix of them, so the table stays linear in the
    document's size however deep its lists nest).
    """
    out: dict[str, Position] = {}

    def mark(node: yaml.Node) -> Position:
        return node.start_mark.line + 1, node.start_mark.column + 1

    def walk(node: yaml.Node, by_index: str, by_name: str) -> None:
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                key = str(key_node.value)
                index_path, name_path = _join(by_index, key), _join(by_name, key)
                out.setdefault(index_path, mark(key_node))
                out.setdefault(name_path, mark(key_node))
                walk(value, index_path, name_path)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                index_path = f"{by_index}[{index}]"
                name_path = f"{by_name}[{_label(item, index)}]"
                out.setdefault(index_path, mark(item))
                out.setdefault(name_path, mark(item))
                walk(item, index_path, name_path)

    walk(root, "", "")
    wrapped = "spec.template.kubernetes"
    for name, pos in list(out.items()):
        if name.startswith(wrapped + ".") or name.startswith(wrapped + "["):
            out.setdefault("spec.template" + name[len(wrapped) :], pos)
    return out


def _label(node: yaml.Node, index: int) -> str:
    if isinstance(node, yaml.MappingNode):
        for key_node, value in node.value:
            if key_node.value in ("name", "groupName") and isinstance(value, yaml.ScalarNode):
                return str(value.value)
    return item_label(None, index)


def locate(problem: Problem, positions: dict[str, Position]) -> Problem:
    """`problem` with the line and column of the longest prefix of its path in `positions`."""
    if problem.line is not None:
        return problem
    path = problem.path
    while path:
        if path in positions:
            line, column = positions[path]
            return replace(problem, line=line, column=column)
        path = _parent(path)
    return problem


def _parent(path: str) -> str:
    if path.endswith("]"):
        return path[: path.rfind("[")]
    dot = path.rfind(".")
    return path[:dot] if dot > 0 else ""


def build_queue_spec(data: Any) -> tuple[QueueSpec, list[Problem]]:
    problems = schema_problems(data)
    if problems:
        raise InvalidInput(problems)
    spec = data["spec"]
    warnings: list[Problem] = []
    template, ns, p, w = normalise(spec["template"], "spec.template")
    problems += p
    warnings += w
    if ns is not None and ns != spec["namespace"]:
        problems.append(Problem("spec.template.namespace", f"{ns!r} differs from spec.namespace"))
    problems += placeholder_problems(template)  # before the name the agent replaces is dropped
    meta = template.get("metadata")
    written: dict[tuple[object, ...], Any] = {}
    if isinstance(meta, dict):
        for key in ("name", "generateName"):
            if key in meta:
                written["metadata", key] = meta[key]
                meta = {k: v for k, v in meta.items() if k != key}
                warnings.append(
                    Problem(
                        f"spec.template.metadata.{key}",
                        "ignored: each workload is named after the queue spec and the item",
                    )
                )
        template["metadata"] = meta

    for i, text in enumerate(spec.get("overridable", ())):
        try:
            parse_glob(text)
        except PathSyntaxError as exc:
            problems.append(Problem(f"spec.overridable[{i}]", f"invalid path {text!r}: {exc}"))
    if problems:
        raise InvalidInput(problems)

    queue_spec = QueueSpec.from_dict(data, template, written)
    api_version, kind = queue_spec.api_version, queue_spec.kind
    if queue_spec.custom_kind is not None and lookup(api_version, kind) is not None:
        problems.append(
            Problem("spec.podTemplatePaths", f"{kind} ({api_version}) is built in; remove it")
        )
    for i, text in enumerate(spec.get("podTemplatePaths", ())):
        where = f"spec.podTemplatePaths[{i}]"
        try:
            glob = parse_glob(text)
        except PathSyntaxError as exc:
            problems.append(Problem(where, f"invalid path {text!r}: {exc}"))
            continue
        if any(isinstance(g, Deep) for g in glob):
            problems.append(Problem(where, "'**' is not allowed in a pod template path"))
    if problems:
        raise InvalidInput(problems)
    info = kind_info(api_version, kind, queue_spec.custom_kind)
    if info is None:
        raise InvalidInput([Problem("spec.template", unknown_kind(api_version, kind))])
    if queue_spec.custom_kind is not None:
        for i, text in enumerate(queue_spec.custom_kind.pod_template_paths):
            if not _finds(template, text):
                problems.append(
                    Problem(
                        f"spec.podTemplatePaths[{i}]",
                        f"{text!r} finds no pod template in spec.template",
                    )
                )
    if queue_spec.kueue_queue_name and info.kueue is None:
        problems.append(Problem("spec.kueue", f"Kueue cannot queue a {info.label}"))
    problems += multikueue_problems(queue_spec, info, template)
    if problems:
        raise InvalidInput(problems)
    problems += kind_schema_problems(info, template, queue_spec.overridable)

    # The admin's own template must already be restricted (or granted), every pod it makes
    # must be reachable by enforcement (`generated.py`): check a copy.
    probe = substitute(template, {})
    try:
        changes = enforce_every_pod(probe, info, queue_spec)
    except InvalidInput as exc:
        problems += [Problem(f"spec.template.{p.path}", p.reason) for p in exc.problems]
        changes = []
    for change in changes:
        problems.append(
            Problem(
                f"spec.template.{change.path}",
                change.reason.replace("removed", "not allowed", 1),
            )
        )
    if problems:
        raise InvalidInput(problems)
    return queue_spec, warnings


def placeholder_problems(template: Mapping[str, Any]) -> list[Problem]:
    """A W&B template variable (`{{name}}`) left in the template: W&B fills those in its own
    queue config before the item reaches the agent, and nothing fills them in a spec, so it
    would reach the cluster as written (`metadata.name: {{example_variable}}`)."""
    return [
        Problem(
            format_path(path, "spec.template"),
            f"template variable '{{{{{name}}}}}' has no definition: a queue spec has no"
            " template variables (W&B fills them in its queue config, not in the agent's"
            " template); write the value, and grant this path in `overridable` if submitters"
            " choose it",
        )
        for path, name in placeholders(template)
    ]


def multikueue_problems(
    spec: QueueSpec, info: KindInfo, template: Mapping[str, Any]
) -> list[Problem]:
    """`spec.kueue.multiKueue` against the kind and the template's own managedBy: a kind
    MultiKueue cannot dispatch is refused with why, and a template that hands its workloads to
    another controller (or to MultiKueue without the spec saying so, which would leave the
    agent's quota holding runs that run elsewhere, and their worker unreported) is refused."""
    given = info.managed_by_of(dict(template))
    path = "spec.template." + ".".join(info.managed_by or ())
    if not spec.multi_kueue:
        if given == MULTIKUEUE_CONTROLLER:
            return [
                Problem(
                    path,
                    f"{MULTIKUEUE_CONTROLLER!r} hands the workloads to MultiKueue: set"
                    " spec.kueue.multiKueue: true instead (the agent then tracks each run's"
                    " worker cluster and leaves its admission to Kueue)",
                )
            ]
        return []
    problem = info.multikueue_problem
    if problem is not None:
        return [Problem("spec.kueue.multiKueue", problem)]
    if given is not None and given != MULTIKUEUE_CONTROLLER:
        return [
            Problem(
                path,
                f"{given!r} hands the workloads to another controller, but"
                f" spec.kueue.multiKueue sets {MULTIKUEUE_CONTROLLER!r}: remove it",
            )
        ]
    return []


# The pseudo-paths `render.policy` checks W&B's `runSpec.overrides` under.
OVERRIDE_KEYS = ("args", "entry_point", "run_config", "artifacts", "files")


def kind_schema_problems(
    info: KindInfo, template: dict[str, Any], overridable: tuple[str, ...]
) -> list[Problem]:
    """The template against its kind's schema, and each glob against what the schema allows.

    Without a schema (a custom kind with none shipped, or a built-in kind without
    kubernetes-validate installed) nothing is checked here; `launch-agent validate` says so.
    """
    problems: list[Problem] = []
    for i, text in enumerate(overridable):
        glob = parse_glob(text)
        if glob[0] == "overrides":
            rest = glob[1] if len(glob) > 1 else None
            if len(glob) > 2 or not (isinstance(rest, AnyKey | Deep) or rest in OVERRIDE_KEYS):
                problems.append(
                    Problem(
                        f"spec.overridable[{i}]",
                        f"{text!r} can match nothing: W&B's overrides are"
                        f" {', '.join('overrides.' + k for k in OVERRIDE_KEYS)}",
                    )
                )
    schema = kind_schema(info)
    if schema is None:
        return problems
    problems += _template_schema_problems(schema, info, template)
    for i, text in enumerate(overridable):
        glob = parse_glob(text)
        if glob[0] == "overrides":
            continue
        fits, why = glob_fits(schema, glob)
        if not fits:
            problems.append(
                Problem(
                    f"spec.overridable[{i}]",
                    f"{text!r} can match nothing in a {info.label}: {why}",
                )
            )
    return problems


def _template_schema_problems(
    schema: KindSchema, info: KindInfo, template: dict[str, Any]
) -> list[Problem]:
    # The agent fills the name, the image and what the kind requires at render time, so a
    # missing required field is not the admin's mistake; a wrong type or unknown key is.
    body = template if info.builtin else {k: v for k, v in template.items() if k != "metadata"}
    problems = []
    for error in sorted(
        schema.validator.iter_errors(body), key=lambda e: list(map(str, e.absolute_path))
    ):
        if error.validator == "required" or _has_macro(error.instance):
            continue
        problems += _from_schema_error(error, "spec.template", partial(_nearby, schema))
    return problems


def _nearby(schema: KindSchema, parent: tuple[str | int, ...], key: str) -> str | None:
    """Where the kind's schema has `key` near `parent` (`spec.runPolicy.ttlSecondsAfterFinished`
    for a PyTorchJob's `spec.ttlSecondsAfterFinished`), as the end of an unknown-key reason."""
    found = misplaced(schema, parent, key)
    if not found:
        return None
    places = " or ".join(_join("spec.template", json_path(p)) for p in found)
    return f"the kind's schema has it at {places}"


def _has_macro(value: Any) -> bool:
    return isinstance(value, str) and ("${" in value or "{{" in value)


def _finds(template: dict[str, Any], text: str) -> bool:
    return any(isinstance(v, dict) for _p, v in find(template, parse_glob(text)))
