"""The sandbox's operators against the upstream-shaped fixtures `diagnose` replays.

`tests/fixtures/upstream/<kind>/<case>.json` holds what the real controller writes for one
failure mode (see its README). Each case here plays the same failure mode on the sandbox and
requires the judgement-bearing words of the fixture to appear in what the sandbox wrote: the
workload's decisive status fields (RayJob deployment/job status and reason, Volcano phase,
condition types, statuses and reasons, Kueue's Workload conditions with their messages) and the
Warning Events' reasons. Names, uids, times and counts differ by construction; the words may
not, so the fixtures and the sandbox cannot drift apart.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.cluster import ANNOTATION, SimulatedCluster
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.kueue import KueueController
from launch_agent.sandbox.kube import KubeApiServer
from tests.integration.sandbox_kube.conftest import CRD_FILES, job_body
from tests.integration.sandbox_kube.test_cluster_workloads import jobset
from tests.integration.sandbox_kube.test_kueue_sim import KUEUE_CRDS, cluster_queue, local_queue
from tests.integration.sandbox_kube.test_operator_events import trainjob
from tests.integration.sandbox_kube.test_operator_restarts import pytorchjob
from tests.integration.sandbox_kube.test_operator_retries import rayjob, volcano
from tests.integration.sandbox_kube.test_volcano_tasks import master_workers

UPSTREAM = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
Items = list[dict[str, Any]]
Signature = set[tuple[str, ...]]


@pytest.fixture
async def cluster(kube: KubeApiServer, crds: Path) -> AsyncIterator[SimulatedCluster]:
    for name in (*CRD_FILES.values(), *KUEUE_CRDS.values()):
        await kube.load_crd_file(crds / name)
    async with SimulatedCluster(kube, kueue=True) as sim:
        yield sim


def signature(items: Items, kind: str) -> Signature:
    """The words a judgement reads, from the objects of `kind` and the Warning Events."""
    out: Signature = set()
    for obj in items:
        status = obj.get("status") or {}
        if obj.get("kind") == "Event" and obj.get("type") == "Warning":
            out.add(("event", str(obj.get("reason"))))
        if obj.get("kind") != kind:
            continue
        for key in ("jobDeploymentStatus", "jobStatus", "reason", "terminalState"):
            if status.get(key):
                out.add((key, str(status[key])))
        if (status.get("state") or {}).get("phase"):
            out.add(("phase", str(status["state"]["phase"])))
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Created", "Running", "Suspended"):
                continue  # progress, not a judgement
            words = (str(cond.get("type")), str(cond.get("status")), str(cond.get("reason", "")))
            out.add(("condition", *words))
            if kind == "Workload" and cond.get("message"):  # Kueue's messages are fixed words
                out.add(("condition", *words, str(cond["message"])))
    return out


def _load(case: str) -> Items:
    with (UPSTREAM / f"{case}.json").open() as f:
        return list(json.load(f)["items"])


def _all(kube: KubeApiServer, plural: str) -> Items:
    return [*kube.objects.list(plural), *kube.objects.list("events")]


async def _rayjob_retrying(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("rayjobs", rayjob("rj", "fail after=2s; succeed", backoffLimit=2))
    seen: Items = []
    kube.store.listeners.append(
        lambda storage, kind, obj: (
            seen.append(obj)
            if obj.get("kind") == "RayJob"
            and (obj.get("status") or {}).get("jobDeploymentStatus") == "Retrying"
            else None
        )
    )
    cluster.advance(5)
    return seen[:1]


async def _rayjob_failed(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("rayjobs", rayjob("rj", "fail after=2s", backoffLimit=1))
    for _ in range(4):
        cluster.advance(5)
    return _all(kube, "rayjobs")


async def _raycluster_head_refused(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create(
        "resourcequotas", {"metadata": {"name": "q"}, "spec": {"hard": {"pods": "0"}}}
    )
    kube.objects.create("rayjobs", rayjob("rj", "run"))
    cluster.advance(5)
    return [*_all(kube, "rayjobs"), *kube.objects.list("rayclusters.ray.io")]


async def _volcano_one_failed(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("jobs.batch.volcano.sh", volcano("vj"))
    cluster.script("volcano.sh/task-spec=worker", "fail after=2s; succeed after=20s")
    cluster.advance(5)
    return _all(kube, "jobs.batch.volcano.sh")


async def _volcano_all_done(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    items = await _volcano_one_failed(kube, cluster)
    del items
    cluster.advance(30)
    return _all(kube, "jobs.batch.volcano.sh")


async def _volcano_task_short(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("jobs.batch.volcano.sh", master_workers(2, 1))
    cluster.script("volcano.sh/task-spec=master", "exit code=1 after=2s")
    cluster.script("volcano.sh/task-spec=worker", "succeed after=5s")
    cluster.advance(10)
    return _all(kube, "jobs.batch.volcano.sh")


async def _jobset_creation_failed(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    body = jobset("js", replicas=1)
    body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] = (
        "Always"
    )
    kube.objects.create("jobsets", body)
    cluster.advance(5)
    return _all(kube, "jobsets")


async def _jobset_in_order(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    body = jobset("js", replicas=1)
    driver = {**body["spec"]["replicatedJobs"][0], "name": "driver"}
    body["spec"]["replicatedJobs"].insert(0, driver)
    body["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    cluster.script("jobset.sigs.k8s.io/replicatedjob-name=driver", "run start=60s")
    kube.objects.create("jobsets", body)
    cluster.advance(5)
    return _all(kube, "jobsets")


async def _jobset_failed(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("jobsets", jobset("js", annotations={ANNOTATION: "oomkilled after=2s"}))
    cluster.advance(10)
    return _all(kube, "jobsets")


async def _trainjob_failed(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("trainjobs", trainjob("tj", "exit code=1 after=2s"))
    cluster.advance(10)
    return _all(kube, "trainjobs")


async def _pytorch_restarting(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("pytorchjobs", pytorchjob("exit code=137 after=2s; succeed after=5s"))
    seen: Items = []
    kube.store.listeners.append(
        lambda storage, kind, obj: (
            seen.append(obj)
            if obj.get("kind") == "PyTorchJob"
            and any(
                c["type"] == "Restarting" for c in (obj.get("status") or {}).get("conditions") or []
            )
            else None
        )
    )
    cluster.advance(4)
    return seen[:1]


async def _pytorch_backoff(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    kube.objects.create("pytorchjobs", pytorchjob("exit code=137 after=2s", backoffLimit=1))
    for _ in range(4):
        cluster.advance(3)
    return _all(kube, "pytorchjobs")


async def _kueue(
    kube: KubeApiServer, cluster: SimulatedCluster, act: Callable[[dict[str, Any]], None]
) -> Items:
    kube.objects.create("clusterqueues.kueue.x-k8s.io", cluster_queue("cq", "4"), "")
    kube.objects.create("localqueues.kueue.x-k8s.io", local_queue("lq", "cq"))
    body = job_body("j", labels={"kueue.x-k8s.io/queue-name": "lq"}, suspend=True)
    kube.objects.create("jobs", body)
    cluster.step()
    [wl] = kube.objects.list("workloads.kueue.x-k8s.io")
    act(wl)
    cluster.step()
    return _all(kube, "workloads.kueue.x-k8s.io")


async def _kueue_admin(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    def deactivate(wl: dict[str, Any]) -> None:
        name = wl["metadata"]["name"]
        kube.objects.patch("workloads.kueue.x-k8s.io", name, {"spec": {"active": False}})

    return await _kueue(kube, cluster, deactivate)


async def _kueue_requeuing_limit(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    def limit(wl: dict[str, Any]) -> None:
        KueueController.deactivate(
            Ctx(cluster.store, cluster.clock),
            wl,
            "RequeuingLimitExceeded",
            "exceeding the maximum number of re-queuing retries",
        )

    return await _kueue(kube, cluster, limit)


async def _kueue_misconfigured(kube: KubeApiServer, cluster: SimulatedCluster) -> Items:
    cluster.kueue.version = "0.20"
    kube.objects.create("jobs", job_body("j", labels={"kueue.x-k8s.io/queue-name": "lq-a"}))
    cluster.step()
    return _all(kube, "workloads.kueue.x-k8s.io")


Scenario = Callable[[KubeApiServer, SimulatedCluster], Any]
CASES: list[tuple[str, str, Scenario]] = [
    ("rayjob/retrying-is-not-final", "RayJob", _rayjob_retrying),
    ("rayjob/failed-after-backoff", "RayJob", _rayjob_failed),
    ("rayjob/raycluster-head-refused-within-deadline", "RayJob", _raycluster_head_refused),
    ("rayjob/raycluster-head-refused-within-deadline", "RayCluster", _raycluster_head_refused),
    ("volcano/one-pod-failed-still-running", "Job", _volcano_one_failed),
    ("volcano/failed-all-pods-done", "Job", _volcano_all_done),
    ("volcano/task-min-available-short", "Job", _volcano_task_short),
    ("jobset/jobcreationfailed", "JobSet", _jobset_creation_failed),
    ("jobset/failed-jobs-oom", "JobSet", _jobset_failed),
    ("jobset/startup-in-order-driver-not-ready", "JobSet", _jobset_in_order),
    ("trainjob/failed-jobs-exit-code", "TrainJob", _trainjob_failed),
    ("pytorchjob/restarting-is-not-failed", "PyTorchJob", _pytorch_restarting),
    ("pytorchjob/backoff-limit-exceeded", "PyTorchJob", _pytorch_backoff),
    ("job/kueue-deactivated-by-admin", "Workload", _kueue_admin),
    ("job/kueue-deactivated-requeuing-limit", "Workload", _kueue_requeuing_limit),
    ("job/kueue-misconfigured", "Workload", _kueue_misconfigured),
]


@pytest.mark.parametrize(
    ("case", "kind", "scenario"), CASES, ids=[f"{c[0]}[{c[1]}]" for c in CASES]
)
async def test_the_sandbox_writes_the_fixture_words(
    kube: KubeApiServer, cluster: SimulatedCluster, case: str, kind: str, scenario: Scenario
) -> None:
    expected = signature(_load(case), kind)
    if kind == "Job":  # the Volcano Job: not the batch/v1 Jobs of the other fixtures
        expected = {s for s in expected if s[0] == "phase"}
    written = signature(await scenario(kube, cluster), kind)
    assert expected, f"{case}: the fixture has no judgement words for {kind}"
    assert expected <= written, (case, sorted(expected - written), sorted(written))
