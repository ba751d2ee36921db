"""The operators' retry and finish rules, as the upstream controllers apply them.

RayJob `spec.backoffLimit` (kuberay rayjob_controller.go checkBackoffLimitAndUpdateStatusIfNeeded),
Volcano's finish rule without policies and its policy actions (volcano state/*.go)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launch_agent.sandbox.cluster import ANNOTATION, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.integration.sandbox_kube.test_cluster_workloads import (
    CONTAINER,
    POD_TEMPLATE,
    assert_status_matches_crd,
)


def rayjob(name: str, outcome: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "annotations": {ANNOTATION: outcome}},
        "spec": {
            "entrypoint": "python train.py",
            "submitterConfig": {"backoffLimit": 0},
            "rayClusterSpec": {
                "headGroupSpec": {"template": POD_TEMPLATE},
                "workerGroupSpecs": [{"groupName": "gpu", "replicas": 1, "template": POD_TEMPLATE}],
            },
            **spec,
        },
    }


async def test_rayjob_retries_a_failed_attempt_then_succeeds(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    seen: list[dict[str, Any]] = []  # every RayJob status written, with the simulated time
    kube.store.listeners.append(
        lambda storage, kind, obj: (
            seen.append({**(obj.get("status") or {}), "at": cluster.clock.seconds()})
            if obj.get("kind") == "RayJob"
            else None
        )
    )
    kube.objects.create("rayjobs", rayjob("rj", "fail after=2s; succeed after=2s", backoffLimit=2))
    cluster.advance(2)
    first = kube.objects.get("rayjobs", "rj")["status"]
    assert first["jobDeploymentStatus"] == "Running"
    # The first submitter fails: one failed attempt, then (once the old cluster's pods are
    # gone, which takes their grace period where deletion is graceful) a new cluster.
    for _ in range(20):
        cluster.advance(5)
        rj = kube.objects.get("rayjobs", "rj")
        if rj["status"].get("rayClusterName") not in (None, first["rayClusterName"]):
            break
    assert rj["status"]["failed"] == 1
    assert rj["status"]["rayClusterName"] != first["rayClusterName"]
    assert rj["status"]["jobId"] != first["jobId"]
    # The failed attempt was written as Upstream writes it: Retrying with jobStatus FAILED,
    # then New (jobDeploymentStatus omitted), then a new Initializing.
    retrying = [s for s in seen if s.get("jobDeploymentStatus") == "Retrying"]
    assert retrying and retrying[0]["jobStatus"] == "FAILED" and retrying[0]["failed"] == 1
    renewed = [s for s in seen if "jobDeploymentStatus" not in s and s.get("failed") == 1]
    assert renewed
    # Retrying lasts until the operator's requeue finds the old cluster gone (3 s).
    assert renewed[0]["at"] - retrying[0]["at"] >= 3
    for _ in range(10):
        cluster.advance(5)
    rj = kube.objects.get("rayjobs", "rj")
    assert (rj["status"]["jobDeploymentStatus"], rj["status"]["jobStatus"]) == (
        "Complete",
        "SUCCEEDED",
    )
    assert (rj["status"]["failed"], rj["status"]["succeeded"]) == (1, 1)
    await assert_status_matches_crd(crds, rj)
    events = kube.objects.list("events")
    # Two submitters (KubeRay's events.k8s.io recorder folds them into a series of 2).
    created = [e for e in events if e["reason"] == "CreatedRayJobSubmitter"]
    assert (
        sum(int((e.get("series") or {}).get("count") or e.get("count") or 1) for e in created) == 2
    )
    assert any(e["reason"] == "DeletedRayCluster" for e in events)


async def test_rayjob_exhausting_its_retries_fails_with_app_failed(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create("rayjobs", rayjob("rj", "exit code=3 after=2s", backoffLimit=1))
    for _ in range(4):
        cluster.advance(5)
    status = kube.objects.get("rayjobs", "rj")["status"]
    assert status["jobDeploymentStatus"] == "Failed" and status["reason"] == "AppFailed"
    assert status["failed"] == 2 and status["jobStatus"] == "FAILED"
    assert "Job entrypoint command failed with exit code 3" in status["message"]
    await assert_status_matches_crd(crds, kube.objects.get("rayjobs", "rj"))


async def test_rayjob_deadline_is_not_retried(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create(
        "rayjobs", rayjob("rj", "succeed after=1h", backoffLimit=3, activeDeadlineSeconds=30)
    )
    cluster.advance(40)
    status = kube.objects.get("rayjobs", "rj")["status"]
    assert (status["jobDeploymentStatus"], status["reason"], status["failed"]) == (
        "Failed",
        "DeadlineExceeded",
        1,
    )
    assert status["message"].startswith("The RayJob has passed the activeDeadlineSeconds.")
    assert status["message"].endswith("ActiveDeadlineSeconds: 30")


async def test_rayjob_submission_failure_is_submission_failed(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("rayjobs", rayjob("rj", "evicted after=1s"))
    cluster.advance(10)
    status = kube.objects.get("rayjobs", "rj")["status"]
    assert (status["jobDeploymentStatus"], status["reason"]) == ("Failed", "SubmissionFailed")
    assert status["message"].startswith("Job submission has failed. Reason: BackoffLimitExceeded.")


async def test_rayjob_autoscaler_sidecar_on_the_head(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    body = rayjob("rj", "run")
    body["spec"]["rayClusterSpec"]["enableInTreeAutoscaling"] = True
    kube.objects.create("rayjobs", body)
    cluster.step()
    [head] = kube.objects.list("pods", label_selector="ray.io/node-type=head")
    assert [c["name"] for c in head["spec"]["containers"]] == ["main", "autoscaler"]


def volcano(name: str, replicas: int = 3, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "minAvailable": replicas,
            "schedulerName": "volcano",
            "queue": "default",
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}},
                }
            ],
            **spec,
        },
    }


def _phase(kube: KubeApiServer, name: str) -> str:
    return str(kube.objects.get("jobs.batch.volcano.sh", name)["status"]["state"]["phase"])


async def test_volcano_without_policies_waits_for_every_pod(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create("jobs.batch.volcano.sh", volcano("vj"))
    cluster.script("volcano.sh/task-spec=worker", "fail after=2s; succeed after=20s")
    cluster.advance(5)  # pod 0 failed, pods 1 and 2 still run
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert (vj["status"]["state"]["phase"], vj["status"]["failed"]) == ("Running", 1)
    cluster.advance(30)  # all done: 2 succeeded < minAvailable 3
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert vj["status"]["state"]["phase"] == "Failed"
    assert (vj["status"]["succeeded"], vj["status"]["failed"]) == (2, 1)
    await assert_status_matches_crd(crds, vj)


async def test_volcano_without_policies_completes_with_min_available_successes(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("jobs.batch.volcano.sh", volcano("vj", minAvailable=2))
    cluster.script("volcano.sh/task-spec=worker", "fail after=2s; succeed after=5s")
    cluster.advance(10)
    assert _phase(kube, "vj") == "Completed"


async def test_volcano_abort_policy_on_pod_failure(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create(
        "jobs.batch.volcano.sh",
        volcano("vj", policies=[{"event": "PodFailed", "action": "AbortJob"}]),
    )
    cluster.script("volcano.sh/task-spec=worker", "fail after=2s; run")
    cluster.advance(5)
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert vj["status"]["state"]["phase"] == "Aborted"
    assert [c["status"] for c in vj["status"]["conditions"]] == [
        "Pending",
        "Running",
        "Aborting",
        "Aborted",
    ]
    assert [p["metadata"]["name"] for p in kube.objects.list("pods")] == ["vj-worker-0"]


async def test_volcano_restart_policy_until_max_retry(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create(
        "jobs.batch.volcano.sh",
        volcano("vj", replicas=1, maxRetry=2, policies=[{"event": "PodFailed", "action": "RestartJob"}]),
    )  # fmt: skip
    cluster.script("volcano.sh/task-spec=worker", "fail after=2s")
    cluster.advance(4)
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert vj["status"]["retryCount"] == 1 and vj["status"]["version"] == 1
    assert vj["status"]["state"]["phase"] in ("Pending", "Running")
    [pod] = kube.objects.list("pods")
    assert pod["metadata"]["labels"]["volcano.sh/job-version"] == "1"
    cluster.advance(10)
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert (vj["status"]["state"]["phase"], vj["status"]["retryCount"]) == ("Failed", 2)
    assert "Restarting" in [c["status"] for c in vj["status"]["conditions"]]


async def test_volcano_restart_then_success(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    kube.objects.create(
        "jobs.batch.volcano.sh",
        volcano("vj", replicas=1, policies=[{"exitCode": 3, "action": "RestartJob"}]),
    )
    cluster.script("volcano.sh/task-spec=worker", "exit code=3 after=2s; succeed after=2s")
    cluster.advance(10)
    vj = kube.objects.get("jobs.batch.volcano.sh", "vj")
    assert (vj["status"]["state"]["phase"], vj["status"]["retryCount"]) == ("Completed", 1)
