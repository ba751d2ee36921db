"""The demo's driver: a stage up, runs pushed, the real agent in-process, progress, verdict.

The stage is the sandbox (`world.py`, the default) or the real-cluster tier (`realworld.py`,
`demo --cluster real`); the driver sees only what `Stage` offers, so both print the same lines
and the same table (with a WORKER column when MultiKueue placed the runs).

The agent is `launch_agent.runtime.agent.Agent`, the same object `launch-agent run` builds,
talking HTTP to the stage through its real clients. The driver only does what the outside
world does: it pushes items to the W&B server, scripts what each run's pods do in the
simulated cluster, and presses Stop in the "W&B UI" (`LaunchState.stop_run`) for the run meant
to be stopped once the agent sees it running. It watches, every 50 ms, the W&B server's item
states and the agent's run table (`Agent.runs`, meant for inspection) and prints a line for
every change. Nothing of the agent is patched or bypassed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, TextIO

from launch_agent.demo.scenario import (
    RUNS,
    DemoRun,
    LeftOut,
    Observation,
    judge,
    received,
    spread,
    unheard,
)
from launch_agent.demo.world import SandboxWorld, WorldSettings
from launch_agent.model.config import AgentConfig
from launch_agent.realcluster.kubehttp import path_of
from launch_agent.render.kinds import KINDS
from launch_agent.render.spec_load import load_queue_spec
from launch_agent.runtime.agent import Agent
from launch_agent.runtime.runs import RunRecord
from launch_agent.sandbox.wandb import LaunchState, RunQueueItem, WandbServer

ENTITY = "ent"
PROJECT = "demo"
AGENT_NAME = "demo-agent"
START_TIMEOUT = 20.0
ITEM_EVENTS = {
    "PENDING": "W&B: queued",
    "LEASED": "W&B: popped by the agent",
    "CLAIMED": "W&B: acked (claimed)",
    "FAILED": "W&B: failed",
}
TICK = 0.05


class DemoError(Exception):
    """The demo could not run at all (no queue specs, the agent did not start, ...)."""


@dataclass
class Tracked:
    run: DemoRun
    item: RunQueueItem
    seen: Observation
    record: RunRecord | None = None
    stop_pressed: bool = False


@dataclass
class DemoResult:
    rows: list[tuple[DemoRun, Observation, str | None]]
    seconds: float
    timed_out: bool
    workers: tuple[str, ...] = ()  # MultiKueue's worker clusters, if the stage has them
    spread_problem: str | None = None  # the runs did not land on every worker
    left_out: list[LeftOut] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            not self.timed_out
            and self.spread_problem is None
            and all(problem is None for _, _, problem in self.rows)
        )


@dataclass(frozen=True)
class Workload:
    api_version: str
    plural: str
    namespace: str
    name: str

    @property
    def path(self) -> str:
        return path_of(self.api_version, self.plural, self.namespace, self.name)


class Stage(Protocol):
    """Where the demo runs: a Kubernetes API for the agent, W&B, and a way to script pods."""

    state: LaunchState
    wandb: WandbServer

    @property
    def kubeconfig(self) -> Path: ...

    @property
    def workers(self) -> tuple[str, ...]: ...

    def describe(self) -> list[str]: ...

    async def script(self, selector: str, outcome: str) -> None: ...

    async def leftovers(self, workload: Workload | None, selector: str) -> tuple[bool, int]:
        """Whether `workload` is still in the cluster, and how many pods match `selector`."""
        ...

    def agent_settings(self) -> dict[str, Any]: ...


# How long the pods of a stopped run's deleted workload may take to go (GC, then the pod's
# termination: the default grace is 30 s).
POD_GRACE_SECONDS = 45.0

# Builds a stage for the demo's queues and namespaces (not entered yet).
StageFactory = Callable[[tuple[str, ...], tuple[str, ...]], AbstractAsyncContextManager[Stage]]


class SandboxStage:
    """The sandbox (`SandboxWorld`) as a `Stage`."""

    def __init__(self, settings: WorldSettings) -> None:
        self.world = SandboxWorld(settings)
        self.state = self.world.state
        self.wandb = self.world.wandb

    @property
    def kubeconfig(self) -> Path:
        return self.world.kubeconfig

    @property
    def workers(self) -> tuple[str, ...]:
        return ()

    async def __aenter__(self) -> SandboxStage:
        await self.world.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.world.__aexit__(exc_type, exc, tb)

    def describe(self) -> list[str]:
        world = self.world
        return [
            f"sandbox: Kubernetes API {world.kube.url}, W&B {world.wandb.url}",
            f"sandbox: CRDs from {world.crd_source};"
            f" namespaces {', '.join(world.settings.namespaces)}",
        ]

    async def script(self, selector: str, outcome: str) -> None:
        assert self.world.cluster is not None
        self.world.cluster.script(selector, outcome)

    async def leftovers(self, workload: Workload | None, selector: str) -> tuple[bool, int]:
        if workload is None:
            return False, 0
        objects = self.world.kube.objects
        left = objects.find(workload.plural, workload.name, namespace=workload.namespace)
        pods = objects.list("pods", namespace=workload.namespace, label_selector=selector)
        return left is not None, len(pods)

    def agent_settings(self) -> dict[str, Any]:
        return {}


def sandbox_stage(crds: str) -> StageFactory:
    def make(queues: tuple[str, ...], namespaces: tuple[str, ...]) -> SandboxStage:
        settings = WorldSettings(entity=ENTITY, queues=queues, namespaces=namespaces, crds=crds)
        return SandboxStage(settings)

    return make


def spec_namespaces(specs_dir: Path, queues: set[str]) -> list[str]:
    """The namespaces of the queue specs that serve `queues` (read before the agent starts)."""
    found: set[str] = set()
    served: set[str] = set()
    for path in sorted(specs_dir.glob("*.y*ml")):
        spec, problems = load_queue_spec(path.read_text(encoding="utf-8"))
        if problems:
            continue  # the agent reports invalid specs itself
        if queues & set(spec.queues):
            found.add(spec.namespace)
            served |= set(spec.queues)
    missing = sorted(queues - served)
    if missing:
        raise DemoError(f"{specs_dir}: no valid queue spec serves {', '.join(missing)}")
    return sorted(found)


def agent_config(
    stage: Stage, specs_dir: Path, namespaces: list[str], queues: list[str]
) -> AgentConfig:
    """Production defaults except the intervals, shortened so the demo takes seconds."""
    return AgentConfig.model_validate(
        {
            "queues": queues,
            "entity": ENTITY,
            "api_key": stage.wandb.api_key,
            "base_url": stage.wandb.url,
            "queue_specs_dir": str(specs_dir),
            "namespaces": namespaces,
            "max_jobs": -1,
            "agent_name": AGENT_NAME,
            "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.5},
            "health": {"host": "127.0.0.1", "port": 0},
            "tracking": {"stop_check_seconds": 0.5, "unschedulable_timeout_seconds": 3},
            "stopped_run_timeout": 0,
            "shutdown_grace_seconds": 3,
        }
        | stage.agent_settings()
    )


def workload_of(record: RunRecord) -> Workload | None:
    """Where the run's workload lives, for the kinds the agent renders."""
    for info in KINDS:
        if info.api_version == record.api_version and info.kind == record.kind:
            return Workload(info.api_version, info.plural, record.namespace, record.name)
    return None


class Demo:
    def __init__(
        self,
        specs_dir: Path,
        out: TextIO,
        *,
        runs: Sequence[DemoRun] = RUNS,
        timeout: float = 50.0,
        crds: str = "auto",
        stage: StageFactory | None = None,
        left_out: Sequence[LeftOut] = (),
    ) -> None:
        self.stage = stage or sandbox_stage(crds)
        self.left_out = list(left_out)
        self.specs_dir = specs_dir
        self.out = out
        self.runs = list(runs)
        self.timeout = timeout
        self.started = time.monotonic()
        self.deadline = self.started + timeout

    def say(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    async def run(self) -> DemoResult:
        self.started = time.monotonic()  # the progress lines count from here
        queues = sorted({r.queue for r in self.runs})
        namespaces = await asyncio.to_thread(spec_namespaces, self.specs_dir, set(queues))
        for left in self.left_out:
            self.say(f"left out: {left.name} ({left.kind}): {left.reason}")
        async with self.stage(tuple(queues), tuple(namespaces)) as stage:
            for line in stage.describe():
                self.say(line)
            # The runs' time starts once the stage is up (a real cluster takes a while).
            self.deadline = time.monotonic() + self.timeout
            tracked = []
            for run in self.runs:
                if run.outcome:
                    await stage.script(f"launch-agent.io/run-id={run.run_id}", run.outcome)
                item = stage.state.push_by_name(
                    ENTITY, "model-registry", run.queue, run.run_spec(ENTITY, PROJECT)
                )
                tracked.append(Tracked(run, item, Observation(item.state.value)))
                self._line(tracked[-1], f"pushed to queue {run.queue}: expect {run.expect}")
            self.say(f"pushed {len(tracked)} runs to {len(queues)} queues; starting the agent")
            agent = Agent(
                agent_config(stage, self.specs_dir, namespaces, queues),
                kubeconfig=str(stage.kubeconfig),
            )
            stop = asyncio.Event()
            task = asyncio.create_task(agent.run(stop), name="demo-agent")
            try:
                await self._until_ready(agent, task)
                timed_out = not await self._follow(stage, agent, tracked, task)
            finally:
                stop.set()
                await asyncio.wait_for(task, timeout=30)
            for t in tracked:
                await self._finish_observation(stage, t)
            rows = [(t.run, t.seen, judge(t.run, t.seen)) for t in tracked]
            spread_problem = (
                spread([(t.run, t.seen) for t in tracked], stage.workers) if stage.workers else None
            )
            return DemoResult(
                rows,
                time.monotonic() - self.started,
                timed_out,
                workers=stage.workers,
                spread_problem=spread_problem,
                left_out=self.left_out,
            )

    async def _until_ready(self, agent: Agent, task: asyncio.Task[None]) -> None:
        ready = asyncio.create_task(agent.ready.wait(), name="demo-agent-ready")
        done, _ = await asyncio.wait(
            {task, ready}, timeout=START_TIMEOUT, return_when="FIRST_COMPLETED"
        )
        if ready in done:
            self.say(f"{self._clock()}  agent ready: registered as {agent.agent_id}, polling")
            return
        ready.cancel()
        await asyncio.gather(ready, return_exceptions=True)
        if task.done():
            task.result()  # the start-up error, with its own message
            raise DemoError("the agent stopped before it was ready")
        raise DemoError(f"the agent did not become ready within {START_TIMEOUT:.0f} s")

    async def _follow(
        self, stage: Stage, agent: Agent, tracked: list[Tracked], task: asyncio.Task[None]
    ) -> bool:
        while time.monotonic() < self.deadline:
            if task.done():
                task.result()
                raise DemoError("the agent stopped on its own")
            for t in tracked:
                self._observe(stage, agent, t)
            if all(self._settled(t) for t in tracked):
                return True
            await asyncio.sleep(TICK)
        return False

    def _observe(self, stage: Stage, agent: Agent, t: Tracked) -> None:
        item, seen = t.item, t.seen
        if item.state.value != seen.item_state:
            seen.item_state = item.state.value
            self._line(t, ITEM_EVENTS.get(seen.item_state, seen.item_state.lower()))
        seen.run_name = item.associated_run_id
        for warning in item.warnings[len(seen.warnings) :]:
            seen.warnings.append(warning.message)
            self._line(t, f"W&B warning: {warning.message}")
        if item.failure is not None and seen.failure_message is None:
            seen.failure_stage, seen.failure_message = item.failure.stage, item.failure.message
            first = item.failure.message.strip().splitlines()[0]
            self._line(t, f"W&B failure (stage {item.failure.stage}): {first}")
        record = agent.runs.get(item.id)
        if record is not None and t.record is None:
            t.record = record
            self._line(t, f"agent: creating {record.workload}")
        if t.record is not None:
            state = t.record.state
            if state is not None and seen.last_state != state.value:
                seen.agent_states.append(state.value)
                self._line(t, f"agent: {state.value}")
                if state.value == "running":
                    # What the training script's wandb.init does once its container runs;
                    # nothing runs in the simulated containers, and without it the agent
                    # rightly fails a succeeded run a minute later ("failed to call
                    # wandb.init").
                    stage.state.set_run_state(ENTITY, PROJECT, t.run.run_id, "running")
            for worker in t.record.placements[len(seen.workers) :]:
                seen.workers.append(worker)
                self._line(t, f"agent: MultiKueue placed it on worker cluster {worker}")
            if record is None and not seen.finished:
                seen.finished = True
                self._line(t, "agent: done with the run")
        # The Stop button exists once W&B has the run, i.e. once the item is acked; a run that
        # must hear a controller's words first (Kueue's reason it waits) is stopped after.
        if (
            t.run.stop_when
            and not t.stop_pressed
            and seen.item_state == "CLAIMED"
            and seen.last_state == t.run.stop_when
            and not unheard(t.run.warning_fragments, seen.warnings)
        ):
            stage.state.stop_run(ENTITY, PROJECT, t.run.run_id)
            t.stop_pressed = True
            self._line(t, "Stop pressed in the W&B UI")

    def _settled(self, t: Tracked) -> bool:
        if t.seen.item_state == "FAILED":
            return t.seen.finished or t.record is None or t.run.expect == "failed"
        return t.seen.item_state == "CLAIMED" and t.seen.finished

    async def _finish_observation(self, stage: Stage, t: Tracked) -> None:
        if t.record is None:
            return
        selector = f"launch-agent.io/run-id={t.run.run_id}"
        # The agent is done with a stopped run once its workload is deleted; its pods then go
        # with the garbage collector and their termination grace, which on the real tier takes
        # seconds more. A pod still there after `POD_GRACE_SECONDS` was left behind.
        deadline = time.monotonic() + POD_GRACE_SECONDS
        while True:
            left, pods = await stage.leftovers(workload_of(t.record), selector)
            if not pods or t.run.expect != "stopped" or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        t.seen.workload_left, t.seen.pods_left = left, pods

    def _clock(self) -> str:
        return f"{time.monotonic() - self.started:6.2f}s"

    def _line(self, t: Tracked, text: str) -> None:
        self.say(f"{self._clock()}  {t.run.name:<11} {text}")


def table(result: DemoResult, width: int = 72) -> list[str]:
    """The closing table: one row per run, then any problem spelled out."""
    header: tuple[str, ...] = ("run", "queue", "kind", "expected", "outcome", "ok")
    if result.workers:
        header += ("worker",)
    header += ("what W&B received",)
    rows: list[tuple[str, ...]] = []
    for run, seen, problem in result.rows:
        text = received(seen)
        if len(text) > width:
            text = text[: width - 1] + "…"
        ok = "yes" if problem is None else "NO"
        row: tuple[str, ...] = (run.name, run.queue, run.kind, run.expect, seen.outcome, ok)
        if result.workers:
            # Where the agent saw MultiKueue place it (each placement, if Kueue moved it).
            row += (" then ".join(seen.workers) or "-",)
        rows.append((*row, text))
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *rows]
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for run, _, problem in result.rows:
        if problem is not None:
            lines.append(f"{run.name}: {problem}")
    if result.spread_problem is not None:
        lines.append(f"workers: {result.spread_problem}")
    return lines


def messages(result: DemoResult) -> list[str]:
    """Every failure message W&B received, in full (the table shows the first line)."""
    lines = []
    for run, seen, _ in result.rows:
        if seen.failure_message:
            lines.append(f"{run.name} (failRunQueueItem, stage {seen.failure_stage}):")
            lines += [f"    {line}".rstrip() for line in seen.failure_message.strip().splitlines()]
    return lines


def quiet_agent_logs(level: int) -> Any:
    """Agent log lines go to stderr at `level` (the demo's own lines are the progress)."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("    agent %(levelname)s %(name)s: %(message)s"))
    logger = logging.getLogger("launch_agent")
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler
