"""Controllers for the custom workload kinds: children, and status in the CRD's own shape.

Every status the sandbox writes is checked against the CRD's openAPIV3Schema closed to unknown
fields, so a controller cannot invent a field name the real operator does not have."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from launch_agent.sandbox.cluster import ANNOTATION, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from launch_agent.sandbox.kube.apiserver import load_crd_documents
from launch_agent.sandbox.kube.validation import close_schema
from tests.integration.sandbox_kube.conftest import CRD_FILES

CONTAINER = {"name": "main", "image": "busybox:1.36"}
POD_TEMPLATE = {"spec": {"containers": [CONTAINER]}}


async def assert_status_matches_crd(crds: Path, obj: dict[str, Any]) -> None:
    def check() -> None:
        [crd] = load_crd_documents(crds / CRD_FILES[obj["kind"]])
        version = obj["apiVersion"].split("/")[1]
        schema = next(v for v in crd["spec"]["versions"] if v["name"] == version)["schema"][
            "openAPIV3Schema"
        ]
        status_schema = close_schema(schema["properties"]["status"])
        jsonschema.Draft7Validator(status_schema).validate(obj["status"])

    await asyncio.get_running_loop().run_in_executor(None, check)


def conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj["status"].get("conditions") or []}


def jobset(
    name: str, replicas: int = 2, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": 1,
                            "completions": 1,
                            "backoffLimit": 0,
                            "template": {
                                "spec": {"restartPolicy": "Never", "containers": [CONTAINER]}
                            },
                        }
                    },
                }
            ]
        },
    }


@pytest.mark.parametrize(
    ("outcome", "terminal", "condition"),
    [("succeed", "Completed", "Completed"), ("exit code=4", "Failed", "Failed")],
)
async def test_jobset(
    kube: KubeApiServer,
    cluster: SimulatedCluster,
    crds: Path,
    outcome: str,
    terminal: str,
    condition: str,
) -> None:
    kube.objects.create("jobsets", jobset("js", annotations={ANNOTATION: outcome}))
    cluster.step()
    jobs = kube.objects.list("jobs", label_selector="jobset.sigs.k8s.io/jobset-name=js")
    assert [j["metadata"]["name"] for j in jobs] == ["js-workers-0", "js-workers-1"]
    assert len(kube.objects.list("pods", label_selector="jobset.sigs.k8s.io/jobset-name=js")) == 2
    cluster.advance(10)
    js = kube.objects.get("jobsets", "js")
    assert js["status"]["terminalState"] == terminal
    assert conditions(js)[condition] == "True"
    [rj] = js["status"]["replicatedJobsStatus"]
    assert rj["name"] == "workers" and rj["succeeded" if terminal == "Completed" else "failed"] >= 1
    await assert_status_matches_crd(crds, js)


async def test_pytorchjob_success_and_failure(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    for name, outcome in (("good", "succeed"), ("bad", "oomkilled")):
        kube.objects.create(
            "pytorchjobs",
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {"name": name, "annotations": {ANNOTATION: outcome}},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {
                            "replicas": 1,
                            "restartPolicy": "Never",
                            "template": POD_TEMPLATE,
                        },
                        "Worker": {
                            "replicas": 2,
                            "restartPolicy": "Never",
                            "template": POD_TEMPLATE,
                        },
                    }
                },
            },
        )
    cluster.advance(1)
    names = sorted(
        p["metadata"]["name"]
        for p in kube.objects.list("pods", label_selector="training.kubeflow.org/job-name=good")
    )
    assert names == ["good-master-0", "good-worker-0", "good-worker-1"]
    assert conditions(kube.objects.get("pytorchjobs", "good"))["Running"] == "True"
    cluster.advance(10)
    good, bad = kube.objects.get("pytorchjobs", "good"), kube.objects.get("pytorchjobs", "bad")
    assert (
        conditions(good)["Succeeded"] == "True"
        and good["status"]["replicaStatuses"]["Master"]["succeeded"] == 1
    )
    assert conditions(bad)["Failed"] == "True"
    failed = next(c for c in bad["status"]["conditions"] if c["type"] == "Failed")
    assert (
        failed["reason"] == "PyTorchJobFailed" and "Master replica(s) failed" in failed["message"]
    )
    for obj in (good, bad):
        await assert_status_matches_crd(crds, obj)


async def test_trainjob_runs_through_a_jobset(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create(
        "trainjobs",
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "tj", "labels": {"run": "t"}},
            "spec": {
                "runtimeRef": {"name": "torch-distributed"},
                "trainer": {"image": "pytorch:2", "numNodes": 2},
            },
        },
    )
    cluster.script("run=t", "succeed after=3s")
    cluster.step()
    assert kube.objects.get("jobsets", "tj")["metadata"]["ownerReferences"][0]["kind"] == "TrainJob"
    assert len(kube.objects.list("pods")) == 2
    cluster.advance(10)
    tj = kube.objects.get("trainjobs", "tj")
    assert conditions(tj)["Complete"] == "True"
    assert tj["status"]["jobsStatus"][0]["succeeded"] == 1
    await assert_status_matches_crd(crds, tj)


async def test_leaderworkerset_becomes_available(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create(
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws"},
            "spec": {
                "replicas": 2,
                "leaderWorkerTemplate": {"size": 3, "workerTemplate": POD_TEMPLATE},
            },
        },
    )
    cluster.script("leaderworkerset.sigs.k8s.io/name=lws", "run")
    cluster.step()
    names = sorted(p["metadata"]["name"] for p in kube.objects.list("pods"))
    assert names == ["lws-0", "lws-0-1", "lws-0-2", "lws-1", "lws-1-1", "lws-1-2"]
    lws = kube.objects.get("leaderworkersets", "lws")
    assert conditions(lws) == {"Progressing": "True"}  # only true conditions are written
    cluster.advance(2)
    lws = kube.objects.get("leaderworkersets", "lws")
    assert conditions(lws) == {"Progressing": "False", "Available": "True"}
    assert lws["status"]["readyReplicas"] == 2
    await assert_status_matches_crd(crds, lws)


@pytest.mark.parametrize(
    ("outcome", "deployment", "job_status"),
    [("succeed", "Complete", "SUCCEEDED"), ("fail", "Failed", "FAILED")],
)
async def test_rayjob(
    kube: KubeApiServer,
    cluster: SimulatedCluster,
    crds: Path,
    outcome: str,
    deployment: str,
    job_status: str,
) -> None:
    kube.objects.create(
        "rayjobs",
        {
            "apiVersion": "ray.io/v1",
            "kind": "RayJob",
            "metadata": {"name": "rj", "annotations": {ANNOTATION: outcome}},
            "spec": {
                "entrypoint": "python train.py",
                "shutdownAfterJobFinishes": True,
                "submitterConfig": {"backoffLimit": 0},
                "rayClusterSpec": {
                    "headGroupSpec": {"template": POD_TEMPLATE},
                    "workerGroupSpecs": [
                        {"groupName": "gpu", "replicas": 1, "template": POD_TEMPLATE}
                    ],
                },
            },
        },
    )
    cluster.step()
    rj = kube.objects.get("rayjobs", "rj")
    assert rj["status"]["jobDeploymentStatus"] == "Initializing"
    cluster.advance(2)  # head and worker are ready; the submitter Job starts
    assert kube.objects.get("rayjobs", "rj")["status"]["jobStatus"] == "RUNNING"
    assert kube.objects.find("jobs", "rj") is not None
    cluster.advance(10)
    rj = kube.objects.get("rayjobs", "rj")
    assert (rj["status"]["jobDeploymentStatus"], rj["status"]["jobStatus"]) == (
        deployment,
        job_status,
    )
    await assert_status_matches_crd(crds, rj)
    cluster.step()
    assert kube.objects.list("pods", label_selector="ray.io/is-ray-node=yes") == []  # shut down


@pytest.mark.parametrize(
    ("outcome", "phase"), [("succeed", "Completed"), ("exit code=1", "Failed")]
)
async def test_volcano_job(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path, outcome: str, phase: str
) -> None:
    kube.objects.create(
        "jobs.batch.volcano.sh",
        {
            "apiVersion": "batch.volcano.sh/v1alpha1",
            "kind": "Job",
            "metadata": {"name": "vj", "annotations": {ANNOTATION: outcome}},
            "spec": {
                "minAvailable": 2,
                "schedulerName": "volcano",
                "queue": "default",
                "tasks": [
                    {
                        "name": "worker",
                        "replicas": 2,
                        "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}},
                    }
                ],
            },
        },
    )
    cluster.advance(1)
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert vj["status"]["state"]["phase"] == "Running" and vj["status"]["running"] == 2
    assert sorted(p["metadata"]["name"] for p in kube.objects.list("pods")) == [
        "vj-worker-0",
        "vj-worker-1",
    ]
    cluster.advance(10)
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert vj["status"]["state"]["phase"] == phase
    assert [c["status"] for c in vj["status"]["conditions"]] == ["Pending", "Running", phase]
    await assert_status_matches_crd(crds, vj)
