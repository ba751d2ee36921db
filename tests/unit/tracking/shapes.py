"""Real-shaped API objects for the tracking tables.

Field names, nesting and values follow what the API server and each controller write (kubelet
pod status, the Job controller's conditions, the CRD status schemas in tests/fixtures/crds); only the
parts tracking reads are filled in.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


def ts(ago: timedelta = timedelta(0)) -> str:
    return (NOW - ago).strftime("%Y-%m-%dT%H:%M:%SZ")


def cond(ctype: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": None,
        "lastTransitionTime": ts(timedelta(seconds=30)),
    }


def job(
    *conditions: dict[str, Any],
    suspend: bool = False,
    active: int = 0,
    ready: int = 0,
    **status: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "run-abc",
            "namespace": "ml",
            "uid": "1b7c",
            "resourceVersion": "42",
            "creationTimestamp": ts(timedelta(minutes=1)),
            "labels": {"launch-agent.io/run-queue-item": "abc"},
        },
        "spec": {"suspend": suspend, "backoffLimit": 0, "completions": 1, "parallelism": 1},
        "status": {"startTime": ts(timedelta(minutes=1)), **status},
    }
    if active:
        body["status"]["active"] = active
    if ready:
        body["status"]["ready"] = ready
    if conditions:
        body["status"]["conditions"] = list(conditions)
    return body


def container_status(
    name: str = "main",
    image: str = "ghcr.io/acme/train:1.2",
    *,
    waiting: tuple[str, str] | None = None,
    terminated: tuple[str, int] | None = None,
    last_terminated: tuple[str, int] | None = None,
    running: bool = False,
) -> dict[str, Any]:
    state: dict[str, Any] = {}
    if waiting is not None:
        state["waiting"] = {"reason": waiting[0], "message": waiting[1]}
    elif terminated is not None:
        state["terminated"] = {
            "reason": terminated[0],
            "exitCode": terminated[1],
            "startedAt": ts(timedelta(seconds=50)),
            "finishedAt": ts(timedelta(seconds=10)),
            "containerID": "containerd://abc",
        }
    elif running:
        state["running"] = {"startedAt": ts(timedelta(seconds=50))}
    last: dict[str, Any] = {}
    if last_terminated is not None:
        last["terminated"] = {"reason": last_terminated[0], "exitCode": last_terminated[1]}
    return {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": running,
        "restartCount": 1 if last_terminated else 0,
        "started": running,
        "state": state,
        "lastState": last,
    }


def pod(
    name: str = "run-abc-x7k2p",
    phase: str = "Pending",
    *containers: dict[str, Any],
    conditions: list[dict[str, Any]] | None = None,
    reason: str | None = None,
    message: str | None = None,
    created: timedelta = timedelta(minutes=1),
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "qosClass": "Burstable"}
    if conditions is not None:
        status["conditions"] = conditions
    if containers:
        status["containerStatuses"] = list(containers)
    if reason:
        status["reason"] = reason
    if message:
        status["message"] = message
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "creationTimestamp": ts(created),
            "labels": {"job-name": "run-abc", "batch.kubernetes.io/job-name": "run-abc"},
        },
        "spec": {"containers": [{"name": "main", "image": "ghcr.io/acme/train:1.2"}]},
        "status": status,
    }


UNSCHEDULABLE_MSG = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are"
    " available: 3 No preemption victims found for incoming pod."
)


def unschedulable_pod(waited: timedelta) -> dict[str, Any]:
    return pod(
        "run-abc-x7k2p",
        "Pending",
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": UNSCHEDULABLE_MSG,
                "lastProbeTime": None,
                "lastTransitionTime": ts(waited),
            }
        ],
        created=waited,
    )


def custom(api_version: str, kind: str, status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"name": "run-abc", "namespace": "ml", "resourceVersion": "7"},
        "spec": spec,
        "status": status,
    }
