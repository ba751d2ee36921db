"""`quota.mode: kueue` on either tier: admission by a ClusterQueue's quota, preemption by a
higher WorkloadPriorityClass (a requeue in W&B, never a failure), deactivation.

On the real tier this is Kueue v0.17.0 itself (Workloads stored as v1beta2; the agent reads the
newest version served), with its webhooks suspending the agent's Jobs and its scheduler
admitting them; on the sandbox, `launch_agent/sandbox/cluster/kueue.py`.
ClusterQueues, ResourceFlavors and WorkloadPriorityClasses are cluster-scoped: each test names
its own after its namespace and deletes them at the end.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from launch_agent.realcluster.kubehttp import ApiError, path_of
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.cluster.world import Obj, World, run_spec, until

KUEUE = "kueue.x-k8s.io/v1beta2"

SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: SPEC_NAME
spec:
  queues: [W_QUEUE]
  namespace: NAMESPACE
  kueue:
    queueName: lq
  template:
    apiVersion: batch/v1
    kind: Job
    metadata:
      labels: LABELS
    spec:
      backoffLimit: 0
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
              resources:
                requests: {cpu: "1", memory: 1Gi}
"""


def spec(name: str = "kueue", queue: str = "q1", priority: str | None = None) -> str:
    labels = "{}" if priority is None else f"{{kueue.x-k8s.io/priority-class: {priority}}}"
    return SPEC.replace("SPEC_NAME", name).replace("W_QUEUE", queue).replace("LABELS", labels)


def warned(item: RunQueueItem, text: str) -> bool:
    return any(text in w.message for w in item.warnings)


def warnings(item: RunQueueItem) -> list[str]:
    return [w.message for w in item.warnings]


class Queues:
    """A ResourceFlavor, a ClusterQueue and the namespace's LocalQueue `lq`."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.cq = f"{world.namespace}-cq"
        self.flavor = f"{world.namespace}-flavor"
        self.created: list[str] = []

    async def _create(self, plural: str, body: Obj) -> None:
        await self.world.http.create(path_of(KUEUE, plural), body)
        self.created.append(path_of(KUEUE, plural, name=body["metadata"]["name"]))

    async def create(self, cpu: str, preemption: dict[str, Any] | None = None) -> None:
        await self._create(
            "resourceflavors",
            {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": self.flavor}},
        )
        spec: Obj = {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": self.flavor,
                            "resources": [
                                {"name": "cpu", "nominalQuota": cpu},
                                {"name": "memory", "nominalQuota": "64Gi"},
                            ],
                        }
                    ],
                }
            ],
        }
        if preemption is not None:
            spec["preemption"] = preemption
        await self._create(
            "clusterqueues",
            {
                "apiVersion": KUEUE,
                "kind": "ClusterQueue",
                "metadata": {"name": self.cq},
                "spec": spec,
            },
        )
        await self.world.create(
            KUEUE,
            "localqueues",
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {"name": "lq"},
                "spec": {"clusterQueue": self.cq},
            },
        )

    async def priority_class(self, name: str, value: int) -> str:
        full = f"{self.world.namespace}-{name}"
        await self._create(
            "workloadpriorityclasses",
            {
                "apiVersion": KUEUE,
                "kind": "WorkloadPriorityClass",
                "metadata": {"name": full},
                "value": value,
            },
        )
        return full

    async def delete(self) -> None:
        for path in reversed(self.created):
            with contextlib.suppress(ApiError):
                await self.world.http.delete(path)


@contextlib.asynccontextmanager
async def queues(world: World) -> AsyncIterator[Queues]:
    made = Queues(world)
    try:
        yield made
    finally:
        await made.delete()


async def workloads(world: World) -> list[Obj]:
    return await world.objects(KUEUE, "workloads")


async def job_of(world: World, run_id: str) -> Obj:
    [job] = await world.objects(
        "batch/v1", "jobs", labelSelector=f"launch-agent.io/run-id={run_id}"
    )
    return job


def kueue_config(world: World, queues: tuple[str, ...] = ("q1",)) -> Any:
    return world.config(
        queues=list(queues),
        quota={"mode": "kueue"},
        tracking={"stop_check_seconds": 0.2, "start_timeout_seconds": 600},
    )


async def test_kueue_admits_by_quota_and_the_second_run_waits_for_the_first(world: World) -> None:
    world.write_spec("kueue.yaml", spec())
    async with queues(world) as q:
        await q.create(cpu="1")
        await world.script("launch-agent.io/run-id=k1", "succeed after=4s")
        await world.script("launch-agent.io/run-id=k2", "succeed after=1s")
        first = world.push(run_spec("k1"))
        admitted = f"admitted by Kueue: LocalQueue {world.namespace}/lq (ClusterQueue {q.cq})"
        async with world.running(world.agent(kueue_config(world))) as agent:
            await until(lambda: warned(first, admitted), message="the first admitted")
            second = world.push(run_spec("k2"))
            waiting = (
                f"waiting for Kueue: LocalQueue {world.namespace}/lq: couldn't assign flavors to"
                f" pod set main: insufficient unused quota for cpu in flavor {q.flavor}, 1 more"
                " needed"
            )
            await until(lambda: warned(second, waiting), message="the second waits for quota")
            job = await job_of(world, "k2")
            assert job["spec"]["suspend"] is True
            assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq"
            await until(lambda: warned(second, admitted), within=60, message="second admitted")
            await until(lambda: not agent.runs, within=60, message="both finished")
        assert warnings(first) == [admitted]
        assert warnings(second) == [waiting, admitted]
        assert (first.state, second.state) == (ItemState.CLAIMED, ItemState.CLAIMED)
        assert first.failure is None and second.failure is None
        finished = [
            next(c for c in wl["status"]["conditions"] if c["type"] == "Finished")
            for wl in await workloads(world)
        ]
        # Kueue copies the Job controller's own Complete message.
        assert [(c["reason"], c["message"]) for c in finished] == [
            ("Succeeded", "Reached expected number of succeeded pods")
        ] * 2


async def test_a_higher_priority_run_preempts_and_the_lower_is_requeued(world: World) -> None:
    """withinClusterQueue LowerPriority: the high run's Workload evicts the low one's; the
    agent reports the eviction as a warning (the run is suspended and requeued in Kueue, not
    failed), and the low run is admitted again and finishes once the high one is done."""
    world.state.add_queue("q2")
    async with queues(world) as q:
        low = await q.priority_class("low", 100)
        high = await q.priority_class("high", 1000)
        world.write_spec("low.yaml", spec("low", "q1", low))
        world.write_spec("high.yaml", spec("high", "q2", high))
        await q.create(cpu="1", preemption={"withinClusterQueue": "LowerPriority"})
        await world.script("launch-agent.io/run-id=lo", "succeed after=8s")
        await world.script("launch-agent.io/run-id=hi", "succeed after=2s")
        lo = world.push(run_spec("lo"), "q1")
        admitted = f"admitted by Kueue: LocalQueue {world.namespace}/lq (ClusterQueue {q.cq})"
        async with world.running(world.agent(kueue_config(world, ("q1", "q2")))) as agent:
            await until(lambda: warned(lo, admitted), message="low admitted")

            async def low_runs() -> bool:
                got = await world.objects("v1", "pods", labelSelector="launch-agent.io/run-id=lo")
                return any((p.get("status") or {}).get("phase") == "Running" for p in got)

            await until(low_runs, message="low's pod runs")
            hi = world.push(run_spec("hi"), "q2")
            await until(lambda: warned(lo, "evicted by Kueue"), message="low preempted")
            await until(lambda: warned(hi, admitted), message="high admitted")
            assert lo.failure is None and lo.state is ItemState.CLAIMED
            assert (await job_of(world, "lo"))["spec"]["suspend"] is True
            await until(
                lambda: warnings(lo).count(admitted) == 2, within=60, message="low admitted again"
            )
            await until(lambda: not agent.runs, within=60, message="both finished")
        [high_wl] = [w for w in await workloads(world) if w["spec"]["priority"] == 1000]
        evicted = (
            f"evicted by Kueue (InClusterQueue: Preempted to accommodate a workload (UID:"
            f" {high_wl['metadata']['uid']}, JobUID:"
            f" {high_wl['metadata']['labels']['kueue.x-k8s.io/job-uid']}) due to prioritization"
            f" in the ClusterQueue; preemptor path: /{q.cq}; preemptee path: /{q.cq}); the run is"
            f" suspended and waits in LocalQueue {world.namespace}/lq to be admitted again"
        )
        assert warnings(lo) == [admitted, evicted, admitted]
        assert warnings(hi)[-1] == admitted
        assert warnings(hi)[0].endswith("1 more needed. Pending the preemption of 1 workload(s)")
        assert (lo.state, hi.state) == (ItemState.CLAIMED, ItemState.CLAIMED)
        assert (lo.failure, hi.failure) == (None, None)


async def test_a_deactivated_workload_fails_the_run_in_kueues_words(world: World) -> None:
    """An admin's `spec.active: false`: Kueue evicts the Workload and never admits it again, so
    the run is failed (once, with one warning) and its Job deleted."""
    world.write_spec("kueue.yaml", spec())
    async with queues(world) as q:
        await q.create(cpu="4")
        await world.script("launch-agent.io/run-id=de", "succeed after=600s")
        item = world.push(run_spec("de"))
        async with world.running(world.agent(kueue_config(world))):
            await until(lambda: warned(item, "admitted by Kueue"), message="admitted")
            [wl] = await workloads(world)
            await world.http.patch(
                path_of(KUEUE, "workloads", world.namespace, wl["metadata"]["name"]),
                {"spec": {"active": False}},
            )
            await until(lambda: item.state is ItemState.FAILED, message="failed in W&B")

            said = None

            async def deleted() -> bool:
                return not await world.objects("batch/v1", "jobs")

            await until(deleted, message="the run's Job deleted")
        # Kueue's own record of it, which outlives the Workload.
        said = {
            (e["involvedObject"]["kind"], e["reason"]): e["message"] for e in await world.events()
        }
        assert said[("Workload", "EvictedDueToDeactivated")] == "The workload is deactivated"
        assert item.failure is not None and item.failure.stage == "run"
        assert item.failure.message == (
            f"Job {world.namespace}/kueue-4 failed (Deactivated): Kueue deactivated the Workload of"
            " Job kueue-4 (Deactivated: the Workload was deactivated (spec.active: false)); it"
            " stays suspended and is never admitted again"
        )
        deactivations = [w for w in warnings(item) if w.startswith("Kueue deactivated")]
        assert len(deactivations) == 1, warnings(item)
