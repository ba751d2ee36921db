"""The chaos benchmark's harness: agent processes SIGKILLed in every phase of a run under
faults, checked from the servers' own records.

One sandbox (W&B server, Kubernetes API server, real-time simulated cluster with the JobSet and
Kubeflow operators) in this process; `replicas` `launch-agent run` subprocesses share one Lease
(leader election) and run with `quota.mode: agent` (`chaos_specs`). What happens, all from one
`seed`:

- `runs` items over four queues: batch/v1 Jobs on two small quota leaves (runs wait for quota,
  borrowed runs are evicted when the other team reclaims), JobSets and PyTorchJobs; most
  succeed after a few seconds, about one in five exits with code 3 (W&B must hear the failure
  once), about one in eight is stopped from the W&B UI while it runs (the workload must go,
  W&B hears nothing), about one in ten Jobs is preempted by the cluster once (the agent must
  requeue it once with `_resume_count: 1`, and the requeued item must succeed);
- faults the whole time: Kubernetes 5xx and 429 (with Retry-After, `sandbox/kube`), connection
  resets, added latency, watches dropped and the event log compacted (410) every few seconds;
  W&B 5xx, and one outage of `outage_seconds`;
- `kills` SIGKILLs of the leader, each aimed at one phase of a run (pop, create, ack,
  tracking, report, clean-up; `chaos_kills`): it fires when the next request of that phase
  reaches a server; a killed agent is restarted after about a second, as the kubelet would.

At the end, from the W&B server's item histories and the API server's store (its own
records, never the agents' logs):

- `lost`: items whose requeue chain did not end in the W&B state their outcome calls for
  (claimed for a success or a UI stop, failed for a failure, requeued once then claimed for a
  preemption) by the deadline;
- `duplicated`: items for which more than one workload was ever created;
- `orphaned`: workloads (Jobs still active, any custom resource) of ended items, children
  (Jobs, pods) whose owner is gone, and Secrets left without their workload;
- `double_reported`: items claimed or failed more than once, or runs requeued more often than
  their outcome calls for.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launch_agent.demo.chaos_builds import IMAGE_TAG, KANIKO_NS, BuildWorld, build_world
from launch_agent.demo.chaos_kills import FALLBACK_SECONDS, RANDOM, Kill, phase_of, schedule
from launch_agent.demo.chaos_specs import (
    JOB_QUEUES,
    PLURALS,
    QUEUES,
    TREE,
    WORKLOAD_PLURALS,
    queue_spec,
)
from launch_agent.demo.world import SandboxWorld, WorldSettings
from launch_agent.render.naming import label_value
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kaniko import SimulatedKaniko
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem

ENTITY = "ent"
PROJECT = "proj"
LEASE_NAME = "chaos-agent"
RUN_ID = "launch-agent.io/run-id"
RUN_QUEUE_ITEM = "launch-agent.io/run-queue-item"
ITEM_ID = "launch-agent.io/run-queue-item-id"
TTL_HELD = "launch-agent.io/ttl-held"  # runtime/ttl_hold.py: a Job's TTL taken off meanwhile
OUTCOMES = ("succeed", "fail", "stop", "preempt")
# A restarted agent gets this long (the Lease duration) before the next kill is armed.
RESTART_SETTLE_SECONDS = 3.0
Say = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """What one item is meant to do; `_ended` says which W&B records prove it ended right."""

    run_id: str
    queue: str
    outcome: str  # one of OUTCOMES
    seconds: int
    build: int = -1  # the job artifact (`chaos_builds`) it names instead of an image; -1: none

    @property
    def script(self) -> str:
        """The outcome of the run's pods (a preempted run's first item is scripted apart)."""
        if self.outcome == "fail":
            return f"exit code=3 after={self.seconds}s"
        return f"succeed after={self.seconds}s"

    @property
    def requeues(self) -> int:
        return 1 if self.outcome == "preempt" else 0


def build_jobs(runs: int) -> int:
    """How many job artifacts the plan's builds use: a few builds, most runs hit the registry."""
    return max(1, runs // 20)


def plans(runs: int, rng: random.Random) -> list[Plan]:
    out = []
    jobs = build_jobs(runs)
    for n in range(runs):
        # Jobs take most items: their two small quota leaves are where runs wait and are
        # evicted; the custom resources share one roomy leaf.
        queue = rng.choices(QUEUES, weights=(35, 35, 15, 15))[0]
        roll = rng.random()
        outcome = "fail" if roll < 0.2 else "stop" if roll < 0.33 else "succeed"
        if outcome == "succeed" and queue in JOB_QUEUES and rng.random() < 0.15:
            outcome = "preempt"
        # A stopped run must still be running when the UI stops it.
        seconds = rng.randint(20, 30) if outcome == "stop" else rng.randint(1, 6)
        # One Job run in five needs its image built (a preempted run is requeued with the
        # image its first item was built with, so it gets one too but builds nothing more).
        build = rng.randrange(jobs) if queue in JOB_QUEUES and rng.random() < 0.2 else -1
        out.append(Plan(f"chaos-{n:04d}", queue, outcome, seconds, build))
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
    kill_phases: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    outcomes: dict[str, int] = field(default_factory=dict)
    kinds: dict[str, int] = field(default_factory=dict)
    requeued: int = 0
    quota_evictions: int = 0
    builds: int = 0  # Kaniko Jobs ever created
    kill_aims: list[str] = field(default_factory=list)  # the phase each kill was aimed at
    worker_kills: int = 0  # the real tier's worker clusters lost for a while

    @property
    def kills_by_phase(self) -> dict[str, int]:
        return dict(sorted(Counter(self.kill_phases).items()))

    def as_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "runs": self.runs,
            "replicas": self.replicas,
            "kills": self.kills,
            "kills_by_phase": self.kills_by_phase,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "orphaned": self.orphaned,
            "double_reported": self.double_reported,
            "seconds_to_all_ended": round(self.seconds_to_all_ended, 2),
            "seconds_total": round(self.seconds_total, 2),
            "kill_times": [round(t, 2) for t in self.kill_times],
            "kill_phases": self.kill_phases,
            "kill_aims": self.kill_aims,
            "outcomes": self.outcomes,
            "kinds": self.kinds,
            "requeued": self.requeued,
            "quota_evictions": self.quota_evictions,
            "builds": self.builds,
            "worker_kills": self.worker_kills,
            "problems": self.problems,
        }


@dataclass
class Replica:
    identity: str
    config: Path
    log: Path
    process: asyncio.subprocess.Process | None = None
    starts: int = 0
    restart_at: float = 0.0
    killed: bool = False  # SIGKILLed and not restarted yet (it may not be reaped yet)

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None and not self.killed


@dataclass
class Creations:
    """Every workload the API server ever created, by item (its store's own events). A
    workload is a top-level object carrying the item's annotation: a JobSet's child Jobs are
    not workloads of their own."""

    names: dict[str, set[str]] = field(default_factory=dict)

    def listener(self, storage: str, kind: str, obj: dict[str, Any]) -> None:
        if kind != "ADDED":
            return
        meta = obj.get("metadata") or {}
        item = (meta.get("annotations") or {}).get(ITEM_ID)
        if IMAGE_TAG in (meta.get("labels") or {}):
            return  # a Kaniko Job: the build of a run, not its workload
        if item and not meta.get("ownerReferences"):
            # By uid: a workload deleted and created again under the same name is two.
            name = f"{storage}/{meta.get('name')} (uid {meta.get('uid')})"
            self.names.setdefault(str(item), set()).add(name)


def _config(world: SandboxWorld, builds: BuildWorld, specs: Path, identity: str) -> dict[str, Any]:
    return builds.agent_config() | {
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
        "quota": {"mode": "agent", "tree": TREE, "max_pending_per_leaf": 6},
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


async def _start(replica: Replica, world: SandboxWorld, builds: BuildWorld) -> None:
    await start_replica(
        replica, world.kubeconfig, builds.environment() | {"WANDB_API_KEY": world.wandb.api_key}
    )


async def start_replica(replica: Replica, kubeconfig: Path, environ: dict[str, str]) -> None:
    """`launch-agent run` for `replica` on `kubeconfig`, its output appended to its log;
    `environ` on top of this process's environment without its W&B and agent variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LAUNCH_AGENT_"))}
    env |= environ
    env["NETRC"] = os.devnull

    def open_log() -> int:
        return os.open(replica.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    fd = await asyncio.to_thread(open_log)
    try:
        replica.process = await asyncio.create_subprocess_exec(
            sys.executable,
            *("-m", "launch_agent", "run", "--config", str(replica.config)),
            *("--kubeconfig", str(kubeconfig)),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=fd,
            stderr=asyncio.subprocess.STDOUT,
            env=env,
        )
    finally:
        os.close(fd)
    replica.starts += 1


def fire(
    kill: Kill,
    phase: str,
    *,
    holder: str,
    replicas: list[Replica],
    rng: random.Random,
    result: ChaosResult,
    at: float,
    say: Say,
) -> None:
    """SIGKILL the leader (`holder`) now, synchronously, so a request it sent is still in
    flight; nobody alive leaves the kill armed."""
    kill.fired = phase
    alive = [r for r in replicas if r.alive]
    victims = [r for r in alive if r.identity == holder] or alive
    if not victims:
        kill.fired = ""
        return
    victim = rng.choice(victims)
    assert victim.process is not None
    victim.process.send_signal(signal.SIGKILL)
    victim.killed = True
    kill.fired_at, kill.victim = at, victim.identity
    # The kubelet's restart delay.
    victim.restart_at = time.monotonic() + rng.uniform(0.5, 1.5)
    result.kills += 1
    result.kill_times.append(at)
    result.kill_phases.append(phase)
    result.kill_aims.append(kill.phase)
    aim = "" if phase == kill.phase else f", aimed at {kill.phase}"
    say(f"t={at:.1f}s SIGKILL {victim.identity} in phase {phase}{aim} (leader: {holder})")


def aimed(
    armed: Kill | None,
    server: str,
    key: str,
    path: str,
    rule: FaultRule | None,
    *,
    pending: bool,
) -> bool:
    """Whether a request arriving at a sandbox server is the one `armed` waits for."""
    if armed is None or armed.fired:
        return False
    if rule is not None and (rule.status or rule.drop):
        return False  # refused by a fault: the request never reached its handler
    if phase_of(server, key, path) != armed.phase:
        return False
    # An idle poll pops nothing.
    return armed.phase != "pop" or pending


def settled(replicas: list[Replica], now: float, last_restart: float) -> bool:
    """Every replica up, the last restart a Lease duration ago: kills are spread, not a
    crash loop of one replica (which a real kubelet would back off from anyway)."""
    if not all(r.alive for r in replicas):
        return False
    return now >= last_restart + RESTART_SETTLE_SECONDS


async def restart_dead(
    replicas: list[Replica], start: Callable[[Replica], Awaitable[None]]
) -> bool:
    """Start again every replica that exited and whose restart delay is over; True if any."""
    restarted = False
    for replica in replicas:
        process = replica.process
        if process is None or process.returncode is None:
            continue
        if time.monotonic() >= replica.restart_at:
            await start(replica)
            replica.killed = False
            restarted = True
    return restarted


async def stop_all(replicas: list[Replica]) -> None:
    for replica in replicas:
        process = replica.process
        if process is None or process.returncode is not None:
            continue
        process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), 15)
        except TimeoutError:
            process.kill()
            await process.wait()


def mark_started(state: LaunchState) -> None:
    # Runs call wandb.init: the agent's no-wandb.init check must pass for succeeded runs.
    for item in list(state.items.values()):
        run_id = item.run_spec.get("run_id")
        if item.state is ItemState.CLAIMED and isinstance(run_id, str):
            with contextlib.suppress(Exception):
                state.set_run_state(ENTITY, PROJECT, run_id, "running")


def chain_of(state: LaunchState, first: RunQueueItem) -> list[RunQueueItem]:
    """`first`, then every item the agent pushed for the same run id."""
    run_id = first.run_spec.get("run_id")
    again = [
        i for i in state.items.values() if i.id != first.id and i.run_spec.get("run_id") == run_id
    ]
    return [first, *sorted(again, key=lambda i: i.seq)]


def count_items(
    result: ChaosResult,
    plans: list[Plan],
    chains: dict[str, list[RunQueueItem]],
    workloads: dict[str, set[str]],
) -> None:
    """The W&B-side verdict into `result`: lost, duplicated (more than one workload in
    `workloads`, by item id), double-reported, requeues, and the plan's outcomes."""
    outcomes: Counter[str] = Counter()
    for plan in plans:
        chain = chains[plan.run_id]
        outcomes[plan.outcome] += 1
        last = chain[-1]
        if not _ended(plan, chain):
            result.lost += 1
            result.problems.append(
                f"lost: {plan.run_id} ({plan.outcome}, {plan.queue}) ended as"
                f" {' -> '.join(i.state.value for i in chain)}"
                + (f": {last.failure.message[:200]}" if last.failure else "")
            )
        requeued = len(chain) - 1
        result.requeued += requeued
        for item in chain:
            names = workloads.get(item.id, set())
            if len(names) > 1:
                result.duplicated += 1
                result.problems.append(f"duplicated: {plan.run_id}: {sorted(names)}")
        claimed = max(_claims(i, ItemState.CLAIMED) for i in chain)
        failed = max(_claims(i, ItemState.FAILED) for i in chain)
        if claimed > 1 or failed > 1 or requeued > plan.requeues:
            result.double_reported += 1
            result.problems.append(
                f"double reported: {plan.run_id} ({plan.outcome}): claimed {claimed},"
                f" failed {failed}, requeued {requeued}"
            )
    result.outcomes = dict(sorted(outcomes.items()))


def _holder(world: SandboxWorld) -> str:
    for lease in world.kube.objects.list("leases", namespace="default"):
        if lease["metadata"]["name"] == LEASE_NAME:
            return str(lease["spec"].get("holderIdentity") or "")
    return ""


def _claims(item: RunQueueItem, state: ItemState) -> int:
    return sum(1 for _, s in item.history if s is state)


def _acked(item: RunQueueItem) -> bool:
    return item.state is ItemState.CLAIMED and item.failure is None


def _ended(plan: Plan, chain: list[RunQueueItem]) -> bool:
    """The W&B records the plan calls for, reached (once is checked separately): `chain` is
    the item and the items the agent requeued it as, in push order."""
    if len(chain) != 1 + plan.requeues:
        return False
    last = chain[-1]
    if plan.outcome == "fail":
        return last.state is ItemState.FAILED
    if plan.outcome == "preempt":
        # The first item was acked (the run started), then pushed back with the same run id
        # and `_resume_count: 1` (W&B resumes the run), and the requeued item ran to success.
        first = chain[0]
        return (
            _acked(first)
            and _acked(last)
            and last.run_spec.get("run_id") == plan.run_id
            and last.run_spec.get("_resume_count") == 1
        )
    return _acked(last)


def _workload_active(plural: str, obj: dict[str, Any]) -> bool:
    """A Job that finished is kept (its pods and logs help); any other workload of an ended
    item must be gone (the agent deletes custom resources once they ended). A finished Job that
    still has its TTL held (`TTL_HELD`) would stay for ever, so it counts as left behind."""
    if plural != "jobs":
        return True
    if TTL_HELD in ((obj.get("metadata") or {}).get("annotations") or {}):
        return True
    status = obj.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return False
    return True


class Chaos:
    def __init__(
        self,
        world: SandboxWorld,
        scratch: Path,
        builds: BuildWorld,
        *,
        seed: int,
        runs: int,
        replicas: int,
        kills: int,
        outage_seconds: float,
        deadline: float,
        say: Say,
        logs: Path | None = None,
    ) -> None:
        self.logs = logs
        self.world = world
        self.scratch = scratch
        self.builds = builds
        self.rng = random.Random(seed)
        self.result = ChaosResult(seed, runs, replicas)
        self.outage_seconds = outage_seconds
        self.deadline = deadline
        self.say = say
        self.plans = plans(runs, self.rng)
        # Spread over the outage too: W&B's phases resume after it, and a kill armed in it
        # falls back to a random moment rather than wait.
        self.kill_plan = schedule(kills, self.rng, window=3.0 * kills + outage_seconds)
        self.items: dict[str, RunQueueItem] = {}
        self.creations = Creations()
        self.replicas: list[Replica] = []
        self.stopped: set[str] = set()
        self.started = 0.0
        self._armed: Kill | None = None
        self._last_restart = 0.0
        self._observers = [
            (self.world.wandb.faults, self._observer("wandb")),
            (self.world.kube.faults, self._observer("kube")),
        ]

    # --- set-up --------------------------------------------------------------------------------

    def _prepare(self) -> None:
        specs = self.scratch / "queue-specs"
        specs.mkdir(exist_ok=True)
        for queue in QUEUES:
            (specs / f"{queue}.yaml").write_text(queue_spec(queue))
        for n in range(self.result.replicas):
            identity = f"agent-{n}"
            config = self.scratch / f"{identity}.yaml"
            config.write_text(yaml.safe_dump(_config(self.world, self.builds, specs, identity)))
            self.replicas.append(Replica(identity, config, self.scratch / f"{identity}.log"))

    def _faults(self) -> None:
        kube, wandb = self.world.kube.faults, self.world.wandb.faults
        kube.seed = wandb.seed = self.rng.randrange(2**31)
        kube.add(FaultRule("*", status=503, rate=0.05))
        kube.add(FaultRule("*", status=429, rate=0.05))
        kube.add(FaultRule("*", drop=True, rate=0.02))
        kube.add(FaultRule("*", delay=0.2, rate=0.2))
        wandb.add(FaultRule("*", status=503, rate=0.1))

    def _script(self, plan: Plan, item: RunQueueItem) -> None:
        cluster = self.world.cluster
        assert cluster is not None, "the chaos world runs a cluster"
        cluster.script(f"{RUN_ID}={plan.run_id}", plan.script)
        if plan.outcome == "preempt":
            # Only the first item's pods are preempted (a later script wins): the requeued
            # item is another workload, whose pods run the plan's success.
            selector = f"{RUN_QUEUE_ITEM}={label_value(item.id)}"
            cluster.script(selector, f"preempted after={plan.seconds}s")

    # --- the run -------------------------------------------------------------------------------

    async def run(self) -> ChaosResult:
        self.started = time.monotonic()
        await asyncio.to_thread(self._prepare)
        self.world.kube.store.listeners.append(self.creations.listener)
        self.world.kube.store.listeners.append(self.builds.listener)
        assert self.world.cluster is not None, "the chaos world runs a cluster"
        kaniko = SimulatedKaniko(self.world.kube.store, self.world.cluster, self.builds.registry)
        for faults, observer in self._observers:
            faults.observers.append(observer)
        self._faults()
        try:
            for replica in self.replicas:
                await _start(replica, self.world, self.builds)
            for plan in self.plans:
                spec = {
                    "entity": ENTITY,
                    "project": PROJECT,
                    "run_id": plan.run_id,
                    "resource": "kubernetes",
                    "docker": {"docker_image": "registry.example/train:1"},
                    "overrides": {"args": ["--epochs", "1"]},
                }
                if plan.build >= 0:
                    del spec["docker"]
                    spec["job"] = self.builds.jobs[plan.build]
                item = self.world.state.push_by_name(ENTITY, "model-registry", plan.queue, spec)
                self.items[plan.run_id] = item
                self._script(plan, item)
            # Kaniko's pods carry the run id of the run they build for: the last script wins,
            # so builds succeed whatever the run is scripted to do.
            assert self.world.cluster is not None
            self.world.cluster.script(IMAGE_TAG, "succeed after=2s")
            chaos = asyncio.create_task(self._chaos(), name="chaos")
            try:
                await self._until_ended()
            finally:
                chaos.cancel()
                await asyncio.gather(chaos, return_exceptions=True)
            self.world.kube.faults.clear()
            self.world.wandb.faults.clear()
            await self._settle()
        finally:
            for faults, observer in self._observers:
                faults.observers.remove(observer)
            await self._stop_all()
            if self.logs is not None:
                await asyncio.to_thread(self._keep_logs, self.logs)
            self.world.kube.store.listeners.remove(self.creations.listener)
            self.world.kube.store.listeners.remove(self.builds.listener)
            kaniko.close()
        self._check()
        self.result.seconds_total = time.monotonic() - self.started
        return self.result

    def _keep_logs(self, into: Path) -> None:
        into.mkdir(parents=True, exist_ok=True)
        for replica in self.replicas:
            if replica.log.exists():
                shutil.copy(replica.log, into / replica.log.name)

    def _now(self) -> float:
        return time.monotonic() - self.started

    async def _chaos(self) -> None:
        """Phase-aimed kills; watch drops, 410s, one outage; UI stops; restarts."""
        outage_at = self.rng.uniform(2, 8)
        pending = list(self.kill_plan)
        next_watch = 2.0
        while True:
            now = self._now()
            if outage_at and now >= outage_at:
                self.say(f"W&B outage for {self.outage_seconds:.0f} s")
                self.world.wandb.faults.outage(self.outage_seconds)
                outage_at = 0.0
            armed = self._armed
            if armed is not None and armed.fired:
                self._armed = armed = None
            if armed is None and pending and now >= pending[0].at and self._settled_since(now):
                self._armed = armed = pending.pop(0)
                armed.at = now  # its fallback counts from here
            if (
                armed is not None
                and armed.phase != "tracking"
                and self.world.wandb.faults.in_outage
            ):
                # Every other phase waits on W&B (a pop starts a run, a report ends one): the
                # fallback counts from the end of the outage, so the kill stays aimed.
                armed.at = now
            if armed is not None:
                if armed.phase == "tracking" and self._running_workload():
                    self._fire(armed, "tracking")
                elif now >= armed.at + FALLBACK_SECONDS:
                    self._fire(armed, RANDOM)
            if now >= next_watch:
                self.world.kube.drop_watches()
                if self.rng.random() < 0.5:
                    self.world.kube.compact()
                next_watch = now + self.rng.uniform(2, 5)
            self._stop_from_ui()
            await self._restart_dead()
            await asyncio.sleep(0.05)

    def _observer(self, server: str) -> Callable[[str, str, FaultRule | None], None]:
        def observe(key: str, path: str, rule: FaultRule | None) -> None:
            armed = self._armed
            if armed is None or not aimed(
                armed, server, key, path, rule, pending=self._pending_items()
            ):
                return
            if armed.delay:
                loop = asyncio.get_running_loop()
                loop.call_later(armed.delay, self._fire, armed, armed.phase)
                armed.fired = "scheduled"  # no second trigger while the delay runs
            else:
                self._fire(armed, armed.phase)

        return observe

    def _fire(self, kill: Kill, phase: str) -> None:
        fire(
            kill,
            phase,
            holder=_holder(self.world),
            replicas=self.replicas,
            rng=self.rng,
            result=self.result,
            at=self._now(),
            say=self.say,
        )

    def _settled_since(self, now: float) -> bool:
        return settled(self.replicas, now, self._last_restart)

    def _pending_items(self) -> bool:
        return any(i.state is ItemState.PENDING for i in self.world.state.items.values())

    def _running_workload(self) -> bool:
        for pod in self.world.kube.objects.list("pods", namespace="default"):
            if (pod.get("status") or {}).get("phase") == "Running":
                return True
        return False

    async def _restart_dead(self) -> None:
        async def start(replica: Replica) -> None:
            await _start(replica, self.world, self.builds)

        if await restart_dead(self.replicas, start):
            self._last_restart = self._now()

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
        mark_started(self.world.state)

    def chain(self, plan: Plan) -> list[RunQueueItem]:
        """The plan's item, then every item the agent pushed for the same run id."""
        return chain_of(self.world.state, self.items[plan.run_id])

    def _all_ended(self) -> bool:
        stops = sum(1 for p in self.plans if p.outcome == "stop")
        return len(self.stopped) == stops and all(_ended(p, self.chain(p)) for p in self.plans)

    async def _until_ended(self) -> None:
        while self._now() < self.deadline:
            self._mark_started()
            kills_done = not self._armed and all(k.fired for k in self.kill_plan)
            if self._all_ended():
                if not self.result.seconds_to_all_ended:
                    self.result.seconds_to_all_ended = self._now()
                if kills_done:
                    return
            await asyncio.sleep(0.25)
        if not self.result.seconds_to_all_ended:
            self.result.seconds_to_all_ended = self._now()

    async def _settle(self) -> None:
        """Faults off: the agents clean up what is left (UI stops delete their workloads)."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self._orphans():
            self._mark_started()
            await asyncio.sleep(0.25)

    async def _stop_all(self) -> None:
        await stop_all(self.replicas)

    # --- the verdict ---------------------------------------------------------------------------

    def _orphans(self) -> list[str]:
        state = self.world.state
        ended = {i.id for i in state.items.values() if i.state is not ItemState.LEASED}
        ended -= {i.id for i in state.items.values() if i.state is ItemState.PENDING}
        stopped = {self.items[r].id for r in self.stopped}
        store = self.world.kube.objects
        out = []
        workload_items = set()
        uids = set()
        for plural in (*WORKLOAD_PLURALS, "pods", "secrets"):
            uids |= {o["metadata"]["uid"] for o in store.list(plural, namespace="default")}
        for plural in WORKLOAD_PLURALS:
            for obj in store.list(plural, namespace="default"):
                meta = obj["metadata"]
                owners = meta.get("ownerReferences") or []
                if owners:
                    if not any(o.get("uid") in uids for o in owners):
                        out.append(f"{plural} {meta['name']} left behind by its deleted owner")
                    continue
                item = (meta.get("annotations") or {}).get(ITEM_ID)
                workload_items.add(item)
                if item in ended and _workload_active(plural, obj):
                    if "deletionTimestamp" in meta:
                        continue
                    what = "stopped" if item in stopped else "ended"
                    out.append(f"{plural} {meta['name']} still there for {what} item {item}")
        kaniko_uids = {j["metadata"]["uid"] for j in store.list("jobs", namespace=KANIKO_NS)}
        for pod in store.list("pods", namespace=KANIKO_NS):
            meta = pod["metadata"]
            if not any(o.get("uid") in kaniko_uids for o in meta.get("ownerReferences") or []):
                out.append(f"Kaniko pod {meta['name']} left behind by its deleted Job")
        for pod in store.list("pods", namespace="default"):
            meta = pod["metadata"]
            owners = meta.get("ownerReferences") or []
            if owners and not any(o.get("uid") in uids for o in owners):
                out.append(f"pod {meta['name']} left behind by its deleted owner")
        for job in store.list("jobs", namespace=KANIKO_NS):
            if "deletionTimestamp" not in job["metadata"]:
                out.append(f"Kaniko Job {job['metadata']['name']} left with no build running")
        out += [f"build context {name} left in the claim" for name in self.builds.contexts_left()]
        for secret in store.list("secrets", namespace="default"):
            meta = secret["metadata"]
            item = (meta.get("annotations") or {}).get(ITEM_ID)
            if item and item in ended and item not in workload_items:
                out.append(f"secret {meta['name']} left without its workload ({item})")
        return out

    def _check(self) -> None:
        result = self.result
        kinds = Counter(PLURALS[plan.queue] for plan in self.plans)
        chains = {plan.run_id: self.chain(plan) for plan in self.plans}
        count_items(result, self.plans, chains, self.creations.names)
        for item in self.world.state.items.values():
            result.quota_evictions += sum(
                1 for w in item.warnings if w.message.startswith("evicted by the quota tree")
            )
        result.builds = len(self.builds.kaniko_jobs)
        orphans = self._orphans()
        result.orphaned = len(orphans)
        result.problems += [f"orphaned: {o}" for o in orphans]
        result.kinds = dict(sorted(kinds.items()))


@contextlib.asynccontextmanager
async def chaos_world(
    lease_seconds: float, runs: int
) -> AsyncIterator[tuple[SandboxWorld, Path, BuildWorld]]:
    scratch = await asyncio.to_thread(tempfile.TemporaryDirectory, prefix="launch-chaos-")
    try:
        settings = WorldSettings(
            queues=QUEUES,
            lease_seconds=lease_seconds,
            crds="auto",
            default_outcome="succeed after=2s",
        )
        root = Path(scratch.name)
        async with (
            SandboxWorld(settings, root) as world,
            build_world(
                root,
                world.state,
                world.kube.objects,
                entity=ENTITY,
                project=PROJECT,
                jobs=build_jobs(runs),
            ) as builds,
        ):
            yield world, root, builds
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
    logs: Path | None = None,
) -> ChaosResult:
    async with chaos_world(lease_seconds=5.0, runs=runs) as (world, scratch, builds):
        harness = Chaos(
            world,
            scratch,
            builds,
            seed=seed,
            runs=runs,
            replicas=replicas,
            kills=kills,
            outage_seconds=outage_seconds,
            deadline=deadline,
            say=say,
            logs=logs,
        )
        return await harness.run()
