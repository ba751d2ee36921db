"""The scripted scenarios `test_compare.py` plays on the sandbox and on the real cluster.

Each creates its objects through the API only (no agent) and returns once its end state is
reached; `compare.settled` then waits for the trailing writes. The pods' outcomes are the
`sandbox.launch-agent.io/outcome` annotation on the Job, which the sandbox's cluster and the
real tier's node simulator read alike.
"""

from __future__ import annotations

from launch_agent.realcluster.kubehttp import path_of
from tests.cluster.compare import (
    KUEUE,
    QUEUE_NAME,
    Scenario,
    Side,
    conditions,
    container,
    event,
    job_body,
    job_condition,
    pod_body,
)
from tests.cluster.world import Obj, until

# --- the Job controller ----------------------------------------------------------------------


async def job_succeeds(side: Side) -> None:
    await side.create("batch/v1", "jobs", job_body("train", "succeed after=1s"))
    await job_condition(side, "train", "Complete")


async def exit_code_no_retry(side: Side) -> None:
    await side.create("batch/v1", "jobs", job_body("train", "exit code=3 after=1s"))
    await job_condition(side, "train", "Failed")


async def retries(side: Side) -> None:
    # Two replacements after the controller's back-off (10 s, then 20 s).
    body = job_body("train", "exit code=3 after=1s", spec={"backoffLimit": 2})
    await side.create("batch/v1", "jobs", body)
    await job_condition(side, "train", "Failed", within=150)


async def deadline(side: Side) -> None:
    body = job_body("train", "succeed after=120s", spec={"activeDeadlineSeconds": 3})
    await side.create("batch/v1", "jobs", body)
    await job_condition(side, "train", "Failed")


async def pod_failure_policy(side: Side) -> None:
    policy = {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
            }
        ]
    }
    body = job_body(
        "train", "exit code=42 after=1s", spec={"backoffLimit": 6, "podFailurePolicy": policy}
    )
    await side.create("batch/v1", "jobs", body)
    await job_condition(side, "train", "Failed")


async def ttl_deletes(side: Side) -> None:
    body = job_body("train", "succeed after=1s", spec={"ttlSecondsAfterFinished": 2})
    await side.create("batch/v1", "jobs", body)
    await job_condition(side, "train", "Complete")

    async def gone() -> bool:
        return await side.job("train") is None and not await side.items("v1", "pods")

    await until(gone, within=60, message=f"{side.tier}: the Job and its pod deleted")


async def indexed(side: Side) -> None:
    body = job_body(
        "train",
        "succeed after=1s",
        spec={"completionMode": "Indexed", "completions": 2, "parallelism": 2},
    )
    await side.create("batch/v1", "jobs", body)
    await job_condition(side, "train", "Complete")


async def suspended_then_resumed(side: Side) -> None:
    body = job_body("train", "succeed after=1s", spec={"suspend": True})
    await side.create("batch/v1", "jobs", body)
    await job_condition(side, "train", "Suspended")
    await side.http.patch(side.path("batch/v1", "jobs", "train"), {"spec": {"suspend": False}})
    await job_condition(side, "train", "Complete")


JOBS = [
    Scenario("job-succeeds", job_succeeds),
    Scenario("indexed-job", indexed),
    Scenario("suspend-resume", suspended_then_resumed),
    Scenario("exit-code-backoff-0", exit_code_no_retry),
    Scenario("backoff-2-retries", retries),
    Scenario("active-deadline", deadline),
    Scenario("pod-failure-policy-failjob", pod_failure_policy),
    Scenario("ttl-after-finished", ttl_deletes),
]

# --- the scheduler and admission -------------------------------------------------------------


async def unschedulable(side: Side) -> None:
    gpus = {"requests": {"cpu": "1"}, "limits": {"nvidia.com/gpu": "9"}}
    body = job_body("train", "succeed after=1s", pod={"containers": [container(gpus)]})
    await side.create("batch/v1", "jobs", body)

    async def pending() -> bool:
        pods = await side.items("v1", "pods")
        return bool(pods) and conditions(pods[0]).get("PodScheduled", {}).get("status") == "False"

    await until(pending, within=60, message=f"{side.tier}: PodScheduled=False")
    await event(side, "FailedScheduling")


async def refused_both_ways(side: Side, pod: Obj, pod_spec: Obj) -> None:
    """A pod created directly (the refusal's Status body) and a Job whose pods are refused
    (the Job controller's FailedCreate Event)."""
    await side.refused("pod", "v1", "pods", pod)
    body = job_body("refused", "succeed after=1s", pod=pod_spec)
    await side.create("batch/v1", "jobs", body)
    await event(side, "FailedCreate")


async def quota(side: Side) -> None:
    await side.create(
        "v1",
        "resourcequotas",
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "team-quota"},
            "spec": {"hard": {"requests.cpu": "500m"}},
        },
    )

    async def counted() -> bool:
        # kube-apiserver enforces `status.hard`, which the quota controller writes.
        [found] = await side.items("v1", "resourcequotas")
        return bool((found.get("status") or {}).get("hard"))

    await until(counted, within=60, message=f"{side.tier}: the ResourceQuota's status")
    await refused_both_ways(side, pod_body("direct"), {})


async def limit_range(side: Side) -> None:
    await side.create(
        "v1",
        "limitranges",
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "small-containers"},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "512Mi"}}]},
        },
    )
    big = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    await refused_both_ways(
        side,
        pod_body("direct", containers=[container(big)]),
        {"containers": [container(big)]},
    )


async def service_account(side: Side) -> None:
    await refused_both_ways(
        side,
        pod_body("direct", serviceAccountName="trainer"),
        {"serviceAccountName": "trainer"},
    )


async def pod_security(side: Side) -> None:
    await side.http.patch(
        path_of("v1", "namespaces", name=side.namespace),
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    await refused_both_ways(side, pod_body("direct"), {})


ADMISSION = [
    Scenario("unschedulable", unschedulable),
    Scenario("resource-quota-refusal", quota),
    Scenario("limit-range-refusal", limit_range),
    Scenario("missing-service-account", service_account),
    Scenario("pod-security-restricted", pod_security),
]

# --- Kueue -----------------------------------------------------------------------------------


async def queues(side: Side, cpu: str) -> None:
    """A ResourceFlavor and a ClusterQueue named after the namespace, its LocalQueue `lq`."""
    flavor, cq = f"{side.namespace}-flavor", f"{side.namespace}-cq"
    await side.http.create(
        path_of(KUEUE, "resourceflavors"),
        {"apiVersion": KUEUE, "kind": "ResourceFlavor", "metadata": {"name": flavor}},
    )
    side.cleanup.append(path_of(KUEUE, "resourceflavors", name=flavor))
    group = {
        "coveredResources": ["cpu", "memory"],
        "flavors": [
            {
                "name": flavor,
                "resources": [
                    {"name": "cpu", "nominalQuota": cpu},
                    {"name": "memory", "nominalQuota": "64Gi"},
                ],
            }
        ],
    }
    await side.http.create(
        path_of(KUEUE, "clusterqueues"),
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": cq},
            "spec": {"namespaceSelector": {}, "resourceGroups": [group]},
        },
    )
    side.cleanup.insert(0, path_of(KUEUE, "clusterqueues", name=cq))
    await side.create(
        KUEUE,
        "localqueues",
        {
            "apiVersion": KUEUE,
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": cq},
        },
    )


def queued(name: str, outcome: str, cpu: str) -> Obj:
    resources = {"requests": {"cpu": cpu, "memory": "1Gi"}}
    return job_body(
        name,
        outcome,
        spec={"suspend": True},
        labels={QUEUE_NAME: "lq"},
        pod={"containers": [container(resources)]},
    )


async def workload_condition(side: Side, kind: str, status: str) -> None:
    async def reached() -> bool:
        return any(
            conditions(w).get(kind, {}).get("status") == status
            for w in await side.items(KUEUE, "workloads")
        )

    await until(reached, within=90, message=f"{side.tier}: a Workload {kind}={status}")


async def kueue_admitted(side: Side) -> None:
    await queues(side, cpu="4")
    await side.create("batch/v1", "jobs", queued("train", "succeed after=1s", cpu="1"))
    await workload_condition(side, "Finished", "True")


async def kueue_does_not_fit(side: Side) -> None:
    await queues(side, cpu="2")
    await side.create("batch/v1", "jobs", queued("train", "succeed after=1s", cpu="3"))
    await workload_condition(side, "QuotaReserved", "False")


KUEUE_SCENARIOS = [
    Scenario("kueue-admitted-finished", kueue_admitted, kueue=True),
    Scenario("kueue-does-not-fit", kueue_does_not_fit, kueue=True),
]
