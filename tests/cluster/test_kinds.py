"""Every workload kind whose controller runs on the real tier, from dispatch to the report in
W&B, with the example queue specs of `queue-specs/` (their namespace made the test's own).

On the real tier each kind is run by its upstream controller (JobSet v0.11.1, LeaderWorkerSet
v0.8.0, Trainer v2.2.0 creating a JobSet from the ClusterTrainingRuntime `torch-distributed`
its install applies, training-operator v1.9.3, KubeRay v1.5.0), its pods by the node
simulator; on the sandbox by `launch_agent/sandbox/cluster/`. Volcano has no real controller
here (the Go module proxy does not serve it), so it is tested on the sandbox only
(`tests/e2e/test_kinds.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from launch_agent.model.run_state import RunState
from launch_agent.realcluster.kubehttp import path_of
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.cluster.world import Obj, World, run_spec, until

EXAMPLES = Path(__file__).resolve().parents[2] / "queue-specs"


def use_example(world: World, file: str, queue: str) -> None:
    text = (EXAMPLES / file).read_text().replace("namespace: ml-training", "namespace: NAMESPACE")
    world.write_spec(file, text)
    world.state.add_queue(queue)


def item_of(world: World, queue: str, run_id: str) -> RunQueueItem:
    spec = run_spec(run_id)
    return world.push(spec, queue)


@contextlib.asynccontextmanager
async def watching(world: World, api_version: str, plural: str) -> AsyncIterator[list[Obj]]:
    """Every version of the namespace's workload objects, through a watch: the agent deletes
    a custom resource once its run is reported, so what its controller wrote is read here."""
    seen: list[Obj] = []
    path = path_of(api_version, plural, world.namespace)
    listed = await world.http.get(path)
    seen.extend(listed.get("items") or [])

    async def follow() -> None:
        async for kind, obj in world.http.watch(path, listed["metadata"]["resourceVersion"]):
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                seen.append(obj)

    task = asyncio.create_task(follow(), name=f"watch {plural}")
    try:
        yield seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def conditions(obj: Obj) -> dict[str, Obj]:
    return {
        c["type"]: c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type")
    }


async def runs_to_success(
    world: World, queue: str, api_version: str, plural: str, run_id: str
) -> Obj:
    """Dispatch, run, report success; returns the workload's last status seen."""
    item = item_of(world, queue, run_id)
    await world.script(f"launch-agent.io/run-id={run_id}", "succeed after=1s")
    config = world.config(queues=[queue])
    async with (
        watching(world, api_version, plural) as seen,
        world.running(world.agent(config)) as agent,
    ):
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(lambda: agent.runs.get(item.id) is None, within=90, message="run released")
        assert item.failure is None, item.failure
        outcomes = agent.metrics.registry.get_sample_value(
            "launch_agent_run_outcomes_total", {"state": "succeeded"}
        )
        assert outcomes == 1

        async def deleted() -> bool:
            return not await world.objects(api_version, plural)

        await until(deleted, message="the custom resource deleted once reported")
    assert len({o["metadata"]["uid"] for o in seen}) == 1
    for o in seen:
        print("SEEN", plural, o.get("status"))
    return seen[-1]


async def test_jobset(world: World) -> None:
    use_example(world, "jobset-gke.yaml", "jobset-tpu")
    js = await runs_to_success(world, "jobset-tpu", "jobset.x-k8s.io/v1alpha2", "jobsets", "js-1")
    completed = conditions(js)["Completed"]
    print(completed)


async def test_trainjob_from_the_installed_cluster_training_runtime(world: World) -> None:
    use_example(world, "trainjob.yaml", "trainjob")
    tj = await runs_to_success(
        world, "trainjob", "trainer.kubeflow.org/v1alpha1", "trainjobs", "tj-1"
    )
    print(conditions(tj))


async def test_pytorchjob(world: World) -> None:
    use_example(world, "pytorchjob.yaml", "pytorch-ddp")
    pj = await runs_to_success(world, "pytorch-ddp", "kubeflow.org/v1", "pytorchjobs", "pt-1")
    print(conditions(pj))


async def test_leaderworkerset_serves_until_stopped_from_wandb(world: World) -> None:
    use_example(world, "leaderworkerset.yaml", "lws-multihost")
    item = item_of(world, "lws-multihost", "lws-1")
    await world.script("launch-agent.io/run-id=lws-1", "run")
    config = world.config(queues=["lws-multihost"])
    api = "leaderworkerset.x-k8s.io/v1"
    async with (
        watching(world, api, "leaderworkersets") as seen,
        world.running(world.agent(config)) as agent,
    ):
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        record = agent.runs.get(item.id)
        assert record is not None
        await until(lambda: record.state is RunState.RUNNING, within=90, message="LWS running")
        print("LWS", seen[0].get("status") if seen else None)
        world.state.stop_run("ent", "proj", "lws-1")

        async def deleted() -> bool:
            return not await world.objects(api, "leaderworkersets")

        await until(deleted, message="the LWS deleted once stopped")
        await until(lambda: agent.runs.get(item.id) is None, message="record released")
    assert item.failure is None and item.state is ItemState.CLAIMED


async def test_rayjob(world: World) -> None:
    use_example(world, "rayjob.yaml", "ray")
    item = item_of(world, "ray", "ray-1")
    await world.script("launch-agent.io/run-id=ray-1", "succeed after=1s")
    config = world.config(queues=["ray"])
    async with world.running(world.agent(config)) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        record = agent.runs.get(item.id)
        assert record is not None
        await until(lambda: record.state is RunState.RUNNING, within=90, message="RayJob running")
        for _ in range(20):
            rj = await world.objects("ray.io/v1", "rayjobs")
            rc = await world.objects("ray.io/v1", "rayclusters")
            print("RJ", [r.get("status") for r in rj])
            print("RC", [(r["metadata"]["name"], (r.get("status") or {}).get("state")) for r in rc])
            print("AGENT", record.state, item.state, [w.message for w in item.warnings])
            await asyncio.sleep(1)


_ = Any
