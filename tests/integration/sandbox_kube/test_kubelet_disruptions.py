"""Disruptions and kubelet admission refusals, in the words of the components that write them.

Each outcome plays what a real cluster shows: the DisruptionTarget condition's reason and
message (the Eviction API, the taint manager, the pod GC, graceful node shutdown), how the pod
ends (SIGTERM 143, the pod GC's force delete), and the kubelet's `Pod was rejected: ...`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer


@pytest.fixture
async def cluster(kube: KubeApiServer) -> AsyncIterator[SimulatedCluster]:
    async with SimulatedCluster(kube) as sim:
        yield sim


def pod_body(name: str, outcome: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {"sandbox.launch-agent.io/outcome": outcome}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox:1.36",
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                }
            ],
        },
    }


def disruption(pod: dict[str, Any]) -> tuple[str, str]:
    [cond] = [c for c in pod["status"]["conditions"] if c["type"] == "DisruptionTarget"]
    assert cond["status"] == "True"
    return cond["reason"], cond["message"]


async def test_drain_evicts_through_the_eviction_api_and_the_pod_ends_143(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("pods", pod_body("p", "drained after=10s"))
    cluster.step()
    cluster.advance(11.5)
    pod = kube.objects.get("pods", "p")
    assert disruption(pod) == ("EvictionByEvictionAPI", "Eviction API: evicting")
    assert pod["metadata"]["deletionTimestamp"], "deleted gracefully, still terminating"
    cluster.advance(1)
    assert kube.objects.find("pods", "p") is None
    events = {e["reason"] for e in kube.objects.list("events", "default")}
    assert "Killing" in events


async def test_lost_node_taint_manager_then_pod_gc(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("pods", pod_body("p", "nodelost after=10s"))
    cluster.step()
    cluster.advance(12)
    pod = kube.objects.get("pods", "p")
    assert disruption(pod) == (
        "DeletionByTaintManager",
        "Taint manager: deleting due to NoExecute taint",
    )
    assert pod["status"]["phase"] == "Running", "no kubelet answers for it any more"
    cluster.advance(30)
    assert kube.objects.find("pods", "p") is None


async def test_pod_gc_marks_failed_and_deletes(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    seen: list[dict[str, Any]] = []

    def record(storage: str, _type: str, obj: dict[str, Any]) -> None:
        if storage == "pods":
            seen.append(obj)

    kube.store.listeners.append(record)
    kube.objects.create("pods", pod_body("p", "podgc after=5s"))
    cluster.step()
    cluster.advance(7)
    assert kube.objects.find("pods", "p") is None
    last = [o for o in seen if (o.get("status") or {}).get("phase") == "Failed"][-1]
    assert disruption(last) == ("DeletionByPodGC", "PodGC: node no longer exists")


async def test_graceful_node_shutdown(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    kube.objects.create("pods", pod_body("p", "nodeshutdown after=5s"))
    cluster.step()
    cluster.advance(7)
    pod = kube.objects.get("pods", "p")
    assert pod["status"]["phase"] == "Failed"
    assert pod["status"]["reason"] == "Terminated"
    assert pod["status"]["message"] == "Pod was terminated in response to imminent node shutdown."
    assert disruption(pod)[0] == "TerminationByKubelet"
    [status] = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 143


@pytest.mark.parametrize(
    ("outcome", "reason", "message"),
    [
        (
            "outofresource",
            "OutOfnvidia.com/gpu",
            "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu, requested: 8,"
            " used: 0, capacity: 0",
        ),
        (
            "admissionerror",
            "UnexpectedAdmissionError",
            "Pod was rejected: Allocate failed due to requested number of devices unavailable"
            " for nvidia.com/gpu. Requested: 1, Available: 0, which is unexpected",
        ),
    ],
)
async def test_kubelet_admission_refusal(
    kube: KubeApiServer, cluster: SimulatedCluster, outcome: str, reason: str, message: str
) -> None:
    kube.objects.create("pods", pod_body("p", outcome))
    cluster.step()
    pod = kube.objects.get("pods", "p")
    assert pod["status"]["phase"] == "Failed"
    assert (pod["status"]["reason"], pod["status"]["message"]) == (reason, message)
    assert "containerStatuses" not in pod["status"]
    [event] = [e for e in kube.objects.list("events", "default") if e["reason"] == reason]
    assert event["type"] == "Warning"


def waiting(pod: dict[str, Any]) -> str | None:
    [status] = pod["status"].get("containerStatuses") or [{}]
    reason = ((status.get("state") or {}).get("waiting") or {}).get("reason")
    return str(reason) if reason else None


async def test_image_pull_alternates_between_err_image_pull_and_back_off(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("pods", pod_body("p", "imagepullbackoff after=1s"))
    cluster.step()
    seen = []
    for _ in range(40):
        cluster.advance(1)
        seen.append(waiting(kube.objects.get("pods", "p")))
    # Pull at 1 s (fails), back-off 10 s, pull again at 11 s, back-off 20 s, pull at 31 s.
    assert seen[0] == "ErrImagePull"
    assert seen[5] == "ImagePullBackOff"
    assert seen[10] == "ErrImagePull"
    assert seen[20] == "ImagePullBackOff"
    assert seen[30] == "ErrImagePull"
    failed = [
        e
        for e in kube.objects.list("events", "default")
        if e["message"].startswith('Failed to pull image "busybox:1.36": ')
    ]
    assert failed and failed[0]["count"] == 3, failed


async def test_transient_pull_error_recovers(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("pods", pod_body("p", "pullerror pulls=2 after=5s"))
    cluster.step()
    cluster.advance(2)
    pod = kube.objects.get("pods", "p")
    [status] = pod["status"]["containerStatuses"]
    assert status["state"]["waiting"]["reason"] in ("ErrImagePull", "ImagePullBackOff")
    cluster.advance(60)
    assert kube.objects.get("pods", "p")["status"]["phase"] == "Succeeded"
    messages = [e["message"] for e in kube.objects.list("events", "default")]
    assert any("429 Too Many Requests" in m for m in messages), messages


async def test_create_container_config_error_clears_when_the_secret_syncs(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    body = pod_body("p", "succeed after=5s")
    body["spec"]["containers"][0]["env"] = [
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "token"}}}
    ]
    kube.objects.create("pods", body)
    cluster.step()
    cluster.advance(2)
    [status] = kube.objects.get("pods", "p")["status"]["containerStatuses"]
    assert status["state"]["waiting"] == {
        "reason": "CreateContainerConfigError",
        "message": 'secret "wandb" not found',
    }
    kube.objects.create("secrets", {"metadata": {"name": "wandb"}, "data": {"other": "eA=="}})
    cluster.advance(20)
    [status] = kube.objects.get("pods", "p")["status"]["containerStatuses"]
    assert (
        status["state"]["waiting"]["message"] == "couldn't find key token in Secret default/wandb"
    )
    kube.objects.replace(
        "secrets", "wandb", {"metadata": {"name": "wandb"}, "data": {"token": "eA=="}}
    )
    cluster.advance(60)
    assert kube.objects.get("pods", "p")["status"]["phase"] == "Succeeded"
