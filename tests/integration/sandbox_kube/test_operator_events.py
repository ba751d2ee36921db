"""JobSet and Trainer as upstream report trouble: Warning Events and the reason words.

jobset v0.12 jobset_controller.go (JobCreationFailed with the API error's text) and
failure_policy.go (FailedJobs / ReachedMaxRestarts with "(first failed job: NAME)",
restarts, restartsCountTowardsMax, the restart-attempt label); trainer trainjob_controller.go
(TrainJobResourcesCreationFailed) and the JobSet plugin's Status (the JobSet's conditions
copied with their reason words)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from launch_agent.sandbox.cluster import ANNOTATION, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.integration.sandbox_kube.conftest import CRD_FILES
from tests.integration.sandbox_kube.test_cluster_workloads import (
    assert_status_matches_crd,
    jobset,
)


def warnings(kube: KubeApiServer, name: str) -> list[tuple[str, str]]:
    return [
        (e["reason"], e["message"])
        for e in kube.objects.list("events")
        if e["involvedObject"]["name"] == name and e["type"] == "Warning"
    ]


def failed(obj: dict[str, Any]) -> tuple[str, str]:
    cond = next(c for c in obj["status"]["conditions"] if c["type"] == "Failed")
    assert cond["status"] == "True"
    return cond["reason"], cond["message"]


async def test_jobset_child_job_refused_by_the_api_is_a_warning_event(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    body = jobset("js", replicas=1)
    pod_spec = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod_spec["restartPolicy"] = "Always"  # a Job's pods may not restart Always
    kube.objects.create("jobsets", body)
    cluster.advance(30)
    assert kube.objects.list("jobs") == []
    [(reason, message)] = warnings(kube, "js")
    assert reason == "JobCreationFailed"
    assert message.startswith('Job.batch "js-workers-0" is invalid: ')
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Always"' in message
    assert not kube.objects.get("jobsets", "js")["status"].get("terminalState")


async def test_jobset_failure_names_the_first_failed_job(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create("jobsets", jobset("js", annotations={ANNOTATION: "exit code=2 after=3s"}))
    cluster.advance(10)
    js = kube.objects.get("jobsets", "js")
    assert js["status"]["terminalState"] == "Failed"
    reason, message = failed(js)
    assert reason == "FailedJobs"
    assert message.startswith(
        "jobset failed due to one or more job failures (first failed job: js-"
    )
    assert (reason, message) in warnings(kube, "js")
    await assert_status_matches_crd(crds, js)


async def test_jobset_restarts_then_reaches_max_restarts(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    body = jobset("js", replicas=1, annotations={ANNOTATION: "exit code=1 after=2s"})
    body["spec"]["failurePolicy"] = {"maxRestarts": 1}
    kube.objects.create("jobsets", body)
    cluster.advance(5)
    js = kube.objects.get("jobsets", "js")
    assert (js["status"]["restarts"], js["status"]["restartsCountTowardsMax"]) == (1, 1)
    [job] = kube.objects.list("jobs")
    assert job["metadata"]["labels"]["jobset.sigs.k8s.io/restart-attempt"] == "1"
    restart = (
        "RestartJobSetFailurePolicyAction",
        "applying RestartJobSet failure policy action (first failed job: js-workers-0)",
    )
    assert restart in warnings(kube, "js")
    cluster.advance(5)
    js = kube.objects.get("jobsets", "js")
    assert failed(js) == (
        "ReachedMaxRestarts",
        "jobset failed due to reaching max number of restarts (first failed job: js-workers-0)",
    )
    await assert_status_matches_crd(crds, js)


def trainjob(name: str, outcome: str) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "annotations": {ANNOTATION: outcome}},
        "spec": {
            "runtimeRef": {"name": "torch-distributed"},
            "trainer": {"image": "pytorch:2", "numNodes": 2},
        },
    }


async def test_trainjob_copies_the_jobset_reason_words(
    kube: KubeApiServer, cluster: SimulatedCluster, crds: Path
) -> None:
    kube.objects.create("trainjobs", trainjob("tj", "exit code=1 after=2s"))
    cluster.advance(10)
    tj = kube.objects.get("trainjobs", "tj")
    assert failed(tj) == (
        "FailedJobs",
        "jobset failed due to one or more job failures (first failed job: tj-node-0)",
    )
    assert [c["type"] for c in tj["status"]["conditions"]] == ["Failed"]
    await assert_status_matches_crd(crds, tj)


async def test_trainjob_without_the_jobset_crd_is_a_warning_event(
    kube: KubeApiServer, crds: Path
) -> None:
    await kube.load_crd_file(crds / CRD_FILES["TrainJob"])
    async with SimulatedCluster(kube) as sim:
        kube.objects.create("trainjobs", trainjob("tj", "succeed"))
        sim.advance(30)
    assert warnings(kube, "tj") == [
        (
            "TrainJobResourcesCreationFailed",
            'TrainJob resources reconciliation failed: no matches for kind "JobSet" in version'
            ' "jobset.x-k8s.io/v1alpha2"',
        )
    ]
    assert not kube.objects.get("trainjobs", "tj")["status"].get("conditions")
