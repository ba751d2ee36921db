"""Restarts as the training operator and LeaderWorkerSet do them.

training-operator v1.9 common/pod.go ReconcilePods (ExitCode: 128+ retryable), common/job.go
(runPolicy.backoffLimit), pytorchjob_controller.go UpdateJobStatus (Restarting, Failed words);
lws pod_controller.go handleRestartPolicy (RecreateGroupOnPodRestart) and updateConditions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launch_agent.sandbox.cluster import ANNOTATION, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.integration.sandbox_kube.test_cluster_workloads import (
    assert_status_matches_crd,
)


def pytorchjob(outcome: str, policy: str = "ExitCode", **run_policy: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "pytorch", "image": "pytorch:2"}]}}
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pj", "annotations": {ANNOTATION: outcome}},
        "spec": {
            "runPolicy": run_policy,
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": policy, "template": template}
            },
        },
    }


def conds(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c["reason"], c["message"]) for c in obj["status"]["conditions"]
    }


def warning_reasons(kube: KubeApiServer) -> list[str]:
    return [e["reason"] for e in kube.objects.list("events") if e["type"] == "Warning"]


async def test_pytorchjob_retryable_exit_code_restarts_the_replica(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    seen: list[dict[str, tuple[str, str, str]]] = []
    kube.store.listeners.append(
        lambda storage, kind, obj: (
            seen.append(conds(obj))
            if obj.get("kind") == "PyTorchJob" and (obj.get("status") or {}).get("conditions")
            else None
        )
    )
    kube.objects.create("pytorchjobs", pytorchjob("exit code=137 after=2s; succeed after=5s"))
    cluster.advance(4)
    restarting = [c["Restarting"] for c in seen if "Restarting" in c]
    assert restarting[-1] == (
        "True",
        "PyTorchJobRestarting",
        "PyTorchJob pj is restarting because 1 Master replica(s) failed.",
    )
    assert not any("Running" in c and "Restarting" in c for c in seen)  # exclusive
    assert "PyTorchJobRestarting" in warning_reasons(kube)
    assert len(kube.objects.list("pods")) == 1  # the replica was recreated
    cluster.advance(10)
    pj = kube.objects.get("pytorchjobs", "pj")
    assert conds(pj)["Succeeded"][:2] == ("True", "PyTorchJobSucceeded")
    await assert_status_matches_crd(crds, pj)


async def test_pytorchjob_non_retryable_exit_code_fails(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("pytorchjobs", pytorchjob("exit code=2 after=2s"))
    cluster.advance(5)
    pj = kube.objects.get("pytorchjobs", "pj")
    assert conds(pj)["Failed"] == (
        "True",
        "PyTorchJobFailed",
        'job "pj" is failing because "Master" replica(s) failed.',
    )


async def test_pytorchjob_backoff_limit(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    kube.objects.create("pytorchjobs", pytorchjob("exit code=143 after=2s", backoffLimit=1))
    for _ in range(4):
        cluster.advance(3)
    pj = kube.objects.get("pytorchjobs", "pj")
    assert conds(pj)["Failed"] == (
        "True",
        "PyTorchJobFailed",
        "Job pj has failed because it has reached the specified backoff limit",
    )
    assert warning_reasons(kube).count("PyTorchJobRestarting") >= 1


async def test_pytorchjob_never_fails_with_the_v1_words(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("pytorchjobs", pytorchjob("exit code=1 after=2s", policy="Never"))
    cluster.advance(5)
    assert conds(kube.objects.get("pytorchjobs", "pj"))["Failed"][2] == (
        "PyTorchJob pj is failed because 1 Master replica(s) failed."
    )


async def test_leaderworkerset_recreates_the_group_of_a_restarted_pod(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    template = {"spec": {"containers": [{"name": "main", "image": "vllm:1"}]}}
    kube.objects.create(
        "leaderworkersets",
        {
            "apiVersion": "leaderworkerset.x-k8s.io/v1",
            "kind": "LeaderWorkerSet",
            "metadata": {"name": "lws"},
            "spec": {
                "replicas": 1,
                "leaderWorkerTemplate": {"size": 2, "workerTemplate": template},
            },
        },
    )
    # The leader serves; the worker crashes once (its container restarts), then serves.
    cluster.script("leaderworkerset.sigs.k8s.io/name=lws", "run; fail after=3s; run")
    cluster.advance(2)
    before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.objects.list("pods")}
    cluster.advance(8)
    after = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.objects.list("pods")}
    assert sorted(after) == ["lws-0", "lws-0-1"]
    assert all(before[n] != after[n] for n in after)  # the whole group, leader included
    events = [(e["reason"], e["message"]) for e in kube.objects.list("events")]
    assert (
        "RecreateGroup",
        "Worker pod lws-0-1 failed, deleted leader pod lws-0 to recreate group 0",
    ) in events
    lws = kube.objects.get("leaderworkersets", "lws")
    assert {c["type"]: c["status"] for c in lws["status"]["conditions"]}["Available"] == "True"
    await assert_status_matches_crd(crds, lws)
