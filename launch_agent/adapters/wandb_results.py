"""Typed answers of the W&B client, and the pure functions that read them out of responses.

Every reader takes the decoded `data` value for one answer and either returns a typed result or
raises `WandbProtocolError` naming the operation and the exact path that had the wrong shape,
so a server or proxy that answers something unexpected produces an error a person can act on
instead of a `KeyError` deep in the agent.

Batched answers are read per entry: in a batched pop an error on one alias (a deleted queue, for
example) must not lose the items the other aliases already popped, because those items are
leased to this agent the moment the mutation ran. `split_errors` sorts GraphQL `errors` by the
alias in their `path`; only errors that cannot be attributed make the whole request fail.

A popped item whose `runSpec` cannot be read is still returned, with `problem` set: it has been
popped, so the agent must fail it in W&B with that message rather than drop it. That includes a
runSpec the input rules refuse (`model.safe_load`): deeper or bigger than the item limits,
duplicate keys, non-finite numbers, lone surrogates. The client decodes answers leniently, so
such a value arrives here as a `Refused` marker (or too deep) inside an otherwise readable item.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from launch_agent.adapters.wandb_errors import WandbGraphQLError, WandbProtocolError
from launch_agent.model.safe_load import (
    ITEM_LIMITS,
    InputError,
    Refused,
    check_value,
    decode_response,
    load_json,
)


class RunRef(NamedTuple):
    """A W&B run: the key of stop checks."""

    entity: str
    project: str
    run_id: str


@dataclass(frozen=True)
class Viewer:
    id: str
    entity: str | None
    username: str | None
    email: str | None
    teams: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunQueue:
    id: str
    name: str
    created_by: str | None
    access: str | None


@dataclass(frozen=True)
class LaunchAgentInfo:
    id: str
    name: str
    run_queues: tuple[str, ...]
    hostname: str | None
    agent_status: str | None
    stop_polling: bool
    heartbeat_at: str | None


@dataclass(frozen=True)
class RunQueueItem:
    """A popped item. `problem` is set when `run_spec` could not be read (it is then `{}`)."""

    id: str
    queue: str
    run_spec: dict[str, Any] = field(default_factory=dict)
    problem: str | None = None


@dataclass(frozen=True)
class QueueConfig:
    """A run queue's default resource config, as wandb's public API reads it.

    `config` is `{"resource_args": {<resource>: ...}}` with `{{name}}` leaves for the
    `template_variables` (name → JSON schema); `{}` when the queue has no config.
    """

    queue: str
    resource: str | None
    config: dict[str, Any]
    template_variables: dict[str, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class PushedItem:
    id: str
    run_spec: dict[str, Any] | None


@dataclass(frozen=True)
class QueuedItem:
    """An item as W&B lists it: its state (`PENDING`, `LEASED`, `CLAIMED`, `FAILED`) and, in a
    queue's listing, its runSpec (empty when unreadable: such an item matches nothing)."""

    id: str
    state: str
    run_spec: dict[str, Any] = field(default_factory=dict)


def split_errors(
    operation: str, body: Mapping[str, Any], keys: Sequence[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """`data` and the GraphQL error messages per response key.

    Raises `WandbGraphQLError` when an error has no path into one of `keys`, or when every key
    errored: then nothing in the answer is usable.
    """
    data = body.get("data")
    if data is not None and not isinstance(data, dict):
        raise WandbProtocolError(f"{operation}: `data` is {type(data).__name__}, not an object")
    raw_errors = body.get("errors") or []
    if not isinstance(raw_errors, list):
        raise WandbProtocolError(f"{operation}: `errors` is not a list")
    by_key: dict[str, str] = {}
    unattributed: list[Mapping[str, Any]] = []
    for error in raw_errors:
        if not isinstance(error, dict):
            unattributed.append({"message": str(error)})
            continue
        path = error.get("path")
        head = path[0] if isinstance(path, list) and path else None
        if isinstance(head, str) and head in keys:
            message = str(error.get("message", "unknown error"))
            by_key[head] = f"{by_key[head]}; {message}" if head in by_key else message
        else:
            unattributed.append(error)
    if unattributed or (raw_errors and len(by_key) == len(keys)):
        raise WandbGraphQLError(operation, unattributed or raw_errors)
    if data is None:
        raise WandbProtocolError(f"{operation}: the answer has neither `data` nor `errors`")
    return data, by_key


def _obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise WandbProtocolError(f"{where} is {_kind(value)}, expected an object")
    return value


def _str(value: Any, where: str, *, optional: bool = False) -> Any:
    if value is None and optional:
        return None
    if not isinstance(value, str) or (not optional and not value):
        raise WandbProtocolError(f"{where} is {_kind(value)}, expected a non-empty string")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, Refused):
        return f"refused ({value.reason})"
    return f"{type(value).__name__} {json.dumps(value, default=repr)[:80]}"


def viewer(value: Any) -> Viewer | None:
    """`data.viewer`; None when the server does not recognise the key."""
    if value is None:
        return None
    obj = _obj(value, "Viewer: data.viewer")
    teams: list[str] = []
    edges = ((obj.get("teams") or {}) if isinstance(obj.get("teams"), dict) else {}).get("edges")
    for edge in edges or []:
        node = edge.get("node") if isinstance(edge, dict) else None
        if isinstance(node, dict) and isinstance(node.get("name"), str):
            teams.append(node["name"])
    return Viewer(
        id=str(obj.get("id") or ""),
        entity=_str(obj.get("entity"), "Viewer: data.viewer.entity", optional=True),
        username=_str(obj.get("username"), "Viewer: data.viewer.username", optional=True),
        email=_str(obj.get("email"), "Viewer: data.viewer.email", optional=True),
        teams=tuple(teams),
    )


def run_queues(value: Any) -> list[RunQueue] | None:
    """`data.project` of ProjectRunQueues; None when the project does not exist."""
    if value is None:
        return None
    project = _obj(value, "ProjectRunQueues: data.project")
    queues = project.get("runQueues")
    if queues is None:
        return []
    if not isinstance(queues, list):
        raise WandbProtocolError(f"ProjectRunQueues: data.project.runQueues is {_kind(queues)}")
    out: list[RunQueue] = []
    for i, raw in enumerate(queues):
        where = f"ProjectRunQueues: data.project.runQueues[{i}]"
        queue = _obj(raw, where)
        created_by = queue.get("createdBy")
        out.append(
            RunQueue(
                id=_str(queue.get("id"), f"{where}.id"),
                name=_str(queue.get("name"), f"{where}.name"),
                created_by=None if created_by is None else str(created_by),
                access=_str(queue.get("access"), f"{where}.access", optional=True),
            )
        )
    return out


def launch_agent_id(value: Any) -> str:
    obj = _obj(value, "createLaunchAgent: data.createLaunchAgent")
    return str(_str(obj.get("launchAgentId"), "createLaunchAgent: data.createLaunchAgent.id"))


def launch_agent(value: Any) -> LaunchAgentInfo | None:
    """`data.launchAgent`; None when the server does not know the id."""
    if value is None:
        return None
    obj = _obj(value, "LaunchAgent: data.launchAgent")
    queues = obj.get("runQueues") or []
    if not isinstance(queues, list):
        raise WandbProtocolError(f"LaunchAgent: data.launchAgent.runQueues is {_kind(queues)}")
    stop = obj.get("stopPolling")
    if stop is not None and not isinstance(stop, bool):
        raise WandbProtocolError(f"LaunchAgent: data.launchAgent.stopPolling is {_kind(stop)}")
    return LaunchAgentInfo(
        id=_str(obj.get("id"), "LaunchAgent: data.launchAgent.id"),
        name=_str(obj.get("name"), "LaunchAgent: data.launchAgent.name"),
        run_queues=tuple(str(q) for q in queues),
        hostname=_str(obj.get("hostname"), "LaunchAgent: data.launchAgent.hostname", optional=True),
        agent_status=_str(
            obj.get("agentStatus"), "LaunchAgent: data.launchAgent.agentStatus", optional=True
        ),
        stop_polling=bool(stop),
        heartbeat_at=None if obj.get("heartbeatAt") is None else str(obj["heartbeatAt"]),
    )


def success(operation: str, value: Any) -> bool:
    """`{success}` payloads (ack, fail, warn, updateLaunchAgent)."""
    obj = _obj(value, f"{operation}: data.{operation}")
    flag = obj.get("success")
    if not isinstance(flag, bool):
        raise WandbProtocolError(f"{operation}: data.{operation}.success is {_kind(flag)}")
    return flag


def run_spec(
    value: Any,
    *,
    max_depth: int = ITEM_LIMITS.max_depth,
    max_bytes: int = ITEM_LIMITS.max_bytes,
) -> tuple[dict[str, Any], str | None]:
    """A popped `runSpec` (a JSON object, or a JSONString holding one) and any problem.

    The limits are the agent's `limits.max_item_depth` / `max_item_bytes`; the problem names
    the runSpec path (`runSpec.overrides.args[2]: number 1e999999 is out of range`).
    """
    if isinstance(value, str):
        if len(value) > max_bytes:
            return {}, _too_big(len(value), max_bytes)
        try:
            value = decode_response(value, cut=max_depth, limit=max_depth)
        except InputError as exc:
            reason = exc.reason.removeprefix("invalid JSON: ")
            where = f" at {exc.where}" if exc.line is not None else ""
            return {}, f"runSpec is a string that is not JSON: {reason}{where}"
    if isinstance(value, Refused):
        return {}, f"runSpec: {value.reason}"
    problem = check_value(value, max_depth, "runSpec")
    if problem is not None:
        return {}, f"{problem[0]}: {problem[1]}"
    if not isinstance(value, dict):
        return {}, f"runSpec is {_kind(value)}, expected a JSON object"
    size = len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())
    if size > max_bytes:
        return {}, _too_big(size, max_bytes)
    return value, None


def _too_big(size: int, limit: int) -> str:
    return f"runSpec is {size:,} bytes of JSON; the limit is {limit:,} (limits.max_item_bytes)"


def popped(
    queue: str,
    value: Any,
    *,
    max_depth: int = ITEM_LIMITS.max_depth,
    max_bytes: int = ITEM_LIMITS.max_bytes,
) -> RunQueueItem | None:
    """One queue's `popFromRunQueue` answer: None when the queue was empty."""
    if value is None:
        return None
    where = f"popFromRunQueue ({queue!r})"
    obj = _obj(value, where)
    item_id = _str(obj.get("runQueueItemId"), f"{where}.runQueueItemId")
    spec, problem = run_spec(obj.get("runSpec"), max_depth=max_depth, max_bytes=max_bytes)
    return RunQueueItem(id=item_id, queue=queue, run_spec=spec, problem=problem)


def run_stopped(value: Any) -> bool:
    """`project { run { stopped } }`: a missing project or run is not stopped (reference)."""
    if not isinstance(value, dict):
        return False
    run = value.get("run")
    return isinstance(run, dict) and run.get("stopped") is True


def run_state(value: Any) -> str | None:
    """`project { run { state } }`; None when the project or run does not exist (yet)."""
    if not isinstance(value, dict) or not isinstance(value.get("run"), dict):
        return None
    state = value["run"].get("state")
    return state if isinstance(state, str) else None


def sweep_field(value: Any) -> dict[str, Any] | None:
    """`project { sweep { ... } }`; None when the project or sweep does not exist."""
    if not isinstance(value, dict) or not isinstance(value.get("sweep"), dict):
        return None
    sweep: dict[str, Any] = value["sweep"]
    return sweep


def sweep_state(value: Any) -> str | None:
    """`project { sweep { state } }`; None when the sweep does not exist or names no state."""
    sweep = sweep_field(value)
    state = None if sweep is None else sweep.get("state")
    return state if isinstance(state, str) else None


def pushed(value: Any) -> PushedItem:
    obj = _obj(value, "pushToRunQueueByName: data.pushToRunQueueByName")
    item_id = _str(obj.get("runQueueItemId"), "pushToRunQueueByName: ....runQueueItemId")
    spec = obj.get("runSpec")
    parsed = run_spec(spec)[0] if spec is not None else None
    return PushedItem(id=item_id, run_spec=parsed)


def resource_config_id(queue: str, value: Any) -> str | None:
    """`data.project` of GetRunQueueMetadata: the queue's config id (None: no config)."""
    where = "GetRunQueueMetadata: data.project"
    if value is None:
        raise WandbProtocolError(f"{where} is null: no launch project for this entity")
    found = _obj(value, where).get("runQueue")
    if found is None:
        raise WandbProtocolError(f"{where}.runQueue is null: W&B has no run queue {queue!r}")
    ident = _obj(found, f"{where}.runQueue").get("defaultResourceConfigID")
    return None if ident is None else str(ident)


def _json_text(value: Any, where: str) -> Any:
    if not isinstance(value, str):
        return value  # some servers send JSONString fields already decoded
    try:
        return load_json(value, source=where)
    except InputError as exc:
        raise WandbProtocolError(f"{where}: {exc.reason}") from None


def queue_config(queue: str, value: Any) -> QueueConfig:
    """`data.entity` of GetDefaultResourceConfig."""
    where = "GetDefaultResourceConfig: data.entity"
    entity = _obj(value, where)
    raw = _obj(entity.get("defaultResourceConfig"), f"{where}.defaultResourceConfig")
    where += ".defaultResourceConfig"
    config = _json_text(raw.get("config"), f"{where}.config")
    if config is None:
        config = {}
    config = _obj(config, f"{where}.config")
    variables: dict[str, dict[str, Any]] = {}
    for i, raw_var in enumerate(raw.get("templateVariables") or []):
        here = f"{where}.templateVariables[{i}]"
        var = _obj(raw_var, here)
        name = _str(var.get("name"), f"{here}.name")
        schema = _json_text(var.get("schema"), f"{here}.schema")
        variables[name] = _obj(schema if schema is not None else {}, f"{here}.schema")
    resource = _str(raw.get("resource"), f"{where}.resource", optional=True)
    return QueueConfig(queue, resource, config, variables)


def _run_queue(operation: str, queue: str, value: Any) -> dict[str, Any]:
    where = f"{operation}: data.project"
    if value is None:
        raise WandbProtocolError(f"{where} is null: no launch project for this entity")
    found = _obj(value, where).get("runQueue")
    if found is None:
        raise WandbProtocolError(f"{where}.runQueue is null: W&B has no run queue {queue!r}")
    return _obj(found, f"{where}.runQueue")


def _queued(node: Any, where: str, *, with_spec: bool) -> QueuedItem:
    obj = _obj(node, where)
    item_id = _str(obj.get("id"), f"{where}.id")
    state = _str(obj.get("state"), f"{where}.state")
    spec = run_spec(obj.get("runSpec"))[0] if with_spec else {}
    return QueuedItem(id=str(item_id), state=str(state).upper(), run_spec=spec)


def run_queue_item(queue: str, value: Any) -> QueuedItem | None:
    """`data.project` of GetRunQueueItem; None when the queue holds no such item."""
    found = _run_queue("GetRunQueueItem", queue, value).get("runQueueItem")
    if found is None:
        return None
    return _queued(found, "GetRunQueueItem: ....runQueueItem", with_spec=False)


def run_queue_items(queue: str, value: Any) -> list[QueuedItem]:
    """`data.project` of GetRunQueueItems: the listed items, in W&B's order."""
    where = "GetRunQueueItems: ....runQueueItems"
    listing = _obj(_run_queue("GetRunQueueItems", queue, value).get("runQueueItems"), where)
    edges = listing.get("edges")
    if not isinstance(edges, list):
        raise WandbProtocolError(f"{where}.edges is {_kind(edges)}, expected a list")
    return [
        _queued(
            _obj(edge, f"{where}.edges[{i}]").get("node"),
            f"{where}.edges[{i}].node",
            with_spec=True,
        )
        for i, edge in enumerate(edges)
    ]
