"""The chaos benchmark on the real tier: MultiKueue (a manager and worker clusters of upstream
binaries, `realcluster.multicluster`), agent replicas SIGKILLed on W&B requests and worker
clusters lost for a while; checked from the W&B server's records and the manager's objects.

What the sandbox harness (`chaos`) does that this one shares: the plans (`Plan`), the replicas
with leader election (`start_replica`, `fire`, `restart_dead`, `stop_all`), kills aimed at the
phases W&B sees (`aimed`, pop, ack, report; tracking when a workload runs) and the W&B-side
verdict (`count_items`: lost, duplicated, double-reported). What differs:

- items over two MultiKueue queues (batch Jobs and JobSets, `spec.kueue.multiKueue: true`,
  `quota.mode: kueue`), each scripted to succeed or exit with code 3 on whichever worker runs it;
  no UI stops, preemptions or builds (the sandbox bench covers those);
- no Kubernetes-side faults or phase timing: the upstream API server has no request observer,
  so kills aimed at create or clean-up are not drawn, and no 5xx are injected there;
- `worker_kills`: a worker's API server stopped for `worker_down_seconds` (longer than the
  manager's `workerLostTimeout`, so Kueue gives the worker up and dispatches its runs again)
  and started again, at random moments, preferring a worker a run is placed on;
- duplicated and orphaned are read from the manager with a plain REST client (`KubeHTTP`):
  every workload seen by polling (by uid, so a workload deleted and made again is two), and,
  at the end, workloads of ended items still active, Kueue Workloads whose owner is gone and
  Secrets without their workload.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import random
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from launch_agent.demo.chaos import (
    ENTITY,
    ITEM_ID,
    LEASE_NAME,
    PROJECT,
    RUN_ID,
    ChaosResult,
    Plan,
    Replica,
    Say,
    _ended,
    _workload_active,
    aimed,
    chain_of,
    count_items,
    fire,
    mark_started,
    restart_dead,
    settled,
    start_replica,
    stop_all,
)
from launch_agent.demo.chaos_kills import FALLBACK_SECONDS, RANDOM, Kill, schedule
from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.control import act
from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from launch_agent.realcluster.multicluster import MultiCluster, ensure_queues
from launch_agent.realcluster.nodes import script_outcome
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem, WandbServer

QUEUES = ("chaos-job", "chaos-jobset")
# queue -> (apiVersion, plural) of its workloads on the manager
KINDS = {"chaos-job": ("batch/v1", "jobs"), "chaos-jobset": ("jobset.x-k8s.io/v1alpha2", "jobsets")}
# The phases a W&B request marks, and tracking (a workload running).
PHASES = ("pop", "ack", "report", "tracking")
ADDONS = ("jobset", "kueue")
# Short, so a lost worker is given up within the bench (Kueue's default is 15 minutes).
WORKER_LOST_TIMEOUT = "20s"
NAMESPACE = "chaos"
KUEUE = "kueue.x-k8s.io/v1beta2"
Action = Callable[[str, str], Awaitable[Any]]

_CONTAINER = """\
{indent}containers:
{indent}  - name: main
{indent}    image: ${{image_uri}}
{indent}    resources:
{indent}      requests: {{cpu: 100m, memory: 64Mi}}"""


def queue_spec(queue: str, namespace: str) -> str:
    """The MultiKueue queue spec serving `queue`."""
    if queue == "chaos-job":
        template = """\
    apiVersion: batch/v1
    kind: Job
    spec:
      backoffLimit: 0
      template:
        spec:
""" + _CONTAINER.format(indent=" " * 10)
    else:
        template = """\
    apiVersion: jobset.x-k8s.io/v1alpha2
    kind: JobSet
    spec:
      failurePolicy:
        maxRestarts: 0
      replicatedJobs:
        - name: node
          replicas: 1
          template:
            spec:
              backoffLimit: 0
              template:
                spec:
""" + _CONTAINER.format(indent=" " * 18)
    return f"""\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: spec-{queue}
spec:
  queues: [{queue}]
  namespace: {namespace}
  kueue: {{queueName: lq, multiKueue: true}}
  template:
{template}
"""


def plans(runs: int, rng: random.Random) -> list[Plan]:
    """Jobs and JobSets; one in five exits with code 3. Long enough (8-20 s) that a worker
    lost meanwhile has runs on it."""
    out = []
    for n in range(runs):
        queue = rng.choices(QUEUES, weights=(60, 40))[0]
        outcome = "fail" if rng.random() < 0.2 else "succeed"
        out.append(Plan(f"chaos-{n:04d}", queue, outcome, rng.randint(8, 20)))
    return out


@dataclass
class RealWorld:
    """What the harness needs of a MultiKueue setup, however it was started."""

    wandb: WandbServer
    manager: KubeHTTP
    kubeconfig: Path  # the manager's, for the agents
    workers: dict[str, KubeHTTP]
    worker_kubeconfigs: dict[str, Path]
    namespace: str
    apiserver: Action  # (cluster, "stop" | "start")
    api_key_secret: str


@dataclass
class Seen:
    """The manager's workloads as polled: every uid per item, and what runs now."""

    names: dict[str, set[str]] = field(default_factory=dict)
    active: set[str] = field(default_factory=set)  # item ids with a workload running
    placed: dict[str, str] = field(default_factory=dict)  # Kueue Workload -> worker


class RealChaos:
    def __init__(
        self,
        world: RealWorld,
        scratch: Path,
        *,
        seed: int,
        runs: int,
        replicas: int,
        kills: int,
        worker_kills: int,
        worker_down_seconds: float,
        deadline: float,
        say: Say,
        logs: Path | None = None,
    ) -> None:
        self.world = world
        self.scratch = scratch
        self.rng = random.Random(seed)
        self.result = ChaosResult(seed, runs, replicas)
        self.deadline = deadline
        self.say = say
        self.logs = logs
        self.plans = plans(runs, self.rng)
        self.kill_plan = schedule(kills, self.rng, window=4.0 * kills + 10, phases=PHASES)
        window = 45.0 * worker_kills
        self.worker_kill_at = sorted(self.rng.uniform(8, 8 + window) for _ in range(worker_kills))
        self.worker_down_seconds = worker_down_seconds
        self.worker_kills_done = 0
        self.items: dict[str, RunQueueItem] = {}
        self.replicas: list[Replica] = []
        self.seen = Seen()
        self.holder = ""
        self.started = 0.0
        self._armed: Kill | None = None
        self._last_restart = 0.0

    def _now(self) -> float:
        return time.monotonic() - self.started

    # --- set-up --------------------------------------------------------------------------------

    def _prepare(self) -> None:
        specs = self.scratch / "queue-specs"
        specs.mkdir(exist_ok=True)
        for queue in QUEUES:
            (specs / f"{queue}.yaml").write_text(queue_spec(queue, self.world.namespace))
        for n in range(self.result.replicas):
            identity = f"agent-{n}"
            config = self.scratch / f"{identity}.yaml"
            config.write_text(yaml.safe_dump(self._config(specs, identity)))
            self.replicas.append(Replica(identity, config, self.scratch / f"{identity}.log"))

    def _config(self, specs: Path, identity: str) -> dict[str, Any]:
        world = self.world
        return {
            "queues": list(QUEUES),
            "entity": ENTITY,
            "base_url": world.wandb.url,
            "queue_specs_dir": str(specs),
            "namespaces": [world.namespace],
            "max_jobs": -1,
            "agent_name": "chaos-agent",
            "api_key_secret": world.api_key_secret,
            "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.2},
            "health": {"host": "127.0.0.1", "port": 0},
            "tracking": {"stop_check_seconds": 0.5},
            "shutdown_grace_seconds": 3,
            "quota": {"mode": "kueue", "max_pending_per_leaf": 20},
            "multikueue": {
                "workers": [
                    {"name": name, "kubeconfig": str(path)}
                    for name, path in world.worker_kubeconfigs.items()
                ]
            },
            "leader_election": {
                "enabled": True,
                "namespace": world.namespace,
                "lease_name": LEASE_NAME,
                "identity": identity,
                "lease_duration_seconds": 3.0,
                "renew_deadline_seconds": 2.0,
                "retry_period_seconds": 0.25,
            },
        }

    async def _start(self, replica: Replica) -> None:
        await start_replica(
            replica, self.world.kubeconfig, {"WANDB_API_KEY": self.world.wandb.api_key}
        )

    async def _script(self) -> None:
        # The pods run on whichever worker admits the run: scripted on every worker.
        for plan in self.plans:
            for http in self.world.workers.values():
                key = f"{time.time_ns():020d}"
                await script_outcome(http, key, f"{RUN_ID}={plan.run_id}", plan.script)

    # --- the run -------------------------------------------------------------------------------

    async def run(self) -> ChaosResult:
        await asyncio.to_thread(self._prepare)
        await self._script()
        self.started = time.monotonic()
        faults = self.world.wandb.faults
        faults.observers.append(self._observe)
        faults.seed = self.rng.randrange(2**31)
        faults.add(FaultRule("*", status=503, rate=0.05))
        try:
            for replica in self.replicas:
                await self._start(replica)
            state = self.world.wandb.state
            for plan in self.plans:
                spec = {
                    "entity": ENTITY,
                    "project": PROJECT,
                    "run_id": plan.run_id,
                    "resource": "kubernetes",
                    "docker": {"docker_image": "registry.example/train:1"},
                }
                self.items[plan.run_id] = state.push_by_name(
                    ENTITY, "model-registry", plan.queue, spec
                )
            tasks = [
                asyncio.create_task(self._chaos(), name="chaos"),
                asyncio.create_task(self._poll(), name="chaos-poll"),
                asyncio.create_task(self._lose_workers(), name="chaos-workers"),
            ]
            try:
                await self._until_ended()
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            faults.clear()
            await self._settle()
        finally:
            faults.observers.remove(self._observe)
            await stop_all(self.replicas)
            # A worker left stopped by a cancelled kill: the clusters' clean-up needs it.
            for name in self.world.workers:
                with contextlib.suppress(Exception):
                    await self.world.apiserver(name, "start")
            if self.logs is not None:
                await asyncio.to_thread(self._keep_logs, self.logs)
        await self._check()
        self.result.seconds_total = self._now()
        return self.result

    def _keep_logs(self, into: Path) -> None:
        into.mkdir(parents=True, exist_ok=True)
        for replica in self.replicas:
            if replica.log.exists():
                shutil.copy(replica.log, into / replica.log.name)

    def _observe(self, key: str, path: str, rule: FaultRule | None) -> None:
        armed = self._armed
        if armed is None or not aimed(armed, "wandb", key, path, rule, pending=self._pending()):
            return
        if armed.delay:
            loop = asyncio.get_running_loop()
            loop.call_later(armed.delay, self._fire, armed, armed.phase)
            armed.fired = "scheduled"  # no second trigger while the delay runs
        else:
            self._fire(armed, armed.phase)

    def _fire(self, kill: Kill, phase: str) -> None:
        fire(
            kill,
            phase,
            holder=self.holder,
            replicas=self.replicas,
            rng=self.rng,
            result=self.result,
            at=self._now(),
            say=self.say,
        )

    def _pending(self) -> bool:
        return any(i.state is ItemState.PENDING for i in self.world.wandb.state.items.values())

    async def _chaos(self) -> None:
        """Phase-aimed kills of the leader; restarts."""
        pending = list(self.kill_plan)
        while True:
            now = self._now()
            armed = self._armed
            if armed is not None and armed.fired:
                self._armed = armed = None
            if armed is None and pending and now >= pending[0].at and self._settled(now):
                self._armed = armed = pending.pop(0)
                armed.at = now  # its fallback counts from here
            if armed is not None:
                if armed.phase == "tracking" and self.seen.active:
                    self._fire(armed, "tracking")
                elif now >= armed.at + FALLBACK_SECONDS:
                    self._fire(armed, RANDOM)
            if await restart_dead(self.replicas, self._start):
                self._last_restart = self._now()
            await asyncio.sleep(0.05)

    def _settled(self, now: float) -> bool:
        return settled(self.replicas, now, self._last_restart)

    async def _lose_workers(self) -> None:
        """Each planned moment: a worker's API server down past `workerLostTimeout`, then up."""
        for at in self.worker_kill_at:
            await asyncio.sleep(max(0.0, at - self._now()))
            busy = sorted(set(self.seen.placed.values()) & set(self.world.workers))
            name = self.rng.choice(busy or sorted(self.world.workers))
            self.say(
                f"t={self._now():.1f}s worker {name} lost for {self.worker_down_seconds:.0f} s"
            )
            await self.world.apiserver(name, "stop")
            try:
                await asyncio.sleep(self.worker_down_seconds)
            finally:
                await self.world.apiserver(name, "start")
            self.worker_kills_done += 1
            self.say(f"t={self._now():.1f}s worker {name} back")

    async def _poll(self) -> None:
        while True:
            with contextlib.suppress(ApiError, OSError, TimeoutError):
                await self._look()
            mark_started(self.world.wandb.state)
            await asyncio.sleep(0.5)

    async def _look(self) -> None:
        http, namespace = self.world.manager, self.world.namespace
        lease = await http.find(path_of("coordination.k8s.io/v1", "leases", namespace, LEASE_NAME))
        self.holder = str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
        active = set()
        for queue in QUEUES:
            api_version, plural = KINDS[queue]
            got = await http.get(path_of(api_version, plural, namespace))
            for obj in got.get("items") or []:
                meta = obj["metadata"]
                item = (meta.get("annotations") or {}).get(ITEM_ID)
                if not item or meta.get("ownerReferences"):
                    continue
                name = f"{plural}/{meta['name']} (uid {meta['uid']})"
                self.seen.names.setdefault(str(item), set()).add(name)
                if _workload_active(plural, obj) and "deletionTimestamp" not in meta:
                    active.add(str(item))
        self.seen.active = active
        workloads = await http.get(path_of(KUEUE, "workloads", namespace))
        self.seen.placed = {
            w["metadata"]["name"]: str((w.get("status") or {}).get("clusterName"))
            for w in workloads.get("items") or []
            if (w.get("status") or {}).get("clusterName")
        }

    def _all_ended(self) -> bool:
        state = self.world.wandb.state
        return all(_ended(p, chain_of(state, self.items[p.run_id])) for p in self.plans)

    async def _until_ended(self) -> None:
        while self._now() < self.deadline:
            kills_done = not self._armed and all(k.fired for k in self.kill_plan)
            workers_done = self.worker_kills_done == len(self.worker_kill_at)
            if self._all_ended():
                if not self.result.seconds_to_all_ended:
                    self.result.seconds_to_all_ended = self._now()
                if kills_done and workers_done:
                    return
            await asyncio.sleep(0.25)
        if not self.result.seconds_to_all_ended:
            self.result.seconds_to_all_ended = self._now()

    async def _settle(self) -> None:
        """The agents and Kueue clean up what is left (owners deleted, Workloads collected)."""
        deadline = time.monotonic() + 45
        while time.monotonic() < deadline:
            with contextlib.suppress(ApiError, OSError, TimeoutError):
                if not await self._orphans():
                    return
            await asyncio.sleep(0.5)

    # --- the verdict ---------------------------------------------------------------------------

    def _ended_items(self) -> set[str]:
        items = self.world.wandb.state.items.values()
        return {i.id for i in items if i.state not in (ItemState.LEASED, ItemState.PENDING)}

    async def _orphans(self) -> list[str]:
        http, namespace = self.world.manager, self.world.namespace
        ended = self._ended_items()
        out = []
        uids = set()
        with_workload = set()
        for queue in QUEUES:
            api_version, plural = KINDS[queue]
            got = await http.get(path_of(api_version, plural, namespace))
            for obj in got.get("items") or []:
                meta = obj["metadata"]
                uids.add(meta["uid"])
                item = (meta.get("annotations") or {}).get(ITEM_ID)
                if not item or meta.get("ownerReferences"):
                    continue
                with_workload.add(item)
                gone = "deletionTimestamp" in meta
                if item in ended and _workload_active(plural, obj) and not gone:
                    out.append(f"{plural} {meta['name']} still there for ended item {item}")
        workloads = await http.get(path_of(KUEUE, "workloads", namespace))
        for wl in workloads.get("items") or []:
            owners = wl["metadata"].get("ownerReferences") or []
            if owners and not any(o.get("uid") in uids for o in owners):
                out.append(f"Kueue Workload {wl['metadata']['name']} left by its deleted owner")
        secrets = await http.get(path_of("v1", "secrets", namespace))
        for secret in secrets.get("items") or []:
            meta = secret["metadata"]
            item = (meta.get("annotations") or {}).get(ITEM_ID)
            if item and item in ended and item not in with_workload:
                out.append(f"secret {meta['name']} left without its workload ({item})")
        return out

    async def _check(self) -> None:
        result = self.result
        state = self.world.wandb.state
        chains = {p.run_id: chain_of(state, self.items[p.run_id]) for p in self.plans}
        count_items(result, self.plans, chains, self.seen.names)
        # Kueue's dispatches again (a lost worker) are requeues the agent reports to W&B.
        for item in state.items.values():
            result.requeued += sum(1 for w in item.warnings if "Kueue requeued" in w.message)
        kinds: dict[str, int] = {}
        for plan in self.plans:
            plural = KINDS[plan.queue][1]
            kinds[plural] = kinds.get(plural, 0) + 1
        result.kinds = dict(sorted(kinds.items()))
        try:
            orphans = await self._orphans()
        except (ApiError, OSError, TimeoutError) as exc:
            orphans = [f"the manager could not be read: {exc}"]
        result.orphaned = len(orphans)
        result.problems += [f"orphaned: {o}" for o in orphans]
        if result.problems:
            try:
                result.problems += await self._kueue_views()
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                result.problems.append(f"kueue: the Workloads could not be read: {exc!r}")
        result.worker_kills = self.worker_kills_done

    async def _kueue_views(self) -> list[str]:
        """Where Kueue holds each workload still there: what a person reading a problem line
        needs to tell the agent's part from MultiKueue's (the manager's Workload conditions and
        checks, and which workers hold a copy)."""
        http, namespace = self.world.manager, self.world.namespace
        out = []
        workloads = await http.get(path_of(KUEUE, "workloads", namespace))
        for wl in workloads.get("items") or []:
            status = wl.get("status") or {}
            conditions = {c.get("type"): c for c in status.get("conditions") or []}
            if "Finished" in conditions and conditions["Finished"].get("status") == "True":
                continue
            said = ", ".join(
                f"{t}={c.get('status')}({c.get('reason')})" for t, c in sorted(conditions.items())
            )
            checks = "; ".join(
                f"{a.get('name')} {a.get('state')}: {a.get('message')}"
                for a in status.get("admissionChecks") or []
            )
            copies = []
            for name, worker in self.world.workers.items():
                remote = await worker.find(
                    path_of(KUEUE, "workloads", namespace, wl["metadata"]["name"])
                )
                if remote is not None:
                    copies.append(name)
            out.append(
                f"kueue: {wl['metadata']['name']}: {said}; checks: {checks or 'none'};"
                f" cluster {status.get('clusterName')}, nominated"
                f" {status.get('nominatedClusterNames')}, copies on {copies or 'no worker'}"
            )
        return out


async def prepare_namespace(
    manager: KubeHTTP,
    workers: dict[str, KubeHTTP],
    namespace: str,
    *,
    api_key: str,
    api_key_secret: str,
) -> None:
    """The namespace and LocalQueue `lq` on every cluster, and on each worker the API-key
    Secret an admin creates there (docs/multicluster.md)."""
    await ensure_queues(
        manager,
        list(workers.values()),
        namespace,
        cluster_queue=f"cq-{namespace}",
        quota={"cpu": "4", "memory": "16Gi"},
    )
    for http in (manager, *workers.values()):
        await _wait_service_account(http, namespace)
    for http in workers.values():
        await http.ensure(
            path_of("v1", "secrets", namespace),
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": api_key_secret, "namespace": namespace},
                "data": {"password": base64.b64encode(api_key.encode()).decode()},
            },
        )


async def _wait_service_account(http: KubeHTTP, namespace: str) -> None:
    # Pods are refused until the namespace's `default` ServiceAccount exists.
    path = path_of("v1", "serviceaccounts", namespace, "default")
    deadline = time.monotonic() + 90
    while await http.find(path) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no serviceaccount {namespace}/default within 90 s")
        await asyncio.sleep(0.25)


@contextlib.asynccontextmanager
async def real_world(workers: int, say: Say) -> AsyncIterator[tuple[RealWorld, Path]]:
    """A MultiKueue setup in this process, as `cluster up --workers N` starts it (with a
    short `workerLostTimeout`), and the sandbox W&B server."""
    scratch = await asyncio.to_thread(tempfile.TemporaryDirectory, prefix="launch-chaos-real-")
    root = Path(scratch.name)
    try:
        state = LaunchState(entity=ENTITY, lease_seconds=5)
        for queue in QUEUES:
            state.add_queue(queue)
        bins = await asyncio.to_thread(Binaries.find)
        multi = MultiCluster(
            root / "clusters",
            workers=workers,
            addons=ADDONS,
            bins=bins,
            worker_lost_timeout=WORKER_LOST_TIMEOUT,
        )
        say(f"starting a manager and {workers} workers in {root / 'clusters'}")
        async with multi, WandbServer(state) as wandb:
            by_name = {c.name: c for c in multi.clusters}

            async def apiserver(name: str, action: str) -> None:
                await act(by_name[name], action)

            secret = "wandb-api-key-chaos-agent"
            worker_http = {w.name: w.http for w in multi.workers}
            await prepare_namespace(
                multi.manager.http,
                worker_http,
                NAMESPACE,
                api_key=wandb.api_key,
                api_key_secret=secret,
            )
            world = RealWorld(
                wandb,
                multi.manager.http,
                multi.manager.kubeconfig,
                worker_http,
                {w.name: w.kubeconfig for w in multi.workers},
                NAMESPACE,
                apiserver,
                secret,
            )
            say("clusters up")
            yield world, root
    finally:
        await asyncio.to_thread(scratch.cleanup)


async def chaos_real(
    *,
    seed: int,
    runs: int,
    replicas: int,
    kills: int,
    workers: int,
    worker_kills: int,
    worker_down_seconds: float,
    deadline: float,
    say: Say,
    logs: Path | None = None,
) -> ChaosResult:
    async with real_world(workers, say) as (world, scratch):
        started = time.monotonic()
        harness = RealChaos(
            world,
            scratch,
            seed=seed,
            runs=runs,
            replicas=replicas,
            kills=kills,
            worker_kills=worker_kills,
            worker_down_seconds=worker_down_seconds,
            deadline=deadline,
            say=say,
            logs=logs,
        )
        result = await harness.run()
        say(f"bench done {time.monotonic() - started:.0f} s after the clusters were up")
        return result
