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

The text comes in as a string: reading files is the caller's business (this layer is pure).
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

import jsonschema

from launch_agent.model.queue_spec import InvalidInput, Problem, QueueSpec
from launch_agent.model.safe_load import SPEC_LIMITS, InputError, Limits, load_yaml
from launch_agent.render.kinds import lookup
from launch_agent.render.macros import substitute
from launch_agent.render.merge import normalise
from launch_agent.render.paths import Deep, PathSyntaxError, find, parse_glob
from launch_agent.render.pipeline import enforce_every_pod, kind_info, unknown_kind

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
    limits = Limits(max_bytes=max_bytes, max_depth=max_depth or SPEC_LIMITS.max_depth)
    try:
        data = load_yaml(text, limits=limits)
    except InputError as exc:
        reason = f"{exc.path}: {exc.reason}" if exc.path and exc.line is not None else exc.reason
        raise InvalidInput([Problem(exc.where, reason)]) from None
    if data is None:
        raise InvalidInput([Problem("", "must hold exactly one YAML document, found 0")])
    return data


def schema_problems(data: Any) -> list[Problem]:
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(map(str, e.absolute_path)))
    return [Problem(json_path(e.absolute_path), _short(e.message)) for e in errors]


def _short(message: str, limit: int = 300) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."


def load_queue_spec(text: str) -> tuple[QueueSpec, list[Problem]]:
    """Parse and check one spec; returns (spec, warnings) or raises `InvalidInput`."""
    return build_queue_spec(parse_yaml(text))


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
    meta = template.get("metadata")
    if isinstance(meta, dict):
        for key in ("name", "generateName"):
            if key in meta:
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

    queue_spec = QueueSpec.from_dict(data, template)
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


def _finds(template: dict[str, Any], text: str) -> bool:
    return any(isinstance(v, dict) for _p, v in find(template, parse_glob(text)))
