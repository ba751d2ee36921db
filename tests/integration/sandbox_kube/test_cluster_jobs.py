"""The simulated cluster's Job controller, scheduler and kubelet, driven by a manual clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch

from launch_agent.sandbox.cluster import ANNOTATION, Node, RealClock, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer

from .conftest import job_body


@pytest.fixture
async def cluster(kube: KubeApiServer) -> AsyncIterator[SimulatedCluster]:
    async with SimulatedCluster(kube) as sim:
        yield sim


def pods(kube: KubeApiServer, job: str = "job-a") -> list[dict[str, Any]]:
    return kube.objects.list("pods", "default", label_selector=f"job-name={job}")


def state(pod: dict[str, Any]) -> dict[str, Any]:
    current: dict[str, Any] = pod["status"]["containerStatuses"][0]["state"]
    return current


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str | None]]:
    return {
        c["type"]: (c["status"], c.get("reason")) for c in obj["status"].get("conditions") or []
    }


def job(kube: KubeApiServer, name: str = "job-a") -> dict[str, Any]:
    return kube.objects.get("jobs", name)


async def test_successful_job_timeline(
    kube: KubeApiServer, cluster: SimulatedCluster, batch: client.BatchV1Api
) -> None:
    cluster.script("run=ok", "succeed after=30s log='epoch 1'")
    created = await batch.create_namespaced_job("default", job_body(labels={"run": "ok"}))  # type: ignore[arg-type]
    cluster.step()
    [pod] = pods(kube)
    assert pod["metadata"]["name"].startswith("job-a-")
    assert pod["metadata"]["labels"]["controller-uid"] == created.metadata.uid
    ref = pod["metadata"]["ownerReferences"][0]
    assert (ref["kind"], ref["name"], ref["controller"]) == ("Job", "job-a", True)
    assert pod["status"]["phase"] == "Pending" and state(pod) == {
        "waiting": {"reason": "ContainerCreating"}
    }
    assert job(kube)["status"]["active"] == 1
    cluster.advance(1)
    [pod] = pods(kube)
    assert pod["status"]["phase"] == "Running" and "running" in state(pod)
    assert conditions(pod)["Ready"] == ("True", None)
    assert job(kube)["status"]["ready"] == 1
    cluster.advance(30)
    [pod] = pods(kube)
    assert pod["status"]["phase"] == "Succeeded"
    assert (
        state(pod)["terminated"]["reason"] == "Completed"
        and state(pod)["terminated"]["exitCode"] == 0
    )
    status = job(kube)["status"]
    # `active` 0 is not served: the Go type's `omitempty` (batch/v1 `JobStatus`).
    assert status["succeeded"] == 1 and "active" not in status and status["completionTime"]
    assert conditions(job(kube)) == {
        "SuccessCriteriaMet": ("True", "CompletionsReached"),
        "Complete": ("True", "CompletionsReached"),
    }
    assert "batch.kubernetes.io/job-tracking" not in (pod["metadata"].get("finalizers") or [])
    name = pod["metadata"]["name"]
    async with aiohttp.ClientSession() as http:
        url = f"{kube.url}/api/v1/namespaces/default/pods/{name}/log"
        async with http.get(url) as resp:
            text = await resp.text()
        assert text.splitlines() == [
            "sandbox: container main started (image busybox:1.36)",
            "epoch 1",
            "sandbox: done",
        ]
        async with http.get(url, params={"tailLines": "1", "container": "main"}) as resp:
            assert (await resp.text()) == "sandbox: done\n"
        async with http.get(url, params={"container": "nope"}) as resp:
            assert resp.status == 400


@pytest.mark.parametrize(
    ("outcome", "reason", "code"),
    [
        ("exit code=3 after=5s", "Error", 3),
        ("oomkilled after=2s", "OOMKilled", 137),
        ("fail", "Error", 1),
    ],
)
async def test_failing_outcomes(
    kube: KubeApiServer, cluster: SimulatedCluster, outcome: str, reason: str, code: int
) -> None:
    body = job_body()
    body["spec"]["template"]["metadata"] = {"annotations": {ANNOTATION: outcome}}
    kube.objects.create("jobs", body)
    cluster.advance(10)
    [pod] = pods(kube)
    assert pod["status"]["phase"] == "Failed"
    assert (
        state(pod)["terminated"]["reason"] == reason
        and state(pod)["terminated"]["exitCode"] == code
    )
    assert conditions(job(kube))["Failed"] == ("True", "BackoffLimitExceeded")
    assert job(kube)["status"]["failed"] == 1
    events = kube.objects.list("events", field_selector="involvedObject.name=job-a")
    assert "BackoffLimitExceeded" in {e["reason"] for e in events}


async def test_retries_follow_backoff_limit_and_attempts(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    cluster.script("run=r", "fail after=1s; succeed after=1s")
    kube.objects.create("jobs", job_body(labels={"run": "r"}, backoffLimit=2))
    cluster.advance(3)  # first pod failed at t=2; the retry waits 10 s
    assert len(pods(kube)) == 1 and job(kube)["status"]["failed"] == 1
    cluster.advance(9)
    assert len(pods(kube)) == 2
    cluster.advance(5)
    status = job(kube)["status"]
    assert (status["failed"], status["succeeded"]) == (1, 1)
    assert "Complete" in conditions(job(kube))


@pytest.mark.parametrize(
    ("outcome", "timeline"),
    [
        ("imagepullbackoff after=5s", [(2, "ErrImagePull"), (10, "ImagePullBackOff")]),
        ("invalidimagename", [(2, "InvalidImageName")]),
        ("createcontainerconfigerror", [(2, "CreateContainerConfigError")]),
    ],
)
async def test_waiting_reasons(
    kube: KubeApiServer, cluster: SimulatedCluster, outcome: str, timeline: list[tuple[int, str]]
) -> None:
    body = job_body()
    body["metadata"]["annotations"] = {ANNOTATION: outcome}
    kube.objects.create("jobs", body)
    for seconds, reason in timeline:
        cluster.advance(seconds)
        [pod] = pods(kube)
        waiting = state(pod)["waiting"]
        assert waiting["reason"] == reason and waiting["message"]
        assert pod["status"]["phase"] == "Pending"
    assert job(kube)["status"]["active"] == 1
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{kube.url}/api/v1/namespaces/default/pods/{pod['metadata']['name']}/log"
        ) as resp,
    ):
        assert resp.status == 400
        assert "is waiting to start" in (await resp.json())["message"]


async def test_unschedulable_by_script(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    cluster.script("run=u", f'unschedulable message="{message}"')
    kube.objects.create("jobs", job_body(labels={"run": "u"}))
    cluster.advance(60)
    [pod] = pods(kube)
    assert pod["status"]["phase"] == "Pending" and "nodeName" not in pod["spec"]
    scheduled = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (scheduled["status"], scheduled["reason"], scheduled["message"]) == (
        "False",
        "Unschedulable",
        message,
    )
    events = kube.objects.list(
        "events", field_selector=f"involvedObject.name={pod['metadata']['name']}"
    )
    assert [e["reason"] for e in events] == ["FailedScheduling"]


async def test_node_capacity_keeps_pods_pending(kube: KubeApiServer) -> None:
    nodes = [
        Node("gpu-0", {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1", "pods": "110"}),
        Node("cpu-0", {"cpu": "8", "memory": "32Gi", "pods": "110"}),
        Node("cpu-1", {"cpu": "8", "memory": "32Gi", "pods": "110"}),
    ]
    async with SimulatedCluster(kube, nodes=nodes) as cluster:
        for name in ("a", "b"):
            body = job_body(name)
            body["spec"]["template"]["spec"]["containers"][0]["resources"] = {
                "limits": {"nvidia.com/gpu": "1"}
            }
            kube.objects.create("jobs", body)
        cluster.advance(1)
        first, second = pods(kube, "a")[0], pods(kube, "b")[0]
        assert first["spec"]["nodeName"] == "gpu-0"
        scheduled = next(c for c in second["status"]["conditions"] if c["type"] == "PodScheduled")
        # gpu-0 could hold it once `a` leaves, the CPU nodes never (kube-scheduler v1.37.2).
        assert scheduled["message"] == (
            "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are"
            " available: 1 No preemption victims found for incoming pod, 2 Preemption is not"
            " helpful for scheduling."
        )
        cluster.advance(6)  # a finishes and frees the GPU; b is bound
        assert pods(kube, "b")[0]["spec"].get("nodeName") == "gpu-0"
        assert {n["metadata"]["name"] for n in kube.objects.list("nodes")} == {
            "gpu-0",
            "cpu-0",
            "cpu-1",
        }


async def test_crash_loop_with_on_failure(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    body = job_body(backoffLimit=3)
    body["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    body["spec"]["template"]["metadata"] = {"annotations": {ANNOTATION: "exit code=2 after=1s"}}
    kube.objects.create("jobs", body)
    cluster.advance(3)  # ran 1..2, crashed, back-off 10 s
    [pod] = pods(kube)
    status = pod["status"]["containerStatuses"][0]
    assert pod["status"]["phase"] == "Running"
    assert status["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert status["lastState"]["terminated"]["exitCode"] == 2 and status["restartCount"] == 1
    cluster.advance(100)
    assert conditions(job(kube))["Failed"] == ("True", "BackoffLimitExceeded")


async def test_eviction_and_preemption(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    cluster.script("run=ev", "evicted after=2s")
    cluster.script("run=pre", "preempted after=2s; succeed after=1s")
    kube.objects.create("jobs", job_body("ev", labels={"run": "ev"}))
    kube.objects.create("jobs", job_body("pre", labels={"run": "pre"}, backoffLimit=1))
    cluster.advance(4)
    [evicted] = pods(kube, "ev")
    assert evicted["status"]["phase"] == "Failed" and evicted["status"]["reason"] == "Evicted"
    assert conditions(evicted)["DisruptionTarget"] == ("True", "TerminationByKubelet")
    # The preempted pod was marked and deleted; the Job counted it and made a replacement.
    assert job(kube, "pre")["status"]["failed"] == 1
    cluster.advance(15)
    assert job(kube, "pre")["status"]["succeeded"] == 1
    events = kube.objects.list("events")
    assert "Preempted" in {e["reason"] for e in events}


async def test_preemption_marks_the_pod_before_deleting_it(
    kube: KubeApiServer, cluster: SimulatedCluster, core: client.CoreV1Api
) -> None:
    cluster.script("run=pre", "preempted after=2s")
    kube.objects.create("jobs", job_body("pre", labels={"run": "pre"}))
    cluster.step()
    listed = await core.list_namespaced_pod("default")
    w = watch.Watch()
    seen: list[tuple[str, dict[str, str]]] = []

    async def collect() -> None:
        async for event in w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=2,
        ):
            conds = {c.type: c.reason for c in event["object"].status.conditions or []}
            seen.append((event["type"], conds))
            if event["type"] == "DELETED":
                return

    async with asyncio.TaskGroup() as tg:
        tg.create_task(collect(), name="collect")
        await asyncio.sleep(0.05)
        cluster.advance(4)
    deleted = [conds for kind, conds in seen if kind == "DELETED"]
    assert deleted and deleted[0].get("DisruptionTarget") == "PreemptionByScheduler"
    await w.close()


async def test_active_deadline(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    cluster.script("run=slow", "succeed after=1h")
    kube.objects.create("jobs", job_body(labels={"run": "slow"}, activeDeadlineSeconds=30))
    cluster.advance(29)
    assert "Failed" not in conditions(job(kube))
    cluster.advance(2)
    assert conditions(job(kube))["Failed"] == ("True", "DeadlineExceeded")
    assert pods(kube) == []  # the running pod was terminated
    assert "active" not in job(kube)["status"]


async def test_suspend_and_resume(
    kube: KubeApiServer, cluster: SimulatedCluster, batch: client.BatchV1Api
) -> None:
    await batch.create_namespaced_job("default", job_body(suspend=True))  # type: ignore[arg-type]
    cluster.advance(5)
    assert pods(kube) == []
    assert conditions(job(kube))["Suspended"] == ("True", "JobSuspended")
    await batch.patch_namespaced_job("job-a", "default", {"spec": {"suspend": False}})
    cluster.step()
    assert len(pods(kube)) == 1
    assert conditions(job(kube))["Suspended"] == ("False", "JobResumed")
    await batch.patch_namespaced_job("job-a", "default", {"spec": {"suspend": True}})
    cluster.step()
    assert pods(kube) == []


INDEX = "batch.kubernetes.io/job-completion-index"


def indexes(kube: KubeApiServer, *phases: str) -> list[str]:
    return sorted(
        p["metadata"]["labels"][INDEX]
        for p in pods(kube)
        if not phases or p["status"].get("phase") in phases
    )


async def test_indexed_job_runs_the_lowest_free_indexes_and_lists_them_completed(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    # As kube-controller-manager 1.37 does (checked on the real tier by test_compare's
    # `indexed-job`): each pod labelled and annotated with its index, its hostname and env
    # var from it, and the Job's status counting indexes.
    cluster.script("run=ix", "succeed after=10s")
    body = job_body(labels={"run": "ix"}, completionMode="Indexed", completions=3, parallelism=2)
    kube.objects.create("jobs", body)
    cluster.step()
    assert indexes(kube) == ["0", "1"]
    zero = next(p for p in pods(kube) if p["metadata"]["labels"][INDEX] == "0")
    assert zero["metadata"]["annotations"][INDEX] == "0"
    assert zero["metadata"]["generateName"] == "job-a-0-"
    assert zero["spec"]["hostname"] == "job-a-0"
    assert zero["spec"]["containers"][0]["env"] == [
        {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {
                "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.labels['{INDEX}']"}
            },
        }
    ]
    cluster.advance(11)
    assert indexes(kube, "Succeeded") == ["0", "1"]
    assert indexes(kube, "Pending", "Running") == ["2"]
    assert job(kube)["status"]["completedIndexes"] == "0,1"
    cluster.advance(11)
    status = job(kube)["status"]
    assert conditions(job(kube))["Complete"][0] == "True"
    assert (status["completedIndexes"], status["succeeded"]) == ("0-2", 3)


async def test_indexed_job_creates_a_failed_index_again_as_itself(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    cluster.script(f"{INDEX}=1", "fail after=1s")
    body = job_body(completionMode="Indexed", completions=2, parallelism=2, backoffLimit=1)
    kube.objects.create("jobs", body)
    cluster.advance(2)
    assert indexes(kube, "Failed") == ["1"]
    cluster.advance(11)  # after the Job controller's 10-s back-off
    assert indexes(kube) == ["0", "1", "1"]


async def test_ttl_after_finished_deletes_job_and_pods(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("jobs", job_body(ttlSecondsAfterFinished=60))
    cluster.advance(7)  # finished at t=6 (1 s to start, 5 s to run)
    assert "Complete" in conditions(job(kube))
    cluster.advance(58)
    assert kube.objects.find("jobs", "job-a") is not None
    cluster.advance(2)
    assert kube.objects.find("jobs", "job-a") is None
    assert pods(kube) == []


async def test_script_and_annotation_precedence_and_errors(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    body = job_body("annotated", labels={"run": "x"})
    body["metadata"]["annotations"] = {ANNOTATION: "exit code=7"}
    kube.objects.create("jobs", body)
    cluster.script("run=x", "oomkilled")  # a script on the Job's labels beats its annotation
    bad = job_body("bad")
    bad["metadata"]["annotations"] = {ANNOTATION: "explode loudly"}
    kube.objects.create("jobs", bad)
    cluster.advance(10)
    assert state(pods(kube, "annotated")[0])["terminated"]["reason"] == "OOMKilled"
    assert pods(kube, "bad")[0]["status"]["phase"] == "Succeeded"  # the default outcome
    assert cluster.problems == [
        "Job default/bad: annotation sandbox.launch-agent.io/outcome: outcome 'explode loudly':"
        " unknown kind 'explode' (one of admissionerror, crashloop, createcontainerconfigerror,"
        " drained, errimagepull, evicted, exit, fail, imagepullbackoff, invalidimagename,"
        " nodelost, nodeshutdown, oomkilled, outofresource, podgc, preempted, pullerror, run,"
        " succeed, unschedulable)"
    ]
    assert "InvalidOutcome" in {e["reason"] for e in kube.objects.list("events")}


async def test_watch_sees_the_phases(
    kube: KubeApiServer, cluster: SimulatedCluster, core: client.CoreV1Api
) -> None:
    listed = await core.list_namespaced_pod("default")
    w = watch.Watch()
    phases: list[str] = []

    async def collect() -> None:
        async for event in w.stream(
            core.list_namespaced_pod,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=2,
        ):
            if not phases or phases[-1] != event["object"].status.phase:
                phases.append(event["object"].status.phase)
            if phases[-1] == "Succeeded":
                return

    async with asyncio.TaskGroup() as tg:
        tg.create_task(collect(), name="collect")
        await asyncio.sleep(0.05)
        kube.objects.create("jobs", job_body())
        cluster.advance(10)
    assert phases == ["Pending", "Running", "Succeeded"]
    await w.close()


async def test_real_time_mode_runs_by_itself(kube: KubeApiServer, batch: client.BatchV1Api) -> None:
    async with SimulatedCluster(
        kube, clock=RealClock(), default_outcome="succeed after=0.2s start=0.1s"
    ):
        listed = await batch.list_namespaced_job("default")
        await batch.create_namespaced_job("default", job_body())  # type: ignore[arg-type]
        w = watch.Watch()
        async for event in w.stream(
            batch.list_namespaced_job,
            "default",
            resource_version=listed.metadata.resource_version,
            timeout_seconds=20,
        ):
            if any(c.type == "Complete" for c in event["object"].status.conditions or []):
                break
        await w.close()
    assert job(kube)["status"]["succeeded"] == 1
