"""JobSet's startupPolicy InOrder and dependsOn, as kubernetes-sigs/jobset applies them
(`pkg/controllers/jobset_controller.go` `reconcileReplicatedJobs`, `startup_policy.go`,
`depends_on.go`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.integration.sandbox_kube.test_cluster_workloads import (
    CONTAINER,
    assert_status_matches_crd,
)

RJ_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"


def replicated(name: str, replicas: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": 1,
                "completions": 1,
                "backoffLimit": 0,
                "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER]}},
            }
        },
        **extra,
    }


def jobset(*rjs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": list(rjs), **spec},
    }


IN_ORDER = {"startupPolicy": {"startupPolicyOrder": "InOrder"}}


def _jobs(kube: KubeApiServer) -> list[str]:
    return sorted(j["metadata"]["name"] for j in kube.objects.list("jobs"))


def _conditions(kube: KubeApiServer) -> dict[str, tuple[str, str]]:
    js = kube.objects.get("jobsets", "js")
    return {
        c["type"]: (c["status"], c["reason"])
        for c in (js.get("status") or {}).get("conditions") or []
    }


async def test_in_order_creates_each_replicated_job_once_the_previous_is_ready(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    cluster.script(f"{RJ_LABEL}=driver", "run start=10s")
    cluster.script(f"{RJ_LABEL}=workers", "run")
    kube.objects.create(
        "jobsets", jobset(replicated("driver"), replicated("workers", 2), **IN_ORDER)
    )
    cluster.step()
    assert _jobs(kube) == ["js-driver-0"]
    assert _conditions(kube)["StartupPolicyInProgress"] == (
        "True",
        "InOrderStartupPolicyInProgress",
    )
    cluster.advance(5)  # the driver's container has not started yet: still waiting
    assert _jobs(kube) == ["js-driver-0"]
    cluster.advance(10)
    assert _jobs(kube) == ["js-driver-0", "js-workers-0", "js-workers-1"]
    cluster.advance(5)
    conditions = _conditions(kube)
    assert conditions["StartupPolicyCompleted"] == ("True", "InOrderStartupPolicyCompleted")
    assert conditions["StartupPolicyInProgress"][0] == "False"  # exclusive
    await assert_status_matches_crd(crds, kube.objects.get("jobsets", "js"))
    reasons = [e["reason"] for e in kube.objects.list("events") if e["type"] == "Normal"]
    assert (
        "InOrderStartupPolicyInProgress" in reasons and "InOrderStartupPolicyCompleted" in reasons
    )


async def test_depends_on_complete_waits_for_every_job_of_the_dependency_to_succeed(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    cluster.script(f"{RJ_LABEL}=initializer", "succeed after=20s")
    cluster.script(f"{RJ_LABEL}=trainer", "run")
    depends = [{"name": "initializer", "status": "Complete"}]
    kube.objects.create(
        "jobsets", jobset(replicated("initializer"), replicated("trainer", dependsOn=depends))
    )
    cluster.advance(10)  # the initializer runs (ready), but is not complete
    assert _jobs(kube) == ["js-initializer-0"]
    status = kube.objects.get("jobsets", "js")["status"]
    assert [r["name"] for r in status["replicatedJobsStatus"]] == ["initializer", "trainer"]
    assert status["replicatedJobsStatus"][1]["active"] == 0
    cluster.advance(15)
    assert _jobs(kube) == ["js-initializer-0", "js-trainer-0"]
    assert "StartupPolicyInProgress" not in _conditions(kube)  # dependsOn has no condition


async def test_depends_on_ready_waits_for_the_dependency_to_be_ready(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    cluster.script(f"{RJ_LABEL}=leader", "run start=10s")
    cluster.script(f"{RJ_LABEL}=workers", "run")
    depends = [{"name": "leader", "status": "Ready"}]
    kube.objects.create(
        "jobsets", jobset(replicated("leader"), replicated("workers", 2, dependsOn=depends))
    )
    cluster.advance(5)
    assert _jobs(kube) == ["js-leader-0"]
    cluster.advance(10)
    assert _jobs(kube) == ["js-leader-0", "js-workers-0", "js-workers-1"]
