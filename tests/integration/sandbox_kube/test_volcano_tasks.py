"""Volcano's task-level minAvailable, as volcano-sh/volcano applies it.

`pkg/controllers/job/state/running.go` (`runningState.Execute`): once every pod finished, a
task with fewer succeeded pods than its own `minAvailable` fails the job when the job's
`minAvailable` is at least the tasks' sum; the webhook (`mutate_job.go`, `mutateSpec`,
`patchDefaultMinAvailable`) defaults both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.integration.sandbox_kube.test_cluster_workloads import (
    CONTAINER,
    assert_status_matches_crd,
)


def task(name: str, replicas: int, min_available: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "replicas": replicas,
        "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}},
    }
    if min_available is not None:
        body["minAvailable"] = min_available
    return body


def master_workers(min_available: int | None, worker_min: int | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "volcano",
        "queue": "default",
        "tasks": [task("master", 1), task("worker", 3, worker_min)],
    }
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vj"},
        "spec": spec,
    }


def _status(kube: KubeApiServer) -> dict[str, Any]:
    status: dict[str, Any] = kube.objects.get("jobs.batch.volcano.sh", "vj")["status"]
    return status


async def test_a_short_task_fails_the_job_though_the_job_count_is_met(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create("jobs.batch.volcano.sh", master_workers(2, 1))
    cluster.script("volcano.sh/task-spec=master", "exit code=1 after=2s")
    cluster.script("volcano.sh/task-spec=worker", "succeed after=5s")
    cluster.advance(3)
    assert _status(kube)["state"]["phase"] == "Running"  # the workers still run
    cluster.advance(10)
    status = _status(kube)
    # 3 succeeded >= minAvailable 2, but master: 0 succeeded < its minAvailable 1.
    assert (status["succeeded"], status["failed"]) == (3, 1)
    assert status["state"]["phase"] == "Failed"
    assert status["taskStatusCount"]["master"]["phase"] == {"Failed": 1}
    await assert_status_matches_crd(crds, kube.objects.get("jobs.batch.volcano.sh", "vj"))


async def test_a_failure_within_a_tasks_min_available_completes(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    # No job minAvailable: the webhook's default is master 1 + worker 1 = 2 (not 4 replicas).
    kube.objects.create("jobs.batch.volcano.sh", master_workers(None, 1))
    # Attempts count over the job's pods in creation order: master-0, then worker-0 fails.
    cluster.script("volcano.sh/job-name=vj", "succeed after=5s; fail after=2s; succeed after=5s")
    cluster.advance(10)
    status = _status(kube)
    assert (status["succeeded"], status["failed"], status["minAvailable"]) == (3, 1, 2)
    assert status["state"]["phase"] == "Completed"


async def test_a_job_min_below_the_tasks_sum_skips_the_task_check(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    # minAvailable 2 < master 1 + worker 3 (defaulted to replicas): only the job count counts.
    kube.objects.create("jobs.batch.volcano.sh", master_workers(2, None))
    cluster.script("volcano.sh/task-spec=master", "exit code=1 after=2s")
    cluster.script("volcano.sh/task-spec=worker", "succeed after=5s")
    cluster.advance(10)
    assert _status(kube)["state"]["phase"] == "Completed"


async def test_the_job_is_running_once_its_default_min_is_reached(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    # Gang of master 1 + worker 1: Running with two pods running, the others still pending.
    kube.objects.create("jobs.batch.volcano.sh", master_workers(None, 1))
    cluster.script("volcano.sh/task-spec=worker", "run")
    cluster.script("volcano.sh/task-spec=master", "run")
    cluster.advance(3)
    status = _status(kube)
    assert (status["minAvailable"], status["state"]["phase"]) == (2, "Running")
