"""Every kind the session's controllers serve, through MultiKueue (real tier only: the sandbox
has no MultiKueue, see conftest): created on the manager with the managedBy field its Kueue
adapter checks, left alone by the manager's own controller, run by the worker's, and its worker
reported. One agent serves one queue per kind, so the kinds run side by side."""

from __future__ import annotations

from launch_agent.render.kinds import MULTIKUEUE_CONTROLLER, lookup
from launch_agent.sandbox.wandb import ItemState
from tests.cluster.multi.conftest import MultiBackend
from tests.cluster.multi.multiworld import MultiWorld
from tests.cluster.world import run_spec, until

HEADER = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: KINDNAME
spec:
  queues: [KINDNAME]
  namespace: NAMESPACE
  kueue: {queueName: lq, multiKueue: true}
"""
CONTAINER = """\
                - name: CNAME
                  image: ${image_uri}
                  resources:
                    requests: {cpu: "1", memory: 1Gi}
"""
# kind -> (add-on serving it, the rest of the queue spec)
KINDS = {
    "jobset": (
        "jobset",
        """\
  template:
    apiVersion: jobset.x-k8s.io/v1alpha2
    kind: JobSet
    spec:
      replicatedJobs:
        - name: node
          replicas: 1
          template:
            spec:
              backoffLimit: 0
              template:
                spec:
                  containers:
                    - name: main
                      image: ${image_uri}
                      resources:
                        requests: {cpu: "1", memory: 1Gi}
""",
    ),
    "trainjob": (
        "trainer",
        """\
  security:
    trainingRuntimes: [torch-distributed]
  template:
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    spec:
      runtimeRef: {name: torch-distributed}
      trainer:
        numNodes: 1
        resourcesPerNode:
          requests: {cpu: "1", memory: 1Gi}
""",
    ),
    "pytorchjob": (
        "training-operator",
        """\
  template:
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    spec:
      pytorchReplicaSpecs:
        Master:
          replicas: 1
          restartPolicy: Never
          template:
            spec:
              containers:
"""
        + CONTAINER.replace("CNAME", "pytorch"),
    ),
    "rayjob": (
        "kuberay",
        """\
  template:
    apiVersion: ray.io/v1
    kind: RayJob
    spec:
      entrypoint: python train.py
      rayClusterSpec:
        headGroupSpec:
          rayStartParams: {}
          template:
            spec:
              containers:
"""
        + CONTAINER.replace("CNAME", "ray-head"),
    ),
}
# The node simulator plays pods, not a Ray dashboard: a RayJob is followed until its worker's
# KubeRay made its RayCluster, then stopped.
RUN_TO_THE_END = {"jobset", "trainjob", "pytorchjob"}


async def test_each_served_kind_runs_on_a_worker_through_multikueue(
    mworld: MultiWorld, multi: MultiBackend
) -> None:
    kinds = sorted(k for k, (addon, _) in KINDS.items() if addon in multi.addons)
    assert kinds, f"no MultiKueue kind besides Job among the add-ons {multi.addons}"
    for kind in kinds:
        text = HEADER.replace("KINDNAME", kind) + KINDS[kind][1]
        mworld.write_spec(f"{kind}.yaml", text)
        mworld.state.add_queue(kind)
    items = {k: mworld.push(run_spec(f"{k}-1"), queue=k) for k in kinds}
    await mworld.script("launch-agent.io/agent=tier-agent", "succeed after=3s")
    config = mworld.config(queues=kinds)
    async with mworld.running(mworld.agent(config)) as agent:
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items.values()),
            within=180,
            message="claimed",
        )
        for kind in kinds:
            record = next(r for r in agent.runs if r.queue == kind)
            info = lookup(record.api_version, record.kind)
            assert info is not None and info.managed_by is not None
            found = await mworld.objects(record.api_version, info.plural)
            (obj,) = [o for o in found if o["metadata"]["name"] == record.name]
            assert info.managed_by_of(obj) == MULTIKUEUE_CONTROLLER, kind
            # Objects another controller made from a run (owned by it) are not the agent's:
            # on the manager, Trainer v2.2.0 makes a JobSet for a TrainJob even with
            # MultiKueue's managedBy (seen here; docs/multicluster.md).
            others = [
                o["metadata"]["name"]
                for o in found
                if o is not obj and not o["metadata"].get("ownerReferences")
            ]
            assert others == [], (kind, others)
        await until(
            lambda: all(
                any("MultiKueue runs it on worker cluster" in w.message for w in i.warnings)
                for i in items.values()
            ),
            within=180,
            message="every kind placed on a worker",
        )
        finished = {k for k in kinds if k in RUN_TO_THE_END}
        await until(
            lambda: not any(r.queue in finished for r in agent.runs),
            within=240,
            message="the kinds that run to the end released",
        )
        if "rayjob" in kinds:
            record = next(r for r in agent.runs if r.queue == "rayjob")
            assert record.worker is not None

            async def ray_cluster_on_worker() -> bool:
                assert record.worker is not None
                found = await mworld.worker_objects(record.worker, "ray.io/v1", "rayclusters")
                return bool(found)

            await until(ray_cluster_on_worker, within=120, message="the worker's RayCluster")
            # KubeRay on the manager leaves a MultiKueue RayJob alone: no cluster here.
            assert await mworld.objects("ray.io/v1", "rayclusters") == []
    for kind in kinds:
        assert items[kind].failure is None, (kind, items[kind].failure)
