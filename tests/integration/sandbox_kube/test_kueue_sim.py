"""The sandbox's Kueue emulation, driven through kubernetes_asyncio like a real cluster.

Every Workload, ClusterQueue and LocalQueue status the emulation writes is checked against the
Kueue v1beta2 CRD schema closed to unknown fields, so it cannot invent a field Kueue lacks."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from kubernetes_asyncio import client

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.kueue import KueueController, assign, format_amount
from launch_agent.sandbox.kube import KubeApiServer
from launch_agent.sandbox.kube.apiserver import load_crd_documents
from launch_agent.sandbox.kube.validation import close_schema

from .conftest import job_body

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_CRDS = {
    "Workload": "kueue.x-k8s.io_workloads.yaml",
    "ClusterQueue": "kueue.x-k8s.io_clusterqueues.yaml",
    "LocalQueue": "kueue.x-k8s.io_localqueues.yaml",
    "WorkloadPriorityClass": "kueue.x-k8s.io_workloadpriorityclasses.yaml",
}


@pytest.fixture
async def cluster(kube: KubeApiServer, crds: Path) -> AsyncIterator[SimulatedCluster]:
    for name in KUEUE_CRDS.values():
        await kube.load_crd_file(crds / name)
    async with SimulatedCluster(kube, kueue=True) as sim:
        yield sim


def cluster_queue(name: str, cpu: str, strategy: str | None = None, **more: str) -> dict[str, Any]:
    resources = [{"name": "cpu", "nominalQuota": cpu}]
    resources += [{"name": k, "nominalQuota": v} for k, v in more.items()]
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": [r["name"] for r in resources],
                "flavors": [{"name": "default-flavor", "resources": resources}],
            }
        ],
    }
    if strategy:
        spec["queueingStrategy"] = strategy
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(name: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"clusterQueue": cq},
    }


def queued_job(name: str, cpu: str, queue: str = "lq", parallelism: int = 1) -> dict[str, Any]:
    body = job_body(name, labels={QUEUE_LABEL: queue}, suspend=True, parallelism=parallelism)
    body["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    return body


async def setup_queues(custom: client.CustomObjectsApi, cpu: str = "16", **kw: str) -> None:
    await custom.create_cluster_custom_object(
        GROUP, VERSION, "clusterqueues", cluster_queue("cq", cpu, **kw)
    )
    await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "localqueues", local_queue("lq", "cq")
    )


async def workload_of(custom: client.CustomObjectsApi, job_uid: str) -> dict[str, Any]:
    listed = await custom.list_namespaced_custom_object(
        GROUP, VERSION, "default", "workloads", label_selector=f"kueue.x-k8s.io/job-uid={job_uid}"
    )
    [wl] = listed["items"]
    return dict(wl)


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        c["type"]: (c["status"], c["reason"], c["message"])
        for c in (obj.get("status") or {}).get("conditions") or []
    }


async def assert_status_matches_crd(crds: Path, obj: dict[str, Any]) -> None:
    def check() -> None:
        [crd] = load_crd_documents(crds / KUEUE_CRDS[obj["kind"]])
        version = next(v for v in crd["spec"]["versions"] if v["name"] == VERSION)
        schema = version["schema"]["openAPIV3Schema"]
        jsonschema.Draft7Validator(close_schema(schema["properties"]["status"])).validate(
            obj["status"]
        )
        jsonschema.Draft7Validator(close_schema(schema["properties"]["spec"])).validate(obj["spec"])

    await asyncio.get_running_loop().run_in_executor(None, check)


async def test_workload_is_built_like_kueue_and_admitted_when_quota_fits(
    kube: KubeApiServer,
    cluster: SimulatedCluster,
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
    crds: Path,
) -> None:
    await setup_queues(custom)
    job = await batch.create_namespaced_job("default", queued_job("a", "2", parallelism=3))  # type: ignore[arg-type]
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    assert wl["metadata"]["name"].startswith("job-a-")
    [ref] = wl["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["name"], ref["uid"], ref["controller"]) == (
        "Job",
        "a",
        job.metadata.uid,
        True,
    )
    assert wl["spec"]["queueName"] == "lq"
    [ps] = wl["spec"]["podSets"]
    assert (ps["name"], ps["count"]) == ("main", 3)
    assert ps["template"]["spec"]["containers"][0]["resources"]["requests"] == {"cpu": "2"}
    admission = wl["status"]["admission"]
    assert admission == {
        "clusterQueue": "cq",
        "podSetAssignments": [
            {
                "name": "main",
                "flavors": {"cpu": "default-flavor"},
                "resourceUsage": {"cpu": "6"},
                "count": 3,
            }
        ],
    }
    conds = conditions(wl)
    assert conds["QuotaReserved"][:2] == ("True", "QuotaReserved")
    assert conds["Admitted"][:2] == ("True", "Admitted")
    assert (await batch.read_namespaced_job("a", "default")).spec.suspend is False
    assert len(kube.objects.list("pods", "default", label_selector="job-name=a")) == 3
    await assert_status_matches_crd(crds, wl)
    cq = await custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq")
    assert (cq["status"]["admittedWorkloads"], cq["status"]["pendingWorkloads"]) == (1, 0)
    assert cq["status"]["flavorsUsage"][0]["resources"][0] == {
        "name": "cpu",
        "total": "6",
        "borrowed": "0",
    }
    await assert_status_matches_crd(crds, cq)
    lq = await custom.get_namespaced_custom_object(GROUP, VERSION, "default", "localqueues", "lq")
    assert lq["status"]["admittedWorkloads"] == 1
    await assert_status_matches_crd(crds, lq)


async def test_fifo_pending_message_and_release_when_a_job_finishes(
    kube: KubeApiServer,
    cluster: SimulatedCluster,
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
    crds: Path,
) -> None:
    await setup_queues(custom, cpu="16")
    cluster.script("job-name=first", "succeed after=10s")
    first = await batch.create_namespaced_job("default", queued_job("first", "10"))  # type: ignore[arg-type]
    cluster.step()
    second = await batch.create_namespaced_job("default", queued_job("second", "9"))  # type: ignore[arg-type]
    cluster.step()
    wl = await workload_of(custom, second.metadata.uid)
    assert conditions(wl)["QuotaReserved"] == (
        "False",
        "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor"
        " default-flavor, 3 more needed",
    )
    assert "admission" not in wl["status"]
    assert (await batch.read_namespaced_job("second", "default")).spec.suspend is True
    await assert_status_matches_crd(crds, wl)
    cq = await custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq")
    assert (cq["status"]["admittedWorkloads"], cq["status"]["pendingWorkloads"]) == (1, 1)

    cluster.advance(11)  # the first job completes: its quota is released
    done = await workload_of(custom, first.metadata.uid)
    assert conditions(done)["Finished"][:2] == ("True", "Succeeded")
    wl = await workload_of(custom, second.metadata.uid)
    assert conditions(wl)["Admitted"][0] == "True"
    assert (await batch.read_namespaced_job("second", "default")).spec.suspend is False


async def test_request_over_the_nominal_quota_and_uncovered_resources(
    cluster: SimulatedCluster, batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    await setup_queues(custom, cpu="16")
    big = await batch.create_namespaced_job("default", queued_job("big", "24"))  # type: ignore[arg-type]
    gpu = queued_job("gpu", "1")
    gpu["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = (
        "1"
    )
    gpu_job = await batch.create_namespaced_job("default", gpu)  # type: ignore[arg-type]
    cluster.step()
    assert conditions(await workload_of(custom, big.metadata.uid))["QuotaReserved"][2] == (
        "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor"
        " default-flavor, previously considered podsets requests (0) + current podset request"
        " (24) > maximum capacity (16)"
    )
    assert conditions(await workload_of(custom, gpu_job.metadata.uid))["QuotaReserved"][2] == (
        "couldn't assign flavors to pod set main: resource nvidia.com/gpu unavailable in"
        " ClusterQueue"
    )


async def test_missing_local_queue_is_inadmissible_until_created(
    cluster: SimulatedCluster, batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    await setup_queues(custom)
    job = await batch.create_namespaced_job("default", queued_job("x", "1", queue="nope"))  # type: ignore[arg-type]
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    assert conditions(wl)["QuotaReserved"] == (
        "False",
        "Inadmissible",
        "LocalQueue nope doesn't exist",
    )
    await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "localqueues", local_queue("nope", "cq")
    )
    cluster.step()
    assert conditions(await workload_of(custom, job.metadata.uid))["Admitted"][0] == "True"


async def test_best_effort_fifo_lets_a_small_job_pass_and_strict_fifo_does_not(
    cluster: SimulatedCluster, batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    await setup_queues(custom, cpu="4")
    await custom.create_cluster_custom_object(
        GROUP, VERSION, "clusterqueues", cluster_queue("strict", "4", "StrictFIFO")
    )
    await custom.create_namespaced_custom_object(
        GROUP, VERSION, "default", "localqueues", local_queue("slq", "strict")
    )
    ids = {}
    for name, cpu, queue in (
        ("b1", "3", "lq"),
        ("b2", "3", "lq"),
        ("b3", "1", "lq"),
        ("s1", "3", "slq"),
        ("s2", "3", "slq"),
        ("s3", "1", "slq"),
    ):
        ids[name] = (
            await batch.create_namespaced_job("default", queued_job(name, cpu, queue))  # type: ignore[arg-type]
        ).metadata.uid
        cluster.step()
    admitted = {
        name
        for name, uid in ids.items()
        if conditions(await workload_of(custom, uid)).get("Admitted", ("False",))[0] == "True"
    }
    assert admitted == {"b1", "b3", "s1"}


async def test_eviction_suspends_the_job_and_the_workload_is_requeued(
    kube: KubeApiServer,
    cluster: SimulatedCluster,
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
    crds: Path,
) -> None:
    await setup_queues(custom, cpu="4")
    job = await batch.create_namespaced_job("default", queued_job("e", "3"))  # type: ignore[arg-type]
    cluster.step()
    # Another tenant takes the quota back: the ClusterQueue shrinks, then Kueue preempts.
    cq = await custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq")
    cq["spec"] = cluster_queue("cq", "2")["spec"]
    await custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq", cq)
    wl = await workload_of(custom, job.metadata.uid)
    message = (
        "Preempted to accommodate a workload (UID: u-1) due to prioritization in the ClusterQueue"
    )
    KueueController.evict(Ctx(cluster.store, cluster.clock), wl, "InClusterQueue", message)
    cluster.step()
    wl = await workload_of(custom, job.metadata.uid)
    conds = conditions(wl)
    assert conds["Evicted"] == ("True", "Preempted", message)
    assert conds["Preempted"][:2] == ("True", "InClusterQueue")
    assert conds["QuotaReserved"][:2] == ("False", "Pending")
    assert (await batch.read_namespaced_job("e", "default")).spec.suspend is True
    await assert_status_matches_crd(crds, wl)


async def priority_class(custom: client.CustomObjectsApi, name: str, value: int) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    await custom.create_cluster_custom_object(GROUP, VERSION, "workloadpriorityclasses", body)


def prioritized_job(name: str, cpu: str, priority: str) -> dict[str, Any]:
    body = queued_job(name, cpu)
    body["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] = priority
    return body


async def test_a_higher_priority_workload_preempts_a_lower_one_in_its_cluster_queue(
    kube: KubeApiServer,
    cluster: SimulatedCluster,
    batch: client.BatchV1Api,
    custom: client.CustomObjectsApi,
    crds: Path,
) -> None:
    """What Kueue v0.17.0 writes on the real tier (`pkg/scheduler/preemption/preemption.go`
    IssuePreemptions, `scheduler.go`): the victim evicted with the preemptor's UIDs and queue
    paths, the preemptor pending "Pending the preemption of 1 workload(s)" until the victim's
    job is stopped and its quota released, then admitted; the victim requeued."""
    await setup_queues(custom, cpu="4")
    cq = await custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq")
    cq["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
    await custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq", cq)
    await priority_class(custom, "low", 100)
    await priority_class(custom, "high", 1000)
    cluster.script("job-name=low", "succeed after=600s")
    low = await batch.create_namespaced_job("default", prioritized_job("low", "3", "low"))  # type: ignore[arg-type]
    cluster.advance(2)
    low_wl = await workload_of(custom, low.metadata.uid)
    assert conditions(low_wl)["Admitted"][0] == "True"
    assert (low_wl["spec"]["priority"], low_wl["spec"]["priorityClassRef"]) == (
        100,
        {"group": GROUP, "kind": "WorkloadPriorityClass", "name": "low"},
    )
    # Equal priority never preempts under LowerPriority: it waits.
    same = await batch.create_namespaced_job("default", prioritized_job("same", "3", "low"))  # type: ignore[arg-type]
    cluster.step()
    assert conditions(await workload_of(custom, same.metadata.uid))["QuotaReserved"][2] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor"
        " default-flavor, 2 more needed"
    )
    high = await batch.create_namespaced_job("default", prioritized_job("high", "3", "high"))  # type: ignore[arg-type]
    cluster.step()
    high_wl = await workload_of(custom, high.metadata.uid)
    message = (
        f"Preempted to accommodate a workload (UID: {high_wl['metadata']['uid']}, JobUID:"
        f" {high.metadata.uid}) due to prioritization in the ClusterQueue; preemptor path: /cq;"
        " preemptee path: /cq"
    )
    low_wl = await workload_of(custom, low.metadata.uid)
    conds = conditions(low_wl)
    assert conds["Evicted"] == ("True", "Preempted", message)
    assert conds["Preempted"] == ("True", "InClusterQueue", message)
    priorities = (
        "preemptor effective priority: 1000 (base: 1000, boost: 0); preemptee effective"
        " priority: 100 (base: 100, boost: 0)"
    )
    events = {
        (e["involvedObject"]["name"], e["reason"]): e["message"]
        for e in kube.objects.list("events", "default")
    }
    low_name, high_name = low_wl["metadata"]["name"], high_wl["metadata"]["name"]
    assert events[(low_name, "Preempted")] == f"{message}; {priorities}"
    assert events[(low_name, "EvictedDueToPreempted")] == message
    assert events[(high_name, "PreemptedWorkload")] == (
        f"Preempted workload default/{low_name} (UID: {low_wl['metadata']['uid']}) in"
        f" ClusterQueue cq; {priorities}"
    )
    pending = (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor"
        " default-flavor, 2 more needed. Pending the preemption of 1 workload(s)"
    )
    assert events[(high_name, "Pending")] == pending
    cluster.advance(5)  # the victim's job is stopped (SIGTERM), its quota released
    assert (await batch.read_namespaced_job("low", "default")).spec.suspend is True
    high_wl = await workload_of(custom, high.metadata.uid)
    assert conditions(high_wl)["Admitted"][0] == "True"
    assert (await batch.read_namespaced_job("high", "default")).spec.suspend is False
    low_wl = await workload_of(custom, low.metadata.uid)
    conds = conditions(low_wl)
    assert conds["Requeued"] == ("True", "Preempted", message)
    assert conds["QuotaReserved"][:2] == ("False", "Pending")
    assert "Admitted" not in conditions(await workload_of(custom, same.metadata.uid))
    for wl in (low_wl, high_wl):
        await assert_status_matches_crd(crds, wl)


async def test_without_a_preemption_policy_a_higher_priority_waits(
    cluster: SimulatedCluster, batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    await setup_queues(custom, cpu="4")  # withinClusterQueue: Never, the default
    await priority_class(custom, "low", 100)
    await priority_class(custom, "high", 1000)
    low = await batch.create_namespaced_job("default", prioritized_job("low", "3", "low"))  # type: ignore[arg-type]
    cluster.step()
    high = await batch.create_namespaced_job("default", prioritized_job("high", "3", "high"))  # type: ignore[arg-type]
    cluster.step()
    assert conditions(await workload_of(custom, low.metadata.uid))["Admitted"][0] == "True"
    assert conditions(await workload_of(custom, high.metadata.uid))["QuotaReserved"][2] == (
        "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor"
        " default-flavor, 2 more needed"
    )


async def test_pending_workloads_are_admitted_by_priority_then_age(
    cluster: SimulatedCluster, batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    await setup_queues(custom, cpu="0")
    await priority_class(custom, "high", 1000)
    # Names in the other order than ages and priorities: creation times share a second.
    old = await batch.create_namespaced_job("default", queued_job("a-old", "3"))  # type: ignore[arg-type]
    cluster.step()
    new = await batch.create_namespaced_job("default", prioritized_job("z-new", "3", "high"))  # type: ignore[arg-type]
    cluster.step()
    cq = await custom.get_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq")
    cq["spec"] = cluster_queue("cq", "4")["spec"]
    await custom.replace_cluster_custom_object(GROUP, VERSION, "clusterqueues", "cq", cq)
    cluster.step()
    assert conditions(await workload_of(custom, new.metadata.uid))["Admitted"][0] == "True"
    assert conditions(await workload_of(custom, old.metadata.uid))["QuotaReserved"][0] == "False"


async def test_off_unless_enabled(
    kube: KubeApiServer, crds: Path, batch: client.BatchV1Api, custom: client.CustomObjectsApi
) -> None:
    for name in KUEUE_CRDS.values():
        await kube.load_crd_file(crds / name)
    async with SimulatedCluster(kube) as sim:
        await setup_queues(custom)
        await batch.create_namespaced_job("default", queued_job("off", "1"))  # type: ignore[arg-type]
        sim.step()
        assert kube.objects.list("workloads.kueue.x-k8s.io", "default") == []
        assert (await batch.read_namespaced_job("off", "default")).spec.suspend is True


@pytest.mark.parametrize(
    ("resource", "value", "text"),
    [
        ("cpu", "24", "24"),
        ("cpu", "1.5", "1500m"),
        ("memory", str(16 * 2**30), "16Gi"),
        ("memory", "1000", "1000"),
    ],
)
def test_amounts_print_like_kueue(resource: str, value: str, text: str) -> None:
    from decimal import Decimal

    assert format_amount(resource, Decimal(value)) == text


def test_assign_picks_the_first_flavor_that_fits() -> None:
    cq = cluster_queue("cq", "4")
    cq["spec"]["resourceGroups"][0]["flavors"].append(
        {"name": "spot", "resources": [{"name": "cpu", "nominalQuota": "8"}]}
    )
    pod = {"spec": {"containers": [{"name": "m", "resources": {"requests": {"cpu": "6"}}}]}}
    result, problem, _ = assign(cq, [{"name": "main", "count": 1, "template": pod}], {})
    assert problem == ""
    assert result is not None
    assert result[0]["flavors"] == {"cpu": "spot"}


async def test_a_jobset_gets_one_pod_set_per_replicated_job(
    kube: KubeApiServer, cluster: SimulatedCluster, custom: client.CustomObjectsApi, crds: Path
) -> None:
    await kube.load_crd_file(crds / "jobset.x-k8s.io_jobsets.yaml")
    await setup_queues(custom, cpu="16")

    def replicated(name: str, replicas: int, parallelism: int, cpu: str) -> dict[str, Any]:
        container = {
            "name": "main",
            "image": "busybox:1.36",
            "resources": {"requests": {"cpu": cpu}},
        }
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [container]}},
                }
            },
        }

    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js", "labels": {QUEUE_LABEL: "lq"}},
        "spec": {
            "suspend": True,
            "replicatedJobs": [replicated("leader", 1, 1, "1"), replicated("workers", 2, 3, "2")],
        },
    }
    created = await custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", body
    )
    cluster.step()
    wl = await workload_of(custom, created["metadata"]["uid"])
    assert wl["metadata"]["name"].startswith("jobset-js-")
    assert [(p["name"], p["count"]) for p in wl["spec"]["podSets"]] == [
        ("leader", 1),
        ("workers", 6),
    ]
    assert [a["resourceUsage"] for a in wl["status"]["admission"]["podSetAssignments"]] == [
        {"cpu": "1"},
        {"cpu": "12"},
    ]
    js = await custom.get_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", "js"
    )
    assert js["spec"]["suspend"] is False
    await assert_status_matches_crd(crds, wl)
