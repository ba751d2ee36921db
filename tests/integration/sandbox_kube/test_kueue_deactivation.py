"""Kueue's deactivation (spec.active: false) and its newer pending reasons, as upstream writes them.

workload_controller.go Reconcile (an inactive Workload is evicted, reason Deactivated or
DeactivatedDueTo<cause>), jobframework/reconciler.go (the job is stopped, Requeued=False: it
stays suspended for good), reconcileMaxExecutionTime, and the UnadmittedWorkloadsObservability
reasons of Kueue 0.20 (Misconfigured, WaitingForQuota, ExceedsMaxQuota)."""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio import client

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.kueue import KueueController
from launch_agent.sandbox.kube import KubeApiServer

from .test_kueue_sim import (
    assert_status_matches_crd,
    cluster,  # noqa: F401  (the fixture)
    conditions,
    queued_job,
    setup_queues,
    workload_of,
)


def _events(kube: KubeApiServer, name: str) -> list[tuple[str, str, str]]:
    return [
        (e["type"], e["reason"], e["message"])
        for e in kube.objects.list("events", namespace="default")
        if e["involvedObject"]["name"] == name
    ]


async def test_an_admin_deactivation_evicts_and_the_job_stays_suspended(
    kube: KubeApiServer,
    cluster: SimulatedCluster,  # noqa: F811
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
    crds: Path,
) -> None:
    await setup_queues(custom, cpu="4")
    job = await batch.create_namespaced_job("default", queued_job("d", "1"))  # type: ignore[arg-type]
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    assert conditions(wl)["Admitted"][0] == "True"
    name = wl["metadata"]["name"]
    # What `kubectl patch workload NAME --type=merge -p '{"spec":{"active":false}}'` does.
    kube.objects.patch(
        "workloads.kueue.x-k8s.io", name, {"spec": {"active": False}}, namespace="default"
    )
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    conds = conditions(wl)
    assert conds["Evicted"] == ("True", "Deactivated", "The workload is deactivated")
    assert conds["Requeued"] == ("False", "Deactivated", "The workload is deactivated")
    assert conds["QuotaReserved"][:2] == ("False", "Pending")
    assert conds["Admitted"][0] == "False"
    assert "admission" not in wl["status"]
    assert (await batch.read_namespaced_job("d", "default")).spec.suspend is True
    assert ("Normal", "EvictedDueToDeactivated", "The workload is deactivated") in _events(
        kube, name
    )
    assert ("Normal", "Stopped", "The workload is deactivated") in _events(kube, "d")
    await assert_status_matches_crd(crds, wl)
    cluster.advance(600)  # quota is free, but an inactive Workload is never admitted again
    assert conditions(await workload_of(custom, job.metadata.uid))["Evicted"][0] == "True"
    assert (await batch.read_namespaced_job("d", "default")).spec.suspend is True


async def test_the_requeuing_limit_deactivates_with_its_cause(
    kube: KubeApiServer,
    cluster: SimulatedCluster,  # noqa: F811
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
) -> None:
    await setup_queues(custom, cpu="4")
    job = await batch.create_namespaced_job("default", queued_job("r", "1"))  # type: ignore[arg-type]
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    KueueController.deactivate(
        Ctx(cluster.store, cluster.clock),
        wl,
        "RequeuingLimitExceeded",
        "exceeding the maximum number of re-queuing retries",
    )
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    assert wl["spec"]["active"] is False
    message = (
        "The workload is deactivated due to exceeding the maximum number of re-queuing retries"
    )
    conds = conditions(wl)
    assert conds["Evicted"] == ("True", "DeactivatedDueToRequeuingLimitExceeded", message)
    assert conds["Requeued"] == ("False", "DeactivatedDueToRequeuingLimitExceeded", message)
    assert "DeactivationTarget" not in conds
    events = _events(kube, wl["metadata"]["name"])
    assert ("Normal", "EvictedDueToDeactivatedDueToRequeuingLimitExceeded", message) in events


async def test_the_maximum_execution_time_deactivates(
    kube: KubeApiServer,
    cluster: SimulatedCluster,  # noqa: F811
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
) -> None:
    await setup_queues(custom, cpu="4")
    body = queued_job("m", "1")
    body["metadata"]["labels"]["kueue.x-k8s.io/max-exec-time-seconds"] = "60"
    body["metadata"]["annotations"] = {"sandbox.launch-agent.io/outcome": "succeed after=1h"}
    job = await batch.create_namespaced_job("default", body)  # type: ignore[arg-type]
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    assert wl["spec"]["maximumExecutionTimeSeconds"] == 60
    cluster.advance(30)
    assert "Evicted" not in conditions(await workload_of(custom, job.metadata.uid))
    cluster.advance(40)
    wl = await workload_of(custom, job.metadata.uid)
    assert conditions(wl)["Evicted"][:2] == (
        "True",
        "DeactivatedDueToMaximumExecutionTimeExceeded",
    )
    assert (
        "Warning",
        "MaximumExecutionTimeExceeded",
        "The maximum execution time (60s) exceeded",
    ) in _events(kube, wl["metadata"]["name"])
    assert (await batch.read_namespaced_job("m", "default")).spec.suspend is True


async def test_kueue_0_20_reasons_are_granular(
    kube: KubeApiServer,
    cluster: SimulatedCluster,  # noqa: F811
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
) -> None:
    cluster.kueue.version = "0.20"
    await setup_queues(custom, cpu="4")
    missing = await batch.create_namespaced_job("default", queued_job("x", "1", queue="nope"))  # type: ignore[arg-type]
    first = await batch.create_namespaced_job("default", queued_job("a", "3"))  # type: ignore[arg-type]
    waiting = await batch.create_namespaced_job("default", queued_job("b", "3"))  # type: ignore[arg-type]
    huge = await batch.create_namespaced_job("default", queued_job("c", "8"))  # type: ignore[arg-type]
    cluster.step()
    assert conditions(await workload_of(custom, missing.metadata.uid))["QuotaReserved"] == (
        "False",
        "Misconfigured",
        "LocalQueue nope doesn't exist",
    )
    assert conditions(await workload_of(custom, first.metadata.uid))["Admitted"][0] == "True"
    wl = await workload_of(custom, waiting.metadata.uid)
    message = (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor"
        " default-flavor, 2 more needed"
    )
    assert conditions(wl)["QuotaReserved"] == ("False", "WaitingForQuota", message)
    assert ("Warning", "WaitingForQuota", message) in _events(kube, wl["metadata"]["name"])
    assert conditions(await workload_of(custom, huge.metadata.uid))["QuotaReserved"][1] == (
        "ExceedsMaxQuota"
    )
    # An inactive, never admitted Workload: Deactivated in QuotaReserved (0.20).
    name = wl["metadata"]["name"]
    # What `kubectl patch workload NAME --type=merge -p '{"spec":{"active":false}}'` does.
    kube.objects.patch(
        "workloads.kueue.x-k8s.io", name, {"spec": {"active": False}}, namespace="default"
    )
    cluster.step()
    conds = conditions(await workload_of(custom, waiting.metadata.uid))
    assert conds["Evicted"] == ("True", "Deactivated", "The workload is deactivated")
    assert "Requeued" not in conds  # it never had a reservation to release


async def test_kueue_0_19_keeps_the_legacy_reasons(
    cluster: SimulatedCluster,  # noqa: F811
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
) -> None:
    await setup_queues(custom, cpu="4")
    await batch.create_namespaced_job("default", queued_job("a", "3"))  # type: ignore[arg-type]
    waiting = await batch.create_namespaced_job("default", queued_job("b", "3"))  # type: ignore[arg-type]
    cluster.step()
    assert conditions(await workload_of(custom, waiting.metadata.uid))["QuotaReserved"][1] == (
        "Pending"
    )


async def test_kueue_before_0_10_says_inactive_workload(
    kube: KubeApiServer,
    cluster: SimulatedCluster,  # noqa: F811
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
) -> None:
    cluster.kueue.version = "0.9"
    await setup_queues(custom, cpu="4")
    job = await batch.create_namespaced_job("default", queued_job("old", "1"))  # type: ignore[arg-type]
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    KueueController.deactivate(
        Ctx(cluster.store, cluster.clock),
        wl,
        "RequeuingLimitExceeded",
        "exceeding the maximum number of re-queuing retries",
    )
    cluster.step()
    conds = conditions(await workload_of(custom, job.metadata.uid))
    assert conds["Evicted"][:2] == ("True", "InactiveWorkloadRequeuingLimitExceeded")
    assert conds["Requeued"][:2] == ("False", "InactiveWorkloadRequeuingLimitExceeded")
    assert (await batch.read_namespaced_job("old", "default")).spec.suspend is True
