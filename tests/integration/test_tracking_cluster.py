"""Tracking end to end below the agent: informers + `assess` against the simulated cluster.

The simulated cluster (its Job controller and kubelet were written from the Kubernetes docs, not
from `launch_agent.tracking`) plays each scripted outcome; the adapter's informers deliver the
Job and its pods over real watches; `assess` must name the outcome a person would want to read.
Pods deleted by the cluster (a preempted pod is deleted by the scheduler) are kept from their
DELETED event, as the agent's runtime does, because they explain the Job's failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from launch_agent.adapters.kube import (
    InformerEvent,
    InformerSet,
    InformerSettings,
    KubeClient,
    Resource,
)
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.run_state import Reason, RunState
from launch_agent.sandbox.cluster import ANNOTATION, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.tracking import TrackingPolicy, assess

NS = "default"
JOBS = Resource("batch", "v1", "Job", "jobs")
PODS = Resource("", "v1", "Pod", "pods")
SELECTOR = "launch-agent.io/agent=test-agent"
POLICY = TrackingPolicy(unschedulable_deadline=timedelta(minutes=2))


class Tracker:
    """What the runtime keeps per run: the latest Job and every pod seen, deleted ones too."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}
        self.changed = asyncio.Condition()
        self.informers: Any = None

    async def __call__(self, event: InformerEvent) -> None:
        name = event.obj["metadata"]["name"]
        async with self.changed:
            if event.resource.kind != "Pod" and event.type != "DELETED":
                self.jobs[name] = event.obj
            elif event.resource.kind == "Pod":
                self.pods[name] = event.obj  # DELETED keeps the final object
            self.changed.notify_all()

    def pods_of(self, run: str) -> list[dict[str, Any]]:
        """The run's pods by the run label the agent puts on every pod template."""
        return [
            p
            for p in self.pods.values()
            if (p["metadata"].get("labels") or {}).get("launch-agent.io/run-id") == run
        ]


def job_manifest(name: str, outcome: str) -> dict[str, Any]:
    labels = {"launch-agent.io/agent": "test-agent", "launch-agent.io/run-id": name}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels, "annotations": {ANNOTATION: outcome}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "ghcr.io/acme/train:1.2",
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                },
            },
        },
    }


@pytest.fixture
async def setup(
    tmp_path: Path,
) -> AsyncIterator[tuple[KubeApiServer, SimulatedCluster, KubeClient, Tracker]]:
    async with (
        KubeApiServer(host="127.0.0.1", port=0, bookmark_interval=60.0) as kube,
        SimulatedCluster(kube) as cluster,
    ):
        path = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
        policy = RetryPolicy(base_delay=0.01, max_delay=0.05)
        async with await KubeClient.from_kubeconfig(str(path), policy=policy) as client:
            tracker = Tracker()
            settings = InformerSettings(label_selector=SELECTOR, backoff_base=0.02)
            async with InformerSet(client, tracker, settings) as infs:
                tracker.informers = infs
                infs.add(JOBS, NS)
                infs.add(PODS, NS)
                async with asyncio.timeout(10):
                    await infs.wait_synced()
                yield kube, cluster, client, tracker


async def settle(kube: KubeApiServer, tracker: Tracker, name: str, resource: str = "jobs") -> None:
    """Until the informers have delivered the store's current workload and pods."""

    def caught_up() -> bool:
        job = kube.objects.find(resource, name, NS)
        seen = tracker.jobs.get(name)
        if job is None or seen is None:
            return False
        if seen["metadata"]["resourceVersion"] != job["metadata"]["resourceVersion"]:
            return False
        live = {
            p["metadata"]["name"]: p["metadata"]["resourceVersion"]
            for p in kube.objects.list("pods", NS, label_selector=f"launch-agent.io/run-id={name}")
        }
        mine = {
            n: p["metadata"]["resourceVersion"]
            for n, p in ((p["metadata"]["name"], p) for p in tracker.pods_of(name))
            if n in live
        }
        return mine == live

    async with asyncio.timeout(10), tracker.changed:
        await tracker.changed.wait_for(caught_up)


CASES = [
    ("succeed after=5s", 10, RunState.SUCCEEDED, None),
    ("exit code=3 after=2s", 10, RunState.FAILED, Reason.EXIT_CODE),
    ("oomkilled after=2s", 10, RunState.FAILED, Reason.OOM_KILLED),
    # ErrImagePull says "not found": that cannot recover, the run fails at once.
    ("imagepullbackoff after=20s", 10, RunState.FAILED, Reason.IMAGE_PULL),
    # The kubelet's back-off message names no cause (only its Events do): a warning until
    # tracking.image_pull_grace_seconds (300) has passed.
    ("imagepullbackoff", 30, RunState.STARTING, Reason.IMAGE_PULL),
    ("imagepullbackoff", 400, RunState.FAILED, Reason.IMAGE_PULL),
    ("invalidimagename", 10, RunState.FAILED, Reason.INVALID_IMAGE_NAME),
    # A Secret may still sync: failed after tracking.container_config_grace_seconds (300).
    ("createcontainerconfigerror", 10, RunState.STARTING, Reason.CREATE_CONTAINER_CONFIG_ERROR),
    ("createcontainerconfigerror", 400, RunState.FAILED, Reason.CREATE_CONTAINER_CONFIG_ERROR),
    ("unschedulable", 30, RunState.STARTING, Reason.UNSCHEDULABLE),
    ("unschedulable", 200, RunState.FAILED, Reason.UNSCHEDULABLE),
    # Node-pressure eviction (TerminationByKubelet) is the node's doing: requeued.
    ("evicted after=2s", 10, RunState.PREEMPTED, Reason.EVICTED),
    ("preempted after=2s", 10, RunState.PREEMPTED, Reason.PREEMPTED),
    ("run", 30, RunState.RUNNING, None),
]


@pytest.mark.parametrize(
    ("outcome", "seconds", "state", "reason"),
    [pytest.param(*case, id=f"{case[0]} +{case[1]}s") for case in CASES],
)
async def test_outcome_is_tracked(
    setup: tuple[KubeApiServer, SimulatedCluster, KubeClient, Tracker],
    outcome: str,
    seconds: float,
    state: RunState,
    reason: Reason | None,
) -> None:
    kube, cluster, client, tracker = setup
    await client.create(job_manifest("run-1", outcome), NS)
    await settle(kube, tracker, "run-1")
    cluster.advance(seconds)
    await settle(kube, tracker, "run-1")
    got, diagnosis = assess(
        tracker.jobs["run-1"], tracker.pods_of("run-1"), cluster.clock.now(), POLICY
    )
    assert (got, diagnosis.reason if diagnosis else None) == (state, reason), diagnosis
    if diagnosis is not None and reason in (Reason.OOM_KILLED, Reason.EXIT_CODE):
        assert diagnosis.container == "main"
    if reason is Reason.IMAGE_PULL:
        assert diagnosis is not None
        assert diagnosis.image == "ghcr.io/acme/train:1.2"


async def test_stop_deletes_the_job_and_its_pods(
    setup: tuple[KubeApiServer, SimulatedCluster, KubeClient, Tracker],
) -> None:
    kube, cluster, client, tracker = setup
    await client.create(job_manifest("run-stop", "run"), NS)
    cluster.advance(5)
    await settle(kube, tracker, "run-stop")
    assert (
        assess(tracker.jobs["run-stop"], tracker.pods_of("run-stop"), cluster.clock.now())[0]
        is RunState.RUNNING
    )
    assert kube.objects.list("pods", NS, label_selector="job-name=run-stop")

    assert await client.delete(JOBS, NS, "run-stop")
    cluster.advance(60)  # termination grace periods
    assert kube.objects.find("jobs", "run-stop", NS) is None
    assert kube.objects.list("pods", NS, label_selector="job-name=run-stop") == []


CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds"
LABELS = {"launch-agent.io/agent": "test-agent", "launch-agent.io/run-id": "run-cr"}
CONTAINER = {"name": "main", "image": "ghcr.io/acme/train:1.2"}
TEMPLATE = {
    "metadata": {"labels": LABELS},
    "spec": {"restartPolicy": "Never", "containers": [CONTAINER]},
}


def jobset() -> dict[str, Any]:
    job = {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": TEMPLATE}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": job}}]},
    }


def pytorchjob() -> dict[str, Any]:
    replica = {"restartPolicy": "Never", "template": TEMPLATE}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, **replica},
                "Worker": {"replicas": 2, **replica},
            }
        },
    }


def volcano() -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "spec": {
            "minAvailable": 2,
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [{"name": "worker", "replicas": 2, "template": TEMPLATE}],
        },
    }


CR_CASES = [
    (jobset, "jobset.x-k8s.io_jobsets.yaml", "succeed after=2s", RunState.SUCCEEDED, None),
    (
        jobset,
        "jobset.x-k8s.io_jobsets.yaml",
        "exit code=4 after=2s",
        RunState.FAILED,
        Reason.EXIT_CODE,
    ),
    (
        pytorchjob,
        "kubeflow.org_pytorchjobs.yaml",
        "oomkilled after=2s",
        RunState.FAILED,
        Reason.OOM_KILLED,
    ),
    (pytorchjob, "kubeflow.org_pytorchjobs.yaml", "run", RunState.RUNNING, None),
    (volcano, "batch.volcano.sh_jobs.yaml", "succeed after=2s", RunState.SUCCEEDED, None),
    (
        volcano,
        "batch.volcano.sh_jobs.yaml",
        "imagepullbackoff",
        RunState.STARTING,  # the back-off names no cause: within the pull grace
        Reason.IMAGE_PULL,
    ),
]


@pytest.mark.parametrize(
    ("make", "crd", "outcome", "state", "reason"),
    [pytest.param(*c, id=f"{c[0].__name__} {c[2]}") for c in CR_CASES],
)
async def test_custom_resource_outcome_is_tracked(
    setup: tuple[KubeApiServer, SimulatedCluster, KubeClient, Tracker],
    make: Any,
    crd: str,
    outcome: str,
    state: RunState,
    reason: Reason | None,
) -> None:
    kube, cluster, client, tracker = setup
    await kube.load_crd_file(CRDS / crd)
    manifest = make()
    manifest["metadata"] = {
        "name": "run-cr",
        "labels": LABELS,
        "annotations": {ANNOTATION: outcome},
    }
    resource = await client.resolve(manifest["apiVersion"], manifest["kind"])
    informers: InformerSet = tracker.informers
    informers.add(resource, NS)
    await client.create(manifest, NS)
    plural = f"{resource.plural}.{resource.group}"
    await settle(kube, tracker, "run-cr", plural)
    cluster.advance(30)
    await settle(kube, tracker, "run-cr", plural)
    got, diagnosis = assess(
        tracker.jobs["run-cr"], tracker.pods_of("run-cr"), cluster.clock.now(), POLICY
    )
    assert (got, diagnosis.reason if diagnosis else None) == (state, reason), diagnosis
