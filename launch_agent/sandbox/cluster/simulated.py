"""`SimulatedCluster`: the controllers and the kubelet around a `KubeApiServer`, on a clock.

Off unless a test starts it: without it, the API server only stores objects. With it, every
write (over HTTP or from Python) wakes a background task that runs all controllers until
nothing changes; with a `ManualClock` time then stands still until `advance(seconds)`, which
jumps from one due transition to the next (a pod's start, its exit, a retry back-off, a
deadline, a TTL) so intermediate states happen at the right simulated instants. With a
`RealClock` the task also wakes itself when the next transition is due.

Outcomes come from, in this order, for the pod and then each controlling owner up the chain
(Job, JobSet, TrainJob, ...): a script whose label selector matches that object's labels
(latest first), then that object's `sandbox.launch-agent.io/outcome` annotation. The Nth pod a
controller creates plays the Nth attempt of the outcome. A malformed annotation is reported as a
Warning Event `InvalidOutcome` on the object and in `cluster.problems`, and the default outcome
is used (`scripts.OutcomeBook`, which the real-cluster tier's node simulator shares).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from launch_agent.sandbox.cluster.clock import Clock, ManualClock
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.jobs import JobController
from launch_agent.sandbox.cluster.kubelet import DEFAULT_NODE, Kubelet
from launch_agent.sandbox.cluster.kueue import KueueController
from launch_agent.sandbox.cluster.nodes import Node
from launch_agent.sandbox.cluster.outcomes import Outcome
from launch_agent.sandbox.cluster.processes import ProcessRunner
from launch_agent.sandbox.cluster.quotas import reconcile_quota
from launch_agent.sandbox.cluster.scripts import OutcomeBook
from launch_agent.sandbox.cluster.workloads import CONTROLLERS
from launch_agent.sandbox.kube.apiserver import KubeApiServer
from launch_agent.sandbox.kube.store import Obj, Store, timestamp

MAX_PASSES = 50


class SimulatedCluster:
    def __init__(
        self,
        kube: KubeApiServer | Store,
        *,
        clock: Clock | None = None,
        nodes: Sequence[Node] | None = None,
        default_outcome: str = "succeed after=5s",
        tick: float = 0.05,
        kueue: bool = False,
        processes: Path | None = None,
        process_time_limit: float = 120.0,
        kubernetes_version: str = "1.31",
    ) -> None:
        """`processes`: a directory under which opted-in pods run as local processes
        (`cluster/processes.py`); None runs every pod as scripted. `kubernetes_version` selects
        the Job controller's behaviour ("1.30" or "1.31"+: see `JobController`)."""
        self.store = kube.store if isinstance(kube, KubeApiServer) else kube
        self.clock: Clock = clock or ManualClock()
        self.nodes = list(nodes or [])
        self.book = OutcomeBook(default_outcome)
        self.tick = tick
        # What a pod's containers write to their termination message file, whatever outcome
        # they play: each hook sees the pod's owner chain (pod first) and may answer a text
        # (`sandbox/kaniko.py` writes the pushed image's digest, as Kaniko's --digest-file).
        self.termination_hooks: list[Callable[[list[Obj]], str | None]] = []
        self.jobs = JobController(version=kubernetes_version)
        # Kueue (`cluster/kueue.py`): opt-in, and only once its Workload CRD is registered, so
        # tests that load every CRD and play Kueue by hand keep doing so.
        self.kueue = KueueController(enabled=kueue)
        self.runner = (
            None
            if processes is None
            else ProcessRunner(
                self.store,
                processes,
                time_limit=process_time_limit,
                on_change=self._wake_threadsafe,
                sim_seconds=self.clock.seconds,
            )
        )
        self.kubelet = Kubelet(self.nodes, self._outcome_for, self.runner)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeups: list[float] = []
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._saved_now = self.store.now

    # --- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> SimulatedCluster:
        self.store.now = self.clock.now
        self.store.listeners.append(self._on_write)
        for node in self.nodes or [
            Node(DEFAULT_NODE, {"cpu": "1000", "memory": "4000Gi", "pods": "10000"})
        ]:
            if self.store.find(self.store.rt("nodes"), "", node.name) is None:
                manifest = node.manifest(timestamp(self.clock.now()))
                status = manifest.pop("status")
                self.store.create(self.store.rt("nodes"), "", manifest)
                self.store.update(
                    self.store.rt("nodes"), "", node.name, {"status": status}, subresource="status"
                )
        self._loop = asyncio.get_running_loop()
        self.step()
        self._task = asyncio.create_task(self._run(), name="sandbox-simulated-cluster")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.runner is not None:
            await asyncio.to_thread(self.runner.close)
        if self._on_write in self.store.listeners:
            self.store.listeners.remove(self._on_write)
        self.store.now = self._saved_now

    def _on_write(self, storage: str, kind: str, obj: Obj) -> None:
        self._dirty.set()

    def _wake_threadsafe(self) -> None:
        # A local process printed or exited (from its reader thread).
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._dirty.set)

    async def _run(self) -> None:
        while True:
            if self.clock.manual:
                await self._dirty.wait()
            else:
                due = min(self._wakeups, default=self.clock.seconds() + 1.0)
                wait = max(min(due - self.clock.seconds(), 1.0), self.tick)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(wait):
                        await self._dirty.wait()
            self._dirty.clear()
            # A pass at a time, yielding between them: a burst of large objects (a hostile
            # item's manifest) would otherwise hold the loop that the agent under test shares
            # for as long as all fifty passes take.
            for _ in range(MAX_PASSES):
                if self._pass() == 0:
                    break
                await asyncio.sleep(0)

    # --- scripting ----------------------------------------------------------------------------

    def script(self, selector: str, outcome: str | Outcome | Sequence[Outcome]) -> None:
        """Pods of workloads whose labels match `selector` get `outcome` (grammar in outcomes)."""
        self.book.script(selector, outcome)

    def clear_scripts(self) -> None:
        self.book.clear_scripts()

    @property
    def problems(self) -> list[str]:
        return self.book.problems

    def _chain(self, pod: Obj) -> list[Obj]:
        chain, current = [pod], pod
        while len(chain) < 10:
            refs = [
                r for r in current["metadata"].get("ownerReferences") or [] if r.get("controller")
            ]
            found = self.store.by_uid(refs[0]["uid"]) if refs else None
            if found is None:
                break
            current = found[1]
            chain.append(current)
        return chain

    def _outcome_for(self, pod: Obj) -> Outcome:
        def warn(obj: Obj, problem: str) -> None:
            Ctx(self.store, self.clock).event(obj, "Warning", "InvalidOutcome", problem, "sandbox")

        chain = self._chain(pod)
        outcome = self.book.outcome_for(chain, warn)
        if not outcome.termination:
            for hook in self.termination_hooks:
                text = hook(chain)
                if text:
                    return dataclasses.replace(outcome, termination=text)
        return outcome

    # --- time ---------------------------------------------------------------------------------

    def step(self) -> int:
        """Run every controller until a pass writes nothing; returns the number of writes."""
        total = 0
        for _ in range(MAX_PASSES):
            writes = self._pass()
            total += writes
            if writes == 0:
                break
        return total

    def _pass(self) -> int:
        """Every controller once; returns the number of writes."""
        ctx = Ctx(self.store, self.clock)
        self.kueue.reconcile(ctx)
        self.jobs.reconcile(ctx)
        for resource, reconcile in CONTROLLERS.items():
            rt = self.store.registry.find(resource)
            if rt is None:
                continue
            for obj in self.store.list(rt, None):
                if not obj["metadata"].get("deletionTimestamp"):
                    reconcile(ctx, obj)
        self.kubelet.reconcile(ctx)
        for quota in self.store.list(self.store.rt("resourcequotas"), None):
            reconcile_quota(ctx, quota)
        self._wakeups = ctx.wakeups
        return ctx.writes

    def advance(self, seconds: float) -> None:
        """Move a manual clock forward, stopping at every transition due on the way."""
        if not isinstance(self.clock, ManualClock):
            raise TypeError("advance() needs a ManualClock; a RealClock moves by itself")
        target = self.clock.seconds() + seconds
        self.step()
        while True:
            due = [w for w in self._wakeups if self.clock.seconds() < w <= target]
            if not due:
                break
            self.clock.set(min(due))
            self.step()
        self.clock.set(target)
        self.step()
