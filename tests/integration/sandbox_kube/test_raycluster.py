"""KubeRay's RayCluster as its own object: created and owned by the RayJob, making the pods,
reporting a refused pod in its Events and status, deleted with the RayJob.

ray-project/kuberay `rayjob_controller.go` (`getOrCreateRayClusterInstance`,
`constructRayClusterForRayJob`, `deleteClusterResources`, `handleShutdownAfterJobFinishes`)
and `raycluster_controller.go` (`reconcilePods`, `createHeadPod`, `calculateStatus`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.integration.sandbox_kube.conftest import CRD_FILES
from tests.integration.sandbox_kube.test_admission import quota
from tests.integration.sandbox_kube.test_cluster_workloads import (
    assert_status_matches_crd,
)
from tests.integration.sandbox_kube.test_operator_retries import rayjob


def _conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        c["type"]: (c["status"], c.get("reason", ""))
        for c in (obj.get("status") or {}).get("conditions") or []
    }


def _warnings(kube: KubeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in kube.objects.list("events") if e["reason"] == reason]


async def test_the_rayjob_creates_a_raycluster_that_owns_the_pods(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create("rayjobs", rayjob("rj", "run"))
    cluster.advance(2)
    rj = kube.objects.get("rayjobs", "rj")
    [rc] = kube.objects.list("rayclusters.ray.io")
    name = rc["metadata"]["name"]
    # utils.GenerateRayClusterName: `<rayjob>-<rand.String(5)>`.
    assert re.fullmatch(r"rj-[a-z0-9]{5}", name) and rj["status"]["rayClusterName"] == name
    [owner] = rc["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RayJob", "rj", True)
    assert rc["metadata"]["labels"]["ray.io/originated-from-crd"] == "RayJob"
    pods = kube.objects.list("pods", label_selector=f"ray.io/cluster={name}")
    assert len(pods) == 2
    for pod in pods:
        assert pod["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"
    [head] = [p for p in pods if p["metadata"]["labels"]["ray.io/node-type"] == "head"]
    assert re.fullmatch(rf"{name}-head-[a-z0-9]{{5}}", head["metadata"]["name"])
    assert rc["status"]["state"] == "ready"
    assert _conditions(rc)["HeadPodReady"][0] == "True"
    assert _conditions(rc)["RayClusterProvisioned"] == ("True", "AllPodRunningAndReadyFirstTime")
    assert "ReplicaFailure" not in _conditions(rc)
    # The RayJob mirrors the RayCluster's status.
    assert rj["status"]["jobDeploymentStatus"] == "Running"
    assert rj["status"]["rayClusterStatus"]["state"] == "ready"
    assert rj["status"]["rayClusterStatus"]["head"]["podName"] == head["metadata"]["name"]
    await assert_status_matches_crd(crds, rc)
    await assert_status_matches_crd(crds, rj)
    assert [e["reason"] for e in _warnings(kube, "CreatedRayCluster")] == ["CreatedRayCluster"]


async def test_a_refused_head_pod_is_the_rayclusters_event_and_condition(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create("resourcequotas", quota("no-pods", pods="0"))
    kube.objects.create("rayjobs", rayjob("rj", "run"))
    cluster.step()  # one attempt: each retry names another pod, so another Event
    [rc] = kube.objects.list("rayclusters.ray.io")
    name = rc["metadata"]["name"]
    [event] = _warnings(kube, "FailedToCreateHeadPod")
    assert (event["type"], event["involvedObject"]["kind"]) == ("Warning", "RayCluster")
    assert event["involvedObject"]["name"] == name
    # createHeadPod names the pod it meant to create, whose name the API server was to
    # generate: still empty.
    assert event["message"].startswith(f'Failed to create head Pod default/, pods "{name}-head-')
    assert "is forbidden: exceeded quota: no-pods" in event["message"]
    assert _warnings(kube, "FailedToCreateWorkerPod") == []  # the head first
    conditions = _conditions(rc)
    assert conditions["ReplicaFailure"] == ("True", "FailedCreateHeadPod")
    assert conditions["HeadPodReady"] == ("False", "HeadPodNotFound")
    assert conditions["RayClusterProvisioned"] == ("False", "RayClusterPodsProvisioning")
    assert "state" not in rc["status"]
    await assert_status_matches_crd(crds, rc)
    rj = kube.objects.get("rayjobs", "rj")
    assert rj["status"]["jobDeploymentStatus"] == "Initializing"
    mirrored = _conditions({"status": rj["status"]["rayClusterStatus"]})
    assert mirrored["ReplicaFailure"] == ("True", "FailedCreateHeadPod")
    await assert_status_matches_crd(crds, rj)
    # Retried after the API back-off (1 s, doubling): attempts at 0, 1, 3, 7 and 15 s.
    cluster.advance(30)
    assert (
        sum(
            int((e.get("series") or {}).get("count") or e.get("count") or 1)
            for e in _warnings(kube, "FailedToCreateHeadPod")
        )
        == 5
    )
    assert kube.objects.list("pods") == []
    # The quota goes: the next retry creates the pods, the condition is cleared, the job runs.
    kube.objects.delete("resourcequotas", "no-pods")
    cluster.advance(65)
    rc = kube.objects.get("rayclusters.ray.io", name)
    assert "ReplicaFailure" not in _conditions(rc) and rc["status"]["state"] == "ready"
    assert kube.objects.get("rayjobs", "rj")["status"]["jobDeploymentStatus"] == "Running"


async def test_a_refused_worker_pod_is_failed_to_create_worker_pod(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("resourcequotas", quota("one-pod", pods="1"))
    kube.objects.create("rayjobs", rayjob("rj", "run"))
    cluster.step()
    [rc] = kube.objects.list("rayclusters.ray.io")
    [event] = _warnings(kube, "FailedToCreateWorkerPod")
    assert event["message"].startswith(
        f"Failed to create worker Pod for the cluster default/{rc['metadata']['name']}, pods "
    )
    assert _conditions(rc)["ReplicaFailure"] == ("True", "FailedCreateWorkerPod")
    assert _conditions(rc)["HeadPodReady"][1] != "HeadPodNotFound"
    assert [
        p["metadata"]["labels"]["ray.io/node-type"]
        for p in kube.objects.list("pods", label_selector="ray.io/is-ray-node=yes")
    ] == ["head"]


async def test_the_raycluster_goes_with_the_rayjob(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("rayjobs", rayjob("rj", "run"))
    cluster.advance(2)
    assert kube.objects.list("rayclusters.ray.io") and kube.objects.list("pods")
    kube.objects.delete("rayjobs", "rj")
    cluster.advance(60)  # the pods' grace period
    assert kube.objects.list("rayclusters.ray.io") == []
    assert kube.objects.list("pods", label_selector="ray.io/is-ray-node=yes") == []


async def test_shutdown_after_job_finishes_deletes_the_cluster_after_its_ttl(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    body = rayjob("rj", "succeed after=2s", shutdownAfterJobFinishes=True)
    body["spec"]["ttlSecondsAfterFinished"] = 30
    kube.objects.create("rayjobs", body)
    cluster.advance(5)
    assert kube.objects.get("rayjobs", "rj")["status"]["jobDeploymentStatus"] == "Complete"
    assert kube.objects.list("rayclusters.ray.io")  # within its TTL
    cluster.advance(30)
    assert kube.objects.list("rayclusters.ray.io") == []
    assert [j["metadata"]["name"] for j in kube.objects.list("jobs")] == ["rj"]  # logs stay
    assert [e["reason"] for e in _warnings(kube, "DeletedRayCluster")] == ["DeletedRayCluster"]


async def test_without_the_raycluster_crd_the_rayjob_says_so(
    kube: KubeApiServer, crds: Path
) -> None:
    for kind, name in CRD_FILES.items():
        if kind != "RayCluster":
            await kube.load_crd_file(crds / name)
    async with SimulatedCluster(kube) as sim:
        kube.objects.create("rayjobs", rayjob("rj", "run"))
        sim.advance(2)
    [event] = _warnings(kube, "FailedToCreateRayCluster")
    assert event["type"] == "Warning"
    assert "the server could not find the requested resource" in event["message"]
    assert kube.objects.get("rayjobs", "rj")["status"]["jobDeploymentStatus"] == "Initializing"
