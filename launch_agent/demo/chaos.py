"""The chaos benchmark's harness: agent processes SIGKILLed at random under faults, checked from
the servers' own records.

One sandbox (W&B server, Kubernetes API server, real-time simulated cluster) in this process;
`replicas` `launch-agent run` subprocesses share one Lease (leader election). What happens,
all from one `seed`:

- `runs` items over two queues (two queue specs, both batch/v1 Jobs): most succeed after a few
  seconds, about one in five exits with code 3 (W&B must hear the failure once), about one in
  eight is stopped from the W&B UI while it runs (the workload must go, W&B hears nothing);
- faults the whole time: Kubernetes 5xx and 429 (with Retry-After, `sandbox/kube`), connection
  resets, added latency, watches dropped and the event log compacted (410) every few seconds;
  W&B 5xx, and one outage of `outage_seconds`;
- `kills` SIGKILLs of the leader at random moments while items are still open, so they fall
  in every phase a run goes through (pop, create, ack, tracking, report, clean-up); a killed
  agent is restarted after a second, as the kubelet would.

At the end, from the W&B server's item histories and the API server's store (its own
records, never the agents' logs):

- `lost`: items that did not end in the W&B state their outcome calls for (claimed for a
  success or a UI stop, failed once for a failure) by the deadline;
- `duplicated`: items for which more than one workload was ever created;
- `orphaned`: Jobs still active, or Secrets left, whose item has ended;
- `double_reported`: items claimed, failed or requeued more than once.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launch_agent.demo.launchers import job_queue_spec
from launch_agent.demo.world import SandboxWorld, WorldSettings
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, RunQueueItem

ENTITY = "ent"
PROJECT = "proj"
QUEUES = ("chaos-a", "chaos-b")
LEASE_NAME = "chaos-agent"
RUN_ID = "launch-agent.io/run-id"
ITEM_ID = "launch-agent.io/run-queue-item-id"
Say = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """What one item is meant to do; `expect` is the W&B state that proves it ended right."""

    run_id: str
    queue: str
    outcome: str  # "succeed", "fail" or "stop"
    seconds: int

    @property
    def script(self) -> str:
        if self.outcome == "fail":
            return f"exit code=3 after={self.seconds}s"
        return f"succeed after={self.seconds}s"


def plans(runs: int, rng: random.Random) -> list[Plan]:
    out = []
    for n in range(runs):
        roll = rng.random()
        outcome = "fail" if roll < 0.2 else "stop" if roll < 0.33 else "succeed"
        # A stopped run must still be running when the UI stops it.
        seconds = rng.randint(20, 30) if outcome == "stop" else rng.randint(1, 6)
        out.append(Plan(f"chaos-{n:04d}", QUEUES[n % len(QUEUES)], outcome, seconds))
    return out


@dataclass
class ChaosResult:
    seed: int
    runs: int
    replicas: int
    kills: int = 0
    lost: int = 0
    duplicated: int = 0
    orphaned: int = 0
    double_reported: int = 0
    seconds_to_all_ended: float = 0.0
    seconds_total: float = 0.0
    kill_times: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "runs": self.runs,
            "replicas": self.replicas,
            "kills": self.kills,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "orphaned": self.orphaned,
            "double_reported": self.double_reported,
            "seconds_to_all_ended": round(self.seconds_to_all_ended, 2),
            "seconds_total": round(self.seconds_total, 2),
            "kill_times": [round(t, 2) for t in self.kill_times],
            "outcomes": self.outcomes,
            "problems": self.problems,
        }


@dataclass
class Replica:
    identity: str
    config: Path
    log: Path
    process: asyncio.subprocess.Process | None = None
    starts: int = 0


@dataclass
class Creations:
    """Every workload the API server ever created, by item (its store's own events)."""

    names: dict[str, set[str]] = field(default_factory=dict)

    def listener(self, storage: str, kind: str, obj: dict[str, Any]) -> None:
        if storage != "batch/jobs" or kind != "ADDED":
            return
        meta = obj.get("metadata") or {}
        item = (meta.get("annotations") or {}).get(ITEM_ID)
        if item:
            self.names.setdefault(str(item), set()).add(str(meta.get("name")))


def _config(world: SandboxWorld, specs: Path, identity: str) -> dict[str, Any]:
    return {
        "queues": list(QUEUES),
        "entity": ENTITY,
        "base_url": world.wandb.url,
        "queue_specs_dir": str(specs),
        "namespaces": ["default"],
        "max_jobs": -1,
        "agent_name": "chaos-agent",
        "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.2},
        "health": {"host": "127.0.0.1", "port": 0},
        "tracking": {"stop_check_seconds": 0.5},
        "shutdown_grace_seconds": 3,
        # A stopped run's workload goes at once: the sandbox's runs never exit on their own.
        "stopped_run_timeout": 0,
        "leader_election": {
            "enabled": True,
            "namespace": "default",
            "lease_name": LEASE_NAME,
            "identity": identity,
            "lease_duration_seconds": 3.0,
            "renew_deadline_seconds": 2.0,
            "retry_period_seconds": 0.25,
        },
    }


async def _start(replica: Replica, world: SandboxWorld) -> None:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LAUNCH_AGENT_"))}
    environ["WANDB_API_KEY"] = world.wandb.api_key
    environ["NETRC"] = os.devnull

    def open_log() -> int:
        return os.open(replica.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    fd = await asyncio.to_thread(open_log)
    try:
        replica.process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "launch_agent", "run", "--config", str(replica.config)),
            *("--kubeconfig", str(world.kubeconfig)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=fd,
            stderr=asyncio.subprocess.STDOUT,
            env=environ,
        )
    finally:
        os.close(fd)
    replica.starts += 1


def _holder(world: SandboxWorld) -> str:
    for lease in world.kube.objects.list("leases", namespace="default"):
        if lease["metadata"]["name"] == LEASE_NAME:
            return str(lease["spec"].get("holderIdentity") or "")
    return ""


def _claims(item: RunQueueItem, state: ItemState) -> int:
    return sum(1 for _, s in item.history if s is state)


def _ended(plan: Plan, item: RunQueueItem) -> bool:
    """The W&B state the plan calls for, reached (once is checked separately)."""
    if plan.outcome == "fail":
        return item.state is ItemState.FAILED
    return item.state is ItemState.CLAIMED and item.failure is None


def _job_active(job: dict[str, Any]) -> bool:
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return False
    return True


class Chaos:
    def __init__(
        self,
        world: SandboxWorld,
        scratch: Path,
        *,
        seed: int,
        runs: int,
        replicas: int,
        kills: int,
        outage_seconds: float,
        deadline: float,
        say: Say,
    ) -> None:
        self.world = world
        self.scratch = scratch
        self.rng = random.Random(seed)
        self.result = ChaosResult(seed, runs, replicas)
        self.kills = kills
        self.outage_seconds = outage_seconds
        self.deadline = deadline
        self.say = say
        self.plans = plans(runs, self.rng)
        self.items: dict[str, RunQueueItem] = {}
        self.creations = Creations()
        self.replicas: list[Replica] = []
        self.stopped: set[str] = set()

    # --- set-up --------------------------------------------------------------------------------

    def _prepare(self) -> None:
        specs = self.scratch / "queue-specs"
        specs.mkdir(exist_ok=True)
        for n, queue in enumerate(QUEUES):
            (specs / f"{queue}.yaml").write_text(
                job_queue_spec(f"spec-{n}", queue, ["overrides.args"])
            )
        for n in range(self.result.replicas):
            identity = f"agent-{n}"
            config = self.scratch / f"{identity}.yaml"
            config.write_text(yaml.safe_dump(_config(self.world, specs, identity)))
            self.replicas.append(Replica(identity, config, self.scratch / f"{identity}.log"))

    def _faults(self) -> None:
        kube, wandb = self.world.kube.faults, self.world.wandb.faults
        kube.seed = wandb.seed = self.rng.randrange(2**31)
        kube.add(FaultRule("*", status=503, rate=0.05))
        kube.add(FaultRule("*", status=429, rate=0.05))
        kube.add(FaultRule("*", drop=True, rate=0.02))
        kube.add(FaultRule("*", delay=0.2, rate=0.2))
        wandb.add(FaultRule("*", status=503, rate=0.1))

    # --- the run -------------------------------------------------------------------------------

    async def run(self) -> ChaosResult:
        started = time.monotonic()
        await asyncio.to_thread(self._prepare)
        assert self.world.cluster is not None, "the chaos world runs a cluster"
        for plan in self.plans:
            self.world.cluster.script(f"{RUN_ID}={plan.run_id}", plan.script)
        self.world.kube.store.listeners.append(self.creations.listener)
        self._faults()
        try:
            for replica in self.replicas:
                await _start(replica, self.world)
            for plan in self.plans:
                spec = {
                    "entity": ENTITY,
                    "project": PROJECT,
                    "run_id": plan.run_id,
                    "resource": "kubernetes",
                    "docker": {"docker_image": "registry.example/train:1"},
                    "overrides": {"args": ["--epochs", "1"]},
                }
                self.items[plan.run_id] = self.world.state.push_by_name(
                    ENTITY, "model-registry", plan.queue, spec
                )
            chaos = asyncio.create_task(self._chaos(started), name="chaos")
            try:
                await self._until_ended(started)
            finally:
                chaos.cancel()
                await asyncio.gather(chaos, return_exceptions=True)
            self.world.kube.faults.clear()
            self.world.wandb.faults.clear()
            await self._settle()
        finally:
            await self._stop_all()
            self.world.kube.store.listeners.remove(self.creations.listener)
        self._check()
        self.result.seconds_total = time.monotonic() - started
        return self.result

    async def _chaos(self, started: float) -> None:
        """Kills at random moments while items are open; watch drops, 410s, one outage."""
        outage_at = started + self.rng.uniform(2, 8)
        kill_at = sorted(
            started + self.rng.uniform(3, 3 + 3 * self.kills) for _ in range(self.kills)
        )
        next_watch = started + 2
        while True:
            now = time.monotonic()
            if outage_at and now >= outage_at:
                self.say(f"W&B outage for {self.outage_seconds:.0f} s")
                self.world.wandb.faults.outage(self.outage_seconds)
                outage_at = 0.0
            if kill_at and now >= kill_at[0]:
                kill_at.pop(0)
                await self._kill(now - started)
            if now >= next_watch:
                self.world.kube.drop_watches()
                if self.rng.random() < 0.5:
                    self.world.kube.compact()
                next_watch = now + self.rng.uniform(2, 5)
            self._stop_from_ui()
            await self._restart_dead()
            await asyncio.sleep(0.1)

    async def _kill(self, at: float) -> None:
        holder = _holder(self.world)
        alive = [r for r in self.replicas if r.process and r.process.returncode is None]
        victims = [r for r in alive if r.identity == holder] or alive
        if not victims:
            return
        victim = self.rng.choice(victims)
        assert victim.process is not None
        victim.process.send_signal(signal.SIGKILL)
        await victim.process.wait()
        self.result.kills += 1
        self.result.kill_times.append(at)
        self.say(f"t={at:.1f}s SIGKILL {victim.identity} (leader: {holder or 'none'})")
        await asyncio.sleep(self.rng.uniform(0.5, 1.5))  # the kubelet's restart delay

    async def _restart_dead(self) -> None:
        for replica in self.replicas:
            if replica.process is not None and replica.process.returncode is not None:
                await _start(replica, self.world)

    def _stop_from_ui(self) -> None:
        for plan in self.plans:
            if plan.outcome != "stop" or plan.run_id in self.stopped:
                continue
            item = self.items.get(plan.run_id)
            if item is None or item.state is not ItemState.CLAIMED:
                continue
            # The run called wandb.init (it is running) and someone pressed Stop.
            self.world.state.set_run_state(ENTITY, PROJECT, plan.run_id, "running")
            self.world.state.stop_run(ENTITY, PROJECT, plan.run_id)
            self.stopped.add(plan.run_id)

    def _mark_started(self) -> None:
        # Runs call wandb.init: the agent's no-wandb.init check must pass for succeeded runs.
        for plan in self.plans:
            item = self.items.get(plan.run_id)
            if item is not None and item.state is ItemState.CLAIMED:
                with contextlib.suppress(Exception):
                    self.world.state.set_run_state(ENTITY, PROJECT, plan.run_id, "running")

    async def _until_ended(self, started: float) -> None:
        while time.monotonic() - started < self.deadline:
            self._mark_started()
            if all(_ended(p, self.items[p.run_id]) for p in self.plans) and len(
                self.stopped
            ) == sum(1 for p in self.plans if p.outcome == "stop"):
                self.result.seconds_to_all_ended = time.monotonic() - started
                return
            await asyncio.sleep(0.25)
        self.result.seconds_to_all_ended = time.monotonic() - started

    async def _settle(self) -> None:
        """Faults off: the agents clean up what is left (UI stops delete their Jobs)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._orphans():
            self._mark_started()
            await asyncio.sleep(0.25)

    async def _stop_all(self) -> None:
        for replica in self.replicas:
            process = replica.process
            if process is None or process.returncode is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 15)
            except TimeoutError:
                process.kill()
                await process.wait()

    # --- the verdict ---------------------------------------------------------------------------

    @property
    def stop_items(self) -> set[str]:
        return {self.items[p.run_id].id for p in self.plans if p.outcome == "stop"}

    def _orphans(self) -> list[str]:
        ended = {i.id for i in self.items.values() if i.state is not ItemState.LEASED}
        out = []
        jobs = self.world.kube.objects.list("jobs", namespace="default")
        job_items = set()
        for job in jobs:
            meta = job["metadata"]
            item = (meta.get("annotations") or {}).get(ITEM_ID)
            job_items.add(item)
            if item in ended and _job_active(job) and "deletionTimestamp" not in meta:
                # A UI-stopped run's Job that ended first is kept like any finished Job (the
                # agent deletes it "unless it ends first"); one still running is left behind.
                what = "stopped" if item in self.stop_items else "ended"
                out.append(f"job {meta['name']} still active for {what} item {item}")
        for secret in self.world.kube.objects.list("secrets", namespace="default"):
            meta = secret["metadata"]
            item = (meta.get("annotations") or {}).get(ITEM_ID)
            if item and item in ended and item not in job_items:
                out.append(f"secret {meta['name']} left without its workload ({item})")
        return out

    def _check(self) -> None:
        result = self.result
        counts: dict[str, int] = {}
        for plan in self.plans:
            item = self.items[plan.run_id]
            counts[plan.outcome] = counts.get(plan.outcome, 0) + 1
            if not _ended(plan, item):
                result.lost += 1
                result.problems.append(
                    f"lost: {plan.run_id} ({plan.outcome}) ended as {item.state.value}"
                    + (f": {item.failure.message[:200]}" if item.failure else "")
                )
            workloads = self.creations.names.get(item.id, set())
            if len(workloads) > 1:
                result.duplicated += 1
                result.problems.append(f"duplicated: {plan.run_id}: {sorted(workloads)}")
            claimed = _claims(item, ItemState.CLAIMED)
            failed = _claims(item, ItemState.FAILED)
            requeued = sum(
                1
                for other in self.world.state.items.values()
                if other.id != item.id and other.run_spec.get("run_id") == plan.run_id
            )
            if claimed > 1 or failed > 1 or requeued > 1:
                result.double_reported += 1
                result.problems.append(
                    f"double reported: {plan.run_id}: claimed {claimed}, failed {failed},"
                    f" requeued {requeued}"
                )
        orphans = self._orphans()
        result.orphaned = len(orphans)
        result.problems += [f"orphaned: {o}" for o in orphans]
        result.outcomes = counts


@contextlib.asynccontextmanager
async def chaos_world(lease_seconds: float) -> AsyncIterator[tuple[SandboxWorld, Path]]:
    scratch = await asyncio.to_thread(tempfile.TemporaryDirectory, prefix="launch-chaos-")
    try:
        settings = WorldSettings(
            queues=QUEUES,
            lease_seconds=lease_seconds,
            crds="none",
            default_outcome="succeed after=2s",
        )
        async with SandboxWorld(settings, Path(scratch.name)) as world:
            yield world, Path(scratch.name)
    finally:
        await asyncio.to_thread(scratch.cleanup)


async def chaos(
    *,
    seed: int,
    runs: int,
    replicas: int,
    kills: int,
    outage_seconds: float,
    deadline: float,
    say: Say,
) -> ChaosResult:
    async with chaos_world(lease_seconds=5.0) as (world, scratch):
        harness = Chaos(
            world,
            scratch,
            seed=seed,
            runs=runs,
            replicas=replicas,
            kills=kills,
            outage_seconds=outage_seconds,
            deadline=deadline,
            say=say,
        )
        return await harness.run()
