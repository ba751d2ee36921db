"""The W&B Launch server's records: plain dataclasses and the pure helpers they need.

`state.py` holds the rules that change them; these are only the shapes (entities own projects,
projects own queues, runs and sweeps; an item remembers its queue, state history, failure and
warnings) plus W&B's id encoding and the push-time merge of a queue's default config.
"""

from __future__ import annotations

import base64
import time
from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from launch_agent.sandbox.wandb import wire_json

LAUNCH_PROJECT = "model-registry"
DEFAULT_PRIORITY = 2
OUTPUT_LINES_KEPT = 1_000


class WandbError(Exception):
    """A request W&B would refuse; answered as a GraphQL error carrying this message."""


class ItemState(StrEnum):
    PENDING = "PENDING"
    LEASED = "LEASED"
    CLAIMED = "CLAIMED"
    FAILED = "FAILED"


def encode_id(kind: str, number: int) -> str:
    """W&B's node ids: base64 of `Kind:number` (`UnVuUXVldWU6MQ==` is `RunQueue:1`)."""
    return base64.b64encode(f"{kind}:{number}".encode()).decode()


def iso(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


@dataclass(frozen=True)
class ItemReport:
    """One `failRunQueueItem` or `updateRunQueueItemWarning` as the server received it."""

    message: str
    stage: str
    file_paths: tuple[str, ...]
    at: float


@dataclass
class RunQueueItem:
    id: str
    queue: RunQueue
    run_spec: dict[str, Any]
    priority: int
    seq: int
    created_at: float
    state: ItemState = ItemState.PENDING
    launch_agent_id: str | None = None
    associated_run_id: str | None = None
    lease_until: float | None = None
    pops: int = 0
    failure: ItemReport | None = None
    warnings: list[ItemReport] = field(default_factory=list)
    history: list[tuple[float, ItemState]] = field(default_factory=list)
    # The runSpec text exactly as pushed (served verbatim on pop); None for specs the tests
    # pushed as dicts, which are served as their JSON. `run_spec` is then the parsed text ({}
    # when it is not an object).
    run_spec_text: str | None = None

    def run_spec_wire(self) -> Any:
        """The runSpec as the server writes it into a response."""
        return (
            self.run_spec if self.run_spec_text is None else wire_json.RawJSON(self.run_spec_text)
        )


@dataclass
class RunQueue:
    id: str
    name: str
    entity: str
    project: str
    created_by: str
    access: str = "PROJECT"
    prioritization_mode: str = "V0"
    # The queue's default resource config: {"resource": ..., "resource_args": {...}} in which
    # string leaves may hold `{{variable}}` templates filled from the push's values.
    config: dict[str, Any] | None = None
    pending: list[tuple[int, int, str]] = field(default_factory=list)
    # The config's template variables: name → JSON schema (W&B's `templateVariables`).
    template_variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    # W&B keeps the config as a separate object (`defaultResourceConfig`) the queue points at.
    config_id: str | None = None
    external_links: dict[str, str] = field(default_factory=dict)

    def sort_key(self, item: RunQueueItem) -> tuple[int, int, str]:
        priority = item.priority if self.prioritization_mode != "DISABLED" else 0
        return (priority, item.seq, item.id)


@dataclass
class Run:
    id: str
    name: str
    entity: str
    project: str
    created_at: float
    state: str = "pending"
    stopped: bool = False
    display_name: str | None = None
    description: str | None = None
    config: str | None = None
    job_type: str | None = None
    sweep_name: str | None = None
    host: str | None = None
    exitcode: int | None = None
    heartbeat_at: float | None = None
    history_line_count: int = 0
    files: dict[str, bytes] = field(default_factory=dict)
    file_stream_posts: int = 0
    output: deque[str] = field(default_factory=lambda: deque(maxlen=OUTPUT_LINES_KEPT))


@dataclass
class Sweep:
    id: str
    name: str
    entity: str
    project: str
    state: str = "RUNNING"
    config: str = "{}"
    runs: list[str] = field(default_factory=list)
    # Sweep agents (`createAgent`): id -> host; and the parameters issued so far, in order.
    agents: dict[str, str] = field(default_factory=dict)
    issued: list[dict[str, Any]] = field(default_factory=list)
    launch_scheduler: str | None = None


@dataclass
class Project:
    id: str
    name: str
    entity: str
    runs: dict[str, Run] = field(default_factory=dict)
    sweeps: dict[str, Sweep] = field(default_factory=dict)
    queues: dict[str, RunQueue] = field(default_factory=dict)


@dataclass
class Entity:
    id: str
    name: str
    is_team: bool = False
    projects: dict[str, Project] = field(default_factory=dict)


@dataclass
class LaunchAgent:
    id: str
    name: str
    entity: str
    project: str
    queue_ids: list[str]
    hostname: str
    config: dict[str, Any]
    version: str | None
    created_at: float
    status: str = "POLLING"
    heartbeat_at: float = 0.0
    stop_polling: bool = False
    status_history: list[tuple[float, str]] = field(default_factory=list)


def deep_merge(base: Any, override: Any) -> Any:
    """The queue config merged with a push's resource args: dicts merge, anything else wins."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for key, value in override.items():
            merged[key] = deep_merge(base[key], value) if key in base else value
        return merged
    return override


def fill_templates(value: Any, values: dict[str, Any]) -> Any:
    """Replace `{{name}}` in string leaves; a leaf that is exactly one template keeps the type."""
    if isinstance(value, dict):
        return {k: fill_templates(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_templates(v, values) for v in value]
    if isinstance(value, str) and "{{" in value:
        for name, replacement in values.items():
            token = "{{" + name + "}}"
            if value == token:
                return replacement
            value = value.replace(token, str(replacement))
    return value


def loads_object(text: str, what: str) -> dict[str, Any]:
    """A JSONString argument that must hold an object, or a precise error."""
    value = loads_any(text, what)
    if not isinstance(value, dict):
        raise WandbError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def loads_any(text: str, what: str) -> Any:
    """A JSONString argument, read as W&B's Go server reads it (`wire_json`)."""
    try:
        return wire_json.loads(text)
    except ValueError as exc:
        raise WandbError(f"{what} is not valid JSON: {exc}") from None
