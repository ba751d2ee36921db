"""The item `popFromRunQueue` returns, typed: `{"runQueueItemId": ..., "runSpec": {...}}`.

The runSpec keys and their meaning follow the W&B agent (wandb 0.31.0 `_project_spec.py`,
`utils.construct_launch_spec`). `resource_args.kubernetes` arrives already merged by the W&B
server with the W&B-side queue config; the renderer treats all of it as the submitter's layer.

`parse_run_item` checks types and reports every malformed key with its path (`runSpec.overrides.
args[2]: must be a string`), so a broken item is failed in W&B with a reason instead of crashing
the dispatcher.

The identifiers (`entity`, `project`, `run_id`, `sweep_id`, `author`, the item id) reach log
lines, annotations, environment variables and GraphQL calls, so each is held to W&B's own rules
(wandb 0.31.0 `sdk/wandb_settings.py`: `Settings.validate_project`, `Settings.validate_run_id`)
plus a length bound and no control characters: a run id holding a newline and an ANSI escape
must not forge a line of the agent's text log, and a 300 KB entity must not make the workload's
annotations too big for the API server. Free text (`name`, `args`, `entry_point`) may hold
anything but NUL, which no process can receive in its environment or argv (execve stops at
it, runc refuses it): the run would never start, with no reason given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launch_agent.model.display import clip, first_control, shown
from launch_agent.model.queue_spec import InvalidInput, Problem

# The only resource this agent runs; W&B's default for a missing key is local-container, but
# a run popped from a Kubernetes queue always carries `resource: kubernetes`.
KUBERNETES = "kubernetes"
# A sweep scheduler runs as a Kubernetes Job whatever resource W&B's `launch-sweep` names
# (`local-process` for `wandb scheduler`, `local-container` for scheduler jobs).
SCHEDULER_RESOURCES = frozenset({KUBERNETES, "local-process", "local-container"})

# Longest identifier accepted: W&B caps project names at 128 characters; the same bound for the
# others keeps every annotation and env value the agent writes from them small.
MAX_ID_CHARS = 128
# W&B's item ids are base64 of `RunQueueItem:<digits>`; anything far longer is not one.
MAX_ITEM_ID_CHARS = 256
# Docker references, `registry/host:port/path:tag@sha256:digest` (render/macros.py `image_uri`).
_IMAGE_REF = re.compile(r"[A-Za-z0-9._/:@+-]{1,512}")
# wandb_settings.py `validate_project` / `validate_run_id` (sweep ids are run-id-like).
_RESERVED = {
    "entity": "/",
    "project": "/\\#?%:",
    "run_id": ":;,#?/'",
    "sweep_id": ":;,#?/'",
    "author": "",
}


def _clip(value: str, limit: int = 80) -> str:
    """A value short enough to quote in an error (the W&B message and the log line)."""
    return clip(value, limit)


def shown_item_id(item_id: object) -> str:
    """An item id as logs, the status page and messages show it: W&B sends it, so it may be
    anything; one that `parse_run_item` refuses (200,000 characters, a newline) is shown
    clipped to the documented `MAX_ITEM_ID_CHARS` and escaped, however often it comes back.
    W&B calls still send the id whole: it is W&B's name for the item."""
    return shown(item_id, MAX_ITEM_ID_CHARS)


def identifier_problem(value: str, path: str, reserved: str, limit: int = MAX_ID_CHARS) -> str:
    """Why `value` cannot be an identifier at `path` (empty: it can)."""
    if len(value) > limit:
        return f"{path}: is {len(value):,} characters; at most {limit} are allowed"
    control = first_control(value)
    if control:
        return (
            f"{path}: holds the control character {control.group()!r} at offset {control.start()}"
        )
    if value != value.strip():
        return f"{path}: may not start or end with whitespace"
    found = sorted({c for c in reserved if c in value})
    if found:
        return f"{path}: may not hold {' '.join(found)} (W&B reserves {' '.join(reserved)})"
    return ""


def _identifier(value: Any, key: str, problems: list[Problem]) -> Any:
    if not isinstance(value, str):
        return value
    why = identifier_problem(value, f"runSpec.{key}", _RESERVED[key])
    if why:
        path, _, reason = why.partition(": ")
        problems.append(Problem(path, reason))
        return None
    return value


def _no_nul(value: Any, path: str, problems: list[Problem]) -> Any:
    if isinstance(value, str) and "\x00" in value:
        problems.append(
            Problem(path, "holds a NUL character, which no process can receive in argv or env")
        )
        return None
    return value


@dataclass(frozen=True, slots=True)
class RunItem:
    """A popped run-queue item. `raw` keeps the original for logs and error reports."""

    run_queue_item_id: str
    entity: str
    project: str
    run_id: str | None = None
    run_name: str | None = None
    author: str | None = None
    sweep_id: str | None = None
    job: str | None = None
    docker_image: str | None = None
    resource_args: Mapping[str, Any] = field(default_factory=dict)
    args: tuple[str, ...] | None = None
    entry_point: tuple[str, ...] | None = None
    run_config: Mapping[str, Any] | None = None
    artifacts: Mapping[str, Any] | None = None
    files: Mapping[str, Any] | None = None
    resume_count: int = 0
    has_api_key_override: bool = False
    has_additional_services: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _str(spec: Mapping[str, Any], key: str, problems: list[Problem], *, required: bool) -> Any:
    value = spec.get(key)
    if value is None:
        if required:
            problems.append(Problem(f"runSpec.{key}", "is required"))
        return None
    if not isinstance(value, str) or (required and not value):
        problems.append(Problem(f"runSpec.{key}", "must be a non-empty string"))
        return None
    return value


def _str_list(value: Any, path: str, problems: list[Problem]) -> tuple[str, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        problems.append(Problem(path, f"must be a list of strings, not {type(value).__name__}"))
        return None
    bad = [i for i, v in enumerate(value) if not isinstance(v, str | int | float)]
    for i in bad:
        problems.append(Problem(f"{path}[{i}]", "must be a string"))
    bad += [
        i
        for i, v in enumerate(value)
        if i not in bad and _no_nul(v, f"{path}[{i}]", problems) is None
    ]
    # W&B passes numbers through str(); so do we (e.g. args: ["--lr", 0.1]).
    return None if bad else tuple(str(v) for v in value)


def _map(value: Any, path: str, problems: list[Problem]) -> Mapping[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        problems.append(Problem(path, f"must be a mapping, not {type(value).__name__}"))
        return None
    return value


def parse_run_item(item: Any, *, scheduler: bool = False) -> RunItem:
    """Type-check a popped item; raises `InvalidInput` listing every problem. `scheduler`:
    the item is a sweep scheduler (`model.sweeps.is_scheduler_item`)."""
    problems: list[Problem] = []
    if not isinstance(item, dict):
        raise InvalidInput([Problem("", f"must be a mapping, not {type(item).__name__}")])
    rqi = item.get("runQueueItemId")
    if not isinstance(rqi, str) or not rqi:
        problems.append(Problem("runQueueItemId", "is required and must be a non-empty string"))
    elif why := identifier_problem(rqi, "runQueueItemId", "", MAX_ITEM_ID_CHARS):
        problems.append(Problem("runQueueItemId", why.partition(": ")[2]))
    spec = item.get("runSpec")
    if not isinstance(spec, dict):
        problems.append(Problem("runSpec", "is required and must be a mapping"))
        raise InvalidInput(problems)

    entity = _identifier(_str(spec, "entity", problems, required=True), "entity", problems)
    project = _identifier(_str(spec, "project", problems, required=True), "project", problems)
    optional = {k: _str(spec, k, problems, required=False) for k in ("name", "author", "job")}
    optional["author"] = _identifier(optional["author"], "author", problems)
    optional["name"] = _no_nul(optional["name"], "runSpec.name", problems)
    run_id = spec.get("run_id")
    if run_id is not None and not isinstance(run_id, str):
        problems.append(Problem("runSpec.run_id", "must be a string"))
        run_id = None
    run_id = _identifier(run_id or None, "run_id", problems)
    sweep_id = spec.get("sweep_id")
    if sweep_id is not None and not isinstance(sweep_id, str):
        problems.append(Problem("runSpec.sweep_id", "must be a string"))
        sweep_id = None
    sweep_id = _identifier(sweep_id or None, "sweep_id", problems)

    resource = spec.get("resource")
    if scheduler and resource in SCHEDULER_RESOURCES:
        pass
    elif resource is not None and resource != KUBERNETES:
        problems.append(
            Problem(
                "runSpec.resource",
                f"is {_clip(repr(resource))}; this agent only runs 'kubernetes'",
            )
        )
    resource_args = _map(spec.get("resource_args"), "runSpec.resource_args", problems) or {}
    kube = _map(resource_args.get(KUBERNETES), "runSpec.resource_args.kubernetes", problems)

    docker = _map(spec.get("docker"), "runSpec.docker", problems) or {}
    image_path = (
        "runSpec.docker.docker_image" if docker.get("docker_image") else "runSpec.image_uri"
    )
    image = docker.get("docker_image") or spec.get("image_uri")
    if image is not None and not isinstance(image, str):
        problems.append(Problem(image_path, "must be a string"))
        image = None
    elif image and not _IMAGE_REF.fullmatch(image):
        # The image lands in `image`, WANDB_DOCKER and an annotation whether or not the template
        # uses ${image_uri} (whose charset this is): a reference with spaces is an argument.
        problems.append(
            Problem(
                image_path,
                f"{_clip(image)!r} is not an image reference (at most 512 of A-Z a-z 0-9 . _ /"
                " : @ + -)",
            )
        )
        image = None

    overrides = _map(spec.get("overrides"), "runSpec.overrides", problems) or {}
    args = _str_list(overrides.get("args"), "runSpec.overrides.args", problems)
    entry = _str_list(overrides.get("entry_point"), "runSpec.overrides.entry_point", problems)
    run_config = _map(overrides.get("run_config"), "runSpec.overrides.run_config", problems)
    artifacts = _map(overrides.get("artifacts"), "runSpec.overrides.artifacts", problems)
    files = _map(overrides.get("files"), "runSpec.overrides.files", problems)

    resume = spec.get("_resume_count", 0)
    if not isinstance(resume, int) or isinstance(resume, bool) or resume < 0:
        problems.append(Problem("runSpec._resume_count", "must be a non-negative integer"))
        resume = 0
    if problems:
        raise InvalidInput(problems)
    assert isinstance(rqi, str)
    return RunItem(
        run_queue_item_id=rqi,
        entity=entity,
        project=project.lower(),  # W&B lower-cases the project (`_project_spec.py`)
        run_id=run_id or None,
        run_name=optional["name"],
        author=optional["author"],
        sweep_id=sweep_id or None,
        job=optional["job"],
        docker_image=image or None,
        resource_args=kube or {},
        args=args,
        entry_point=entry,
        run_config=run_config,
        artifacts=artifacts,
        files=files,
        resume_count=resume,
        has_api_key_override=bool(spec.get("_wandb_api_key")),
        has_additional_services=bool(spec.get("additional_services")),
        raw=item,
    )
