"""The W&B Launch server's state and rules: queues, items, leases, agents, runs and files.

Plain Python classes with a Python API, so that a test can seed the server (push items, stop a
run "from the UI", set `stopPolling`) and inspect what the client did (item states, failure and
warning history, agent status history) without going through HTTP. The GraphQL resolvers
(`resolvers.py`) are thin wrappers over the same methods, so the HTTP and the Python path have
one implementation of every rule.

Semantics follow W&B Launch (wandb 0.31.0's `wandb/sdk/launch/` agent and its GraphQL calls):

- An item is PENDING until popped; a pop leases it to the agent (LEASED) for `lease_seconds`;
  a lease that lapses without an ack puts the item back in its queue at its original place.
  An ack turns a LEASED item into CLAIMED and records the run name; any other ack answers
  `success: false` (already acknowledged, or the lease was lost). A failure is final.
- Queues pop by priority (0 = critical ... 4 = lowest; W&B's UI default is 2) and FIFO within a
  priority, unless the queue's prioritization mode is DISABLED (pure FIFO).
- Pending items live in a heap per queue and leases in one heap ordered by expiry, so a pop
  costs O(log n) however many items are queued.

Time comes from an injectable clock (wall-clock seconds), so lease tests need no sleeping.
"""

from __future__ import annotations

import heapq
import itertools
import json
import random
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from launch_agent.sandbox.wandb.artifacts import ArtifactStore, ArtifactVersion, job_files
from launch_agent.sandbox.wandb.model import (
    DEFAULT_PRIORITY,
    LAUNCH_PROJECT,
    Entity,
    ItemReport,
    ItemState,
    LaunchAgent,
    Project,
    Run,
    RunQueue,
    RunQueueItem,
    Sweep,
    WandbError,
    deep_merge,
    encode_id,
    fill_templates,
    iso,
    loads_any,
    loads_object,
)
from launch_agent.sandbox.wandb.sweep_engine import next_params, sweep_config

__all__ = [
    "LAUNCH_PROJECT",
    "ItemReport",
    "ItemState",
    "LaunchAgent",
    "LaunchState",
    "Run",
    "RunQueue",
    "RunQueueItem",
    "WandbError",
    "encode_id",
    "iso",
    "loads_object",
]


class LaunchState:
    """Everything the W&B server knows, with the operations its GraphQL API exposes."""

    def __init__(
        self,
        *,
        entity: str = "ent",
        username: str = "sandbox-user",
        email: str = "sandbox-user@example.com",
        lease_seconds: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.username = username
        self.email = email
        self.default_entity = entity
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.features: dict[str, bool] = {}
        self.entities: dict[str, Entity] = {}
        self.items: dict[str, RunQueueItem] = {}
        self.agents: dict[str, LaunchAgent] = {}
        self.queues_by_id: dict[str, RunQueue] = {}
        # Default resource configs by id (each belongs to one queue here).
        self.resource_configs: dict[str, RunQueue] = {}
        self._leases: list[tuple[float, str]] = []
        self._numbers = itertools.count(1)
        self._rng = random.Random(0)  # sweep parameters and run ids: reproducible per state
        self.artifacts = ArtifactStore(self._next, clock)
        self.add_entity(entity)

    def _next(self, kind: str) -> str:
        return encode_id(kind, next(self._numbers))

    # -- entities, projects, queues -------------------------------------------------------

    def add_entity(self, name: str, *, is_team: bool = False) -> Entity:
        if name not in self.entities:
            self.entities[name] = Entity(self._next("Entity"), name, is_team)
        return self.entities[name]

    def entity(self, name: str | None) -> Entity | None:
        return self.entities.get(name or self.default_entity)

    def project(self, entity: str | None, name: str | None, *, create: bool = False) -> Project:
        """The project, created on demand when `create` (W&B creates projects on first use)."""
        found = self.find_project(entity, name)
        if found is not None:
            return found
        if not create or not name:
            raise WandbError(f"project {entity}/{name} not found")
        owner = self.add_entity(entity or self.default_entity)
        project = Project(self._next("Project"), name, owner.name)
        owner.projects[name] = project
        return project

    def find_project(self, entity: str | None, name: str | None) -> Project | None:
        owner = self.entity(entity)
        if owner is None or not name:
            return None
        return owner.projects.get(name)

    def add_queue(
        self,
        name: str,
        *,
        entity: str | None = None,
        project: str = LAUNCH_PROJECT,
        access: str = "PROJECT",
        prioritization_mode: str = "V0",
        config: dict[str, Any] | None = None,
        template_variables: dict[str, dict[str, Any]] | None = None,
    ) -> RunQueue:
        """A queue; `config` (`{"resource": ..., "resource_args": {...}}`) is its default
        resource config, whose `{{name}}` leaves are the `template_variables` (name → schema)."""
        home = self.project(entity or self.default_entity, project, create=True)
        if name in home.queues:
            raise WandbError(f"run queue {name!r} already exists in {home.entity}/{project}")
        queue = RunQueue(
            self._next("RunQueue"),
            name,
            home.entity,
            project,
            self.username,
            access,
            prioritization_mode or "V0",
            config,
            template_variables=dict(template_variables or {}),
        )
        if config is not None:
            queue.config_id = self._next("DefaultResourceConfig")
            self.resource_configs[queue.config_id] = queue
        home.queues[name] = queue
        self.queues_by_id[queue.id] = queue
        return queue

    def queue(self, entity: str | None, project: str | None, name: str) -> RunQueue:
        home = self.find_project(entity, project)
        if home is None or name not in home.queues:
            raise WandbError(f"run queue {entity}/{project}/{name} not found")
        return home.queues[name]

    # -- items ----------------------------------------------------------------------------

    def push(
        self,
        queue: RunQueue,
        run_spec: dict[str, Any],
        *,
        priority: int | None = None,
        template_values: dict[str, Any] | None = None,
        text: str | None = None,
        item_id: str | None = None,
    ) -> RunQueueItem:
        """Enqueue a run spec, merged with the queue's default config as W&B does on push.

        `item_id` serves the item under an id of the caller's choosing instead of W&B's own
        (`RunQueueItem:<n>` in base64): what a compromised W&B, or anything between it and the
        agent, can send."""
        spec = dict(run_spec)
        merged = bool(queue.config)
        if queue.config:
            config = fill_templates(queue.config, template_values or {})
            resource = str(config.get("resource") or spec.get("resource") or "kubernetes")
            queue_args = (config.get("resource_args") or {}).get(resource, {})
            push_args = (spec.get("resource_args") or {}).get(resource, {})
            spec["resource"] = resource
            spec["resource_args"] = {resource: deep_merge(queue_args, push_args)}
        now = self.clock()
        item = RunQueueItem(
            item_id if item_id is not None else self._next("RunQueueItem"),
            queue,
            spec,
            DEFAULT_PRIORITY if priority is None else priority,
            next(self._numbers),
            now,
        )
        item.history.append((now, ItemState.PENDING))
        # As sent, unless the queue config was merged into it (then the merged spec is served).
        item.run_spec_text = None if merged else text
        self.items[item.id] = item
        heapq.heappush(queue.pending, queue.sort_key(item))
        return item

    def push_text(self, queue: RunQueue, text: str, **kw: Any) -> RunQueueItem:
        """Enqueue a runSpec given as JSON text, kept and served back verbatim (any JSON value
        Go's encoding/json accepts, as W&B stores it)."""
        value = loads_any(text, "runSpec")
        if isinstance(value, dict):
            return self.push(queue, value, text=text, **kw)
        item = self.push(queue, {}, **kw)
        item.run_spec_text = text  # nothing to merge a queue config into: served as sent
        return item

    def push_by_name(
        self, entity: str, project: str, queue_name: str, run_spec: dict[str, Any], **kw: Any
    ) -> RunQueueItem:
        return self.push(self.queue(entity, project, queue_name), run_spec, **kw)

    def item(self, item_id: str) -> RunQueueItem:
        try:
            return self.items[item_id]
        except KeyError:
            raise WandbError(f"run queue item {item_id} not found") from None

    def queue_items(self, queue: RunQueue, state: ItemState | None = None) -> list[RunQueueItem]:
        self.lapse_leases()
        return [i for i in self.items.values() if i.queue is queue and state in (None, i.state)]

    def _set_state(self, item: RunQueueItem, state: ItemState) -> None:
        item.state = state
        item.history.append((self.clock(), state))

    def lapse_leases(self) -> int:
        """Put back every item whose lease ran out without an ack; returns how many."""
        now = self.clock()
        lapsed = 0
        while self._leases and self._leases[0][0] <= now:
            until, item_id = heapq.heappop(self._leases)
            item = self.items[item_id]
            if item.state is not ItemState.LEASED or item.lease_until != until:
                continue  # acked or failed meanwhile: a stale heap entry
            item.lease_until = None
            item.launch_agent_id = None
            self._set_state(item, ItemState.PENDING)
            heapq.heappush(item.queue.pending, item.queue.sort_key(item))
            lapsed += 1
        return lapsed

    def pop(self, queue: RunQueue, agent_id: str | None) -> RunQueueItem | None:
        self.lapse_leases()
        if agent_id is not None and agent_id in self.agents:
            self.agents[agent_id].heartbeat_at = self.clock()
        while queue.pending:
            _, _, item_id = heapq.heappop(queue.pending)
            item = self.items[item_id]
            if item.state is not ItemState.PENDING:
                continue
            item.launch_agent_id = agent_id
            item.lease_until = self.clock() + self.lease_seconds
            item.pops += 1
            self._set_state(item, ItemState.LEASED)
            heapq.heappush(self._leases, (item.lease_until, item.id))
            return item
        return None

    def ack(self, item_id: str, run_name: str) -> bool:
        """LEASED → CLAIMED. False for an item acked before, failed, or whose lease lapsed."""
        item = self.item(item_id)
        self.lapse_leases()
        if item.state is not ItemState.LEASED:
            return False
        item.associated_run_id = run_name
        item.lease_until = None
        self._set_state(item, ItemState.CLAIMED)
        # W&B creates the run in the target project as soon as the item is claimed; it stays
        # "pending" until the workload calls wandb.init.
        entity = str(item.run_spec.get("entity") or item.queue.entity)
        project = str(item.run_spec.get("project") or item.queue.project).lower()
        self.upsert_run(entity, project, run_name)
        return True

    def fail(self, item_id: str, message: str, stage: str, file_paths: list[str] | None) -> None:
        item = self.item(item_id)
        item.failure = ItemReport(message, stage, tuple(file_paths or ()), self.clock())
        item.lease_until = None
        self._set_state(item, ItemState.FAILED)

    def warn(self, item_id: str, message: str, stage: str, file_paths: list[str] | None) -> None:
        item = self.item(item_id)
        item.warnings.append(ItemReport(message, stage, tuple(file_paths or ()), self.clock()))

    # -- launch agents --------------------------------------------------------------------

    def create_agent(
        self,
        entity: str,
        project: str,
        queue_ids: list[str],
        hostname: str,
        *,
        config: dict[str, Any] | None = None,
        version: str | None = None,
    ) -> LaunchAgent:
        if self.entity(entity) is None:
            raise WandbError(f"entity {entity} not found")
        unknown = [q for q in queue_ids if q not in self.queues_by_id]
        if unknown:
            raise WandbError(f"run queues not found: {', '.join(unknown)}")
        now = self.clock()
        # The name becomes a W&B run id and a Kubernetes label value: short, lower-case, DNS-safe.
        agent = LaunchAgent(
            self._next("LaunchAgent"),
            f"agent-{secrets.token_hex(4)}",
            entity,
            project,
            list(queue_ids),
            hostname,
            config or {},
            version,
            now,
            heartbeat_at=now,
        )
        agent.status_history.append((now, agent.status))
        self.agents[agent.id] = agent
        return agent

    def agent(self, agent_id: str) -> LaunchAgent:
        try:
            return self.agents[agent_id]
        except KeyError:
            raise WandbError(f"launch agent {agent_id} not found") from None

    def update_agent(self, agent_id: str, status: str | None) -> LaunchAgent:
        agent = self.agent(agent_id)
        now = self.clock()
        agent.heartbeat_at = now
        if status:
            agent.status = status
            agent.status_history.append((now, status))
        return agent

    def set_stop_polling(self, agent_id: str, stop: bool = True) -> None:
        self.agent(agent_id).stop_polling = stop

    # -- runs, files, sweeps --------------------------------------------------------------

    def upsert_run(self, entity: str, project: str, name: str, **fields: Any) -> tuple[Run, bool]:
        home = self.project(entity, project, create=True)
        run = home.runs.get(name)
        inserted = run is None
        if run is None:
            run = Run(self._next("Run"), name, home.entity, home.name, self.clock())
            home.runs[name] = run
        for key, value in fields.items():
            if value is not None:
                setattr(run, key, value)
        return run, inserted

    def run(self, entity: str | None, project: str | None, name: str) -> Run | None:
        home = self.find_project(entity, project)
        return None if home is None else home.runs.get(name)

    def _existing_run(self, entity: str, project: str, name: str) -> Run:
        run = self.run(entity, project, name)
        if run is None:
            raise WandbError(f"run {entity}/{project}/{name} not found")
        return run

    def stop_run(self, entity: str, project: str, name: str) -> None:
        """What the Stop button of the W&B UI does: `RunStoppedStatus` answers true."""
        self._existing_run(entity, project, name).stopped = True

    def set_run_state(self, entity: str, project: str, name: str, state: str) -> Run:
        """What the workload's `wandb.init` / `run.finish` would do (`running`, `finished`...)."""
        run, _ = self.upsert_run(entity, project, name)
        run.state = state
        return run

    def store_file(self, entity: str, project: str, run: str, name: str, data: bytes) -> None:
        self.upsert_run(entity, project, run)[0].files[name] = data

    def file_stream(self, entity: str, project: str, name: str, payload: dict[str, Any]) -> Run:
        """A wandb-core file_stream post: heartbeat, console lines, and the final exit code."""
        run, _ = self.upsert_run(entity, project, name)
        run.file_stream_posts += 1
        run.heartbeat_at = self.clock()
        files = payload.get("files")
        if isinstance(files, dict):
            chunk = files.get("output.log")
            if isinstance(chunk, dict) and isinstance(chunk.get("content"), list):
                run.output.extend(str(line) for line in chunk["content"])
        if payload.get("complete"):
            code = payload.get("exitcode")
            run.exitcode = code if isinstance(code, int) else None
            run.state = "finished" if run.exitcode in (0, None) else "failed"
        return run

    def add_sweep(
        self,
        entity: str,
        project: str,
        name: str,
        state: str = "RUNNING",
        *,
        config: Mapping[str, Any] | None = None,
    ) -> Sweep:
        home = self.project(entity, project, create=True)
        sweep = Sweep(self._next("Sweep"), name, home.entity, home.name, state)
        if config is not None:
            sweep.config = json.dumps(dict(config))
        home.sweeps[name] = sweep
        return sweep

    def create_sweep_agent(
        self, entity: str | None, project: str | None, sweep: str, host: str
    ) -> str:
        """`createAgent`: a sweep agent (W&B's scheduler registers its workers so). A PENDING
        sweep (`launch-sweep` creates it so) starts RUNNING once an agent registers."""
        home = self.find_project(entity, project)
        found = None if home is None else home.sweeps.get(sweep)
        if found is None:
            raise WandbError(f"sweep {entity}/{project}/{sweep} not found")
        agent_id = self._next("Agent")
        found.agents[agent_id] = host
        if found.state == "PENDING":
            found.state = "RUNNING"
        return agent_id

    def sweep_heartbeat(self, agent_id: str, run_states: Mapping[str, Any]) -> list[dict[str, Any]]:
        """`agentHeartbeat`: a new run for an agent with none alive while the sweep runs, up to
        `run_cap`; an exhausted grid finishes the sweep (wandb's sweep server, as the SDK sees
        it in `scheduler_sweep.py`: commands `run` with `run_id` and `args`)."""
        sweep = next((s for s in self.iter_sweeps() if agent_id in s.agents), None)
        if sweep is None:
            raise WandbError(f"agent {agent_id} not found")
        if sweep.state != "RUNNING" or any(run_states.values()):
            return []
        config = sweep_config(sweep.config)
        cap = config.get("run_cap")
        if isinstance(cap, int) and len(sweep.issued) >= cap:
            return []
        params = next_params(config, sweep.issued, self._rng)
        if params is None:
            sweep.state = "FINISHED"
            return []
        sweep.issued.append(params)
        run_id = "".join(self._rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=8))
        run, _ = self.upsert_run(sweep.entity, sweep.project, run_id, sweep_name=sweep.name)
        run.config = json.dumps(params)
        sweep.runs.append(run_id)
        return [{"type": "run", "run_id": run_id, "args": params, "program": None, "logs": []}]

    def create_sweep(
        self,
        entity: str,
        project: str,
        config: str,
        *,
        state: str,
        launch_scheduler: str | None = None,
    ) -> Sweep:
        """A new sweep, named as W&B names them (8 characters). With `launchScheduler`
        (`wandb launch-sweep`), the scheduler's run spec is pushed onto its queue with the
        `WANDB_SWEEP_ID` placeholder replaced by the sweep's name, as W&B's server does."""
        name = "".join(self._rng.choices("abcdefghijklmnopqrstuvwxyz0123456789", k=8))
        sweep = self.add_sweep(entity, project, name, state)
        sweep.config = config
        if launch_scheduler:
            sweep.launch_scheduler = launch_scheduler
            spec = loads_object(launch_scheduler, "launchScheduler")
            text = str(spec.get("run_spec") or "{}").replace("WANDB_SWEEP_ID", name)
            queue = self.queue(
                entity, str(spec.get("run_queue_project") or LAUNCH_PROJECT), str(spec["queue"])
            )
            self.push_text(queue, text)
        return sweep

    def set_sweep_state(self, sweep: Sweep, state: str) -> None:
        """`UpsertSweep` or the sweep page's buttons. Cancelling a sweep also stops its runs
        that are not over (their `RunStoppedStatus` turns true), as the W&B UI's Cancel does;
        Stop (`FINISHED`) lets them finish."""
        sweep.state = state
        if state == "CANCELED":
            for name in sweep.runs:
                run = self.run(sweep.entity, sweep.project, name)
                if run is not None and run.state in ("pending", "running"):
                    run.stopped = True

    def iter_sweeps(self) -> Iterator[Sweep]:
        for owner in self.entities.values():
            for home in owner.projects.values():
                yield from home.sweeps.values()

    def add_artifact(
        self,
        entity: str,
        project: str,
        name: str,
        type_: str,
        *,
        files: dict[str, bytes],
        aliases: tuple[str, ...] = ("latest",),
    ) -> ArtifactVersion:
        home = self.project(entity, project, create=True)
        return self.artifacts.add(home.entity, home.name, name, type_, files=files, aliases=aliases)

    def add_job(self, entity: str, project: str, name: str, **source: Any) -> ArtifactVersion:
        """A job artifact: `image=...`, `repo=..., commit=...` or `code_artifact=...`."""
        return self.add_artifact(entity, project, name, "job", files=job_files(**source))

    def sweep_by_id(self, sweep_id: str) -> Sweep | None:
        for owner in self.entities.values():
            for home in owner.projects.values():
                for sweep in home.sweeps.values():
                    if sweep.id == sweep_id:
                        return sweep
        return None

    def iter_runs(self) -> Iterator[Run]:
        for owner in self.entities.values():
            for home in owner.projects.values():
                yield from home.runs.values()
