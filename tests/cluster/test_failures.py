"""Failures in the cluster's own words, on either tier: each reaches W&B as a failed item whose
message says what refused or stopped the run, in the words of the component that did
(kube-scheduler, the admission plugins, the Job controller), never our enum names.

On the real tier these are the upstream components themselves: the scheduler's FailedScheduling,
kube-apiserver's PodSecurity, ResourceQuota, LimitRanger and ServiceAccount admission plugins
refusing the Job controller's pod creates (a `FailedCreate` Event on the Job), the Job
controller's BackoffLimitExceeded, DeadlineExceeded and PodFailurePolicy, and the
TTL-after-finished controller and garbage collector removing a finished Job and its pods.
"""

from __future__ import annotations

from typing import Any

from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.cluster.world import Obj, World, run_spec, until

# Refusals are reported at the start deadline (the Job controller retries a refused create
# until the cause goes away): short here, so each test takes seconds.
START_TIMEOUT = 8.0

SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: basic
spec:
  queues: [q1]
  namespace: NAMESPACE
SECURITY
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
JOB
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
              resources:
                requests: {cpu: "1", memory: 1Gi}
RESOURCES
"""


def spec(security: str = "", job: str = "      backoffLimit: 0\n", resources: str = "") -> str:
    return (
        SPEC.replace("SECURITY\n", security).replace("JOB\n", job).replace("RESOURCES\n", resources)
    )


def config(world: World, **tracking: Any) -> Any:
    return world.config(
        tracking={
            "stop_check_seconds": 0.2,
            "unschedulable_timeout_seconds": 60,
            "start_timeout_seconds": START_TIMEOUT,
            **tracking,
        }
    )


async def failure_of(world: World, item: RunQueueItem, within: float = 90) -> str:
    try:
        await until(lambda: item.state is ItemState.FAILED, within=within, message="failed in W&B")
    except AssertionError as exc:
        # What the cluster holds says which component did not do its part.
        raise AssertionError(f"{exc}; the namespace holds {await _holds(world)}") from None
    assert item.failure is not None
    assert item.failure.stage == "run"
    return item.failure.message


async def _holds(world: World) -> str:
    def brief(obj: Obj) -> str:
        status = obj.get("status") or {}
        return f"{obj['kind']} {obj['metadata']['name']}: {status}"

    found = [
        *[{"kind": "Job", **o} for o in await world.objects("batch/v1", "jobs")],
        *[{"kind": "Pod", **o} for o in await world.objects("v1", "pods")],
    ]
    events = [f"{e.get('reason')}: {e.get('message')}" for e in await world.events()]
    return "; ".join([*map(brief, found), f"events {events}"])


async def jobs(world: World, run_id: str) -> list[Obj]:
    return await world.objects("batch/v1", "jobs", labelSelector=f"launch-agent.io/run-id={run_id}")


async def pods(world: World, run_id: str) -> list[Obj]:
    return await world.objects("v1", "pods", labelSelector=f"launch-agent.io/run-id={run_id}")


async def failed_creates(world: World) -> list[str]:
    return [
        str(e.get("message"))
        for e in await world.events()
        if e.get("reason") == "FailedCreate" and e.get("type") == "Warning"
    ]


async def refused(world: World, item: RunQueueItem) -> str:
    """A run whose pods the API server refuses: the Job controller's FailedCreate Event, then
    the run failed at the start deadline with the refusal in it, and its Job deleted."""
    await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
    creates = await until(
        lambda: failed_creates(world), message="the Job controller's FailedCreate"
    )
    assert all(m.startswith("Error creating: ") for m in creates), creates
    message = await failure_of(world, item)
    assert f"did not start within {START_TIMEOUT:g}s" in message, message
    run_id = item.run_spec["run_id"]

    async def deleted() -> bool:
        return not await jobs(world, run_id)

    await until(deleted, message="the refused run's Job deleted")
    return message


# --- admission: kube-apiserver's plugins refuse the Job controller's pods -------------------


async def test_resource_quota_refusal_names_the_quota(world: World) -> None:
    world.write_spec("basic.yaml", spec())
    await world.create(
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
        # kube-apiserver enforces `status.hard`, which the quota controller writes: until then
        # a real cluster admits every pod (the sandbox enforces the spec at once).
        [quota] = await world.objects("v1", "resourcequotas")
        return bool((quota.get("status") or {}).get("hard"))

    await until(counted, message="the ResourceQuota's status")
    item = world.push(run_spec("quota-1"))
    async with world.running(world.agent(config(world))):
        message = await refused(world, item)
    assert "exceeded quota: team-quota" in message, message
    assert "requested: requests.cpu=1, used: requests.cpu=0, limited: requests.cpu=500m" in message


async def test_limit_range_refusal_names_the_limit(world: World) -> None:
    world.write_spec("basic.yaml", spec(resources="                limits: {memory: 1Gi}\n"))
    await world.create(
        "v1",
        "limitranges",
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "small-containers"},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "512Mi"}}]},
        },
    )
    item = world.push(run_spec("limit-1"))
    async with world.running(world.agent(config(world))):
        message = await refused(world, item)
    assert "maximum memory usage per Container is 512Mi, but limit is 1Gi" in message, message


async def test_missing_service_account_refusal_names_the_account(world: World) -> None:
    world.write_spec("basic.yaml", spec(security="  security:\n    serviceAccountName: trainer\n"))
    item = world.push(run_spec("sa-1"))
    async with world.running(world.agent(config(world))):
        message = await refused(world, item)
    assert (
        f'error looking up service account {world.namespace}/trainer: serviceaccount "trainer"'
        " not found" in message
    ), message


async def test_pod_security_restricted_refuses_what_the_spec_grants(world: World) -> None:
    """The agent enforces `restricted` except where the spec grants an exception; the
    namespace's PodSecurity label enforces it without exceptions, so a granted capability is
    refused by the API server, in PodSecurity's words."""
    await world.http.patch(
        f"/api/v1/namespaces/{world.namespace}",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    granted = "  security:\n    capabilities: [SYS_PTRACE]\n"
    adds = "              securityContext:\n                capabilities: {add: [SYS_PTRACE]}\n"
    world.write_spec("basic.yaml", spec(security=granted, resources=adds))
    item = world.push(run_spec("psa-1"))
    async with world.running(world.agent(config(world))):
        message = await refused(world, item)
    # restricted's own capabilities check, which replaces baseline's "non-default
    # capabilities" (pod-security-admission `check_capabilities_restricted.go`).
    assert (
        'violates PodSecurity "restricted:latest": unrestricted capabilities (container "main"'
        ' must not include "SYS_PTRACE" in securityContext.capabilities.add)'
    ) in message, message


async def test_pod_security_restricted_admits_what_the_agent_enforces(world: World) -> None:
    await world.http.patch(
        f"/api/v1/namespaces/{world.namespace}",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
    )
    world.write_spec("basic.yaml", spec())
    item = world.push(run_spec("psa-2"))
    await world.script("launch-agent.io/run-id=psa-2", "succeed after=1s")
    async with world.running(world.agent(config(world))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(lambda: agent.runs.get(item.id) is None, within=90, message="run released")
    assert item.failure is None
    assert await failed_creates(world) == []


# --- the scheduler ----------------------------------------------------------------------------


async def test_unschedulable_past_the_deadline_in_the_schedulers_words(world: World) -> None:
    nine = '                limits: {nvidia.com/gpu: "9"}\n'
    world.write_spec("basic.yaml", spec(resources=nine))
    item = world.push(run_spec("gpu-9"))
    cfg = config(world, unschedulable_timeout_seconds=3, start_timeout_seconds=600)
    async with world.running(world.agent(cfg)):
        message = await failure_of(world, item)
    # kube-scheduler's FitError, with DefaultPreemption's verdict: no node could ever hold it.
    assert (
        "0/2 nodes are available: 2 Insufficient nvidia.com/gpu. preemption: 0/2 nodes are"
        " available: 2 Preemption is not helpful for scheduling."
    ) in message, message
    assert "cannot be scheduled for 3s" in message, message

    async def deleted() -> bool:
        return not await jobs(world, "gpu-9")

    await until(deleted, message="the unschedulable run's Job deleted")


# --- the Job controller -----------------------------------------------------------------------


async def test_deadline_exceeded_is_reported_at_failure_target(world: World) -> None:
    """activeDeadlineSeconds: the Job controller marks `FailureTarget` DeadlineExceeded and
    SIGTERMs the pod, and writes `Failed` only once the pod is gone (Kubernetes 1.31+); the
    run is failed in W&B at FailureTarget, with the deadline, not the container's 143."""
    job = "      backoffLimit: 0\n      activeDeadlineSeconds: 3\n"
    world.write_spec("basic.yaml", spec(job=job))
    item = world.push(run_spec("dl-1"))
    # The container takes 15 s to exit after SIGTERM (within the 30 s grace period).
    await world.script("launch-agent.io/run-id=dl-1", "succeed after=120s stop=15s")
    async with world.running(world.agent(config(world, start_timeout_seconds=600))):
        message = await failure_of(world, item)
        [obj] = await jobs(world, "dl-1")
        at_report = {c["type"]: c for c in obj["status"].get("conditions") or []}

        async def failed() -> Obj | None:
            [obj] = await jobs(world, "dl-1")
            conditions = {c["type"]: c for c in obj["status"].get("conditions") or []}
            return conditions.get("Failed")

        final = await until(failed, message="the Job's Failed condition once its pod is gone")
    assert message == (
        f"Job {world.namespace}/basic-4 failed (DeadlineExceeded): Job basic-4 ran past its"
        " deadline (activeDeadlineSeconds) and was stopped: Job was active longer than"
        " specified deadline"
    )
    assert "Failed" not in at_report, at_report
    target = at_report["FailureTarget"]
    assert (target["reason"], target["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert (final["reason"], final["message"]) == (target["reason"], target["message"])
    assert not [w for w in item.warnings if "143" in w.message], item.warnings


async def test_pod_failure_policy_fails_the_job_on_an_exit_code(world: World) -> None:
    job = (
        "      backoffLimit: 6\n"
        "      podFailurePolicy:\n"
        "        rules:\n"
        "          - action: FailJob\n"
        "            onExitCodes: {containerName: main, operator: In, values: [42]}\n"
    )
    world.write_spec("basic.yaml", spec(job=job))
    item = world.push(run_spec("pfp-1"))
    await world.script("launch-agent.io/run-id=pfp-1", 'exit code=42 after=1s log="bad shard"')
    async with world.running(world.agent(config(world, start_timeout_seconds=600))):
        message = await failure_of(world, item)
        [obj] = await jobs(world, "pfp-1")
        [pod] = await pods(world, "pfp-1")
    conditions = {c["type"]: c for c in obj["status"].get("conditions") or []}
    name = pod["metadata"]["name"]
    # The Job's own reason is explained by its pod, with the pod's log tail.
    head, _, tail = message.partition("\n\n")
    assert head == (
        f"Job {world.namespace}/basic-4 failed (ExitCode): container main in pod {name} exited"
        " with code 42"
    ), message
    assert "bad shard" in tail, message
    said = (
        f"Container main for pod {world.namespace}/{name} failed with exit code 42 matching"
        " FailJob rule at index 0"
    )
    for kind in ("FailureTarget", "Failed"):
        assert (conditions[kind]["reason"], conditions[kind]["message"]) == (
            "PodFailurePolicy",
            said,
        )
    # FailJob at the first failure: no retry despite backoffLimit 6.
    assert obj["status"]["failed"] == 1


async def test_backoff_limit_exceeded_after_every_retry(world: World) -> None:
    world.write_spec("basic.yaml", spec(job="      backoffLimit: 1\n"))
    item = world.push(run_spec("bo-1"))
    await world.script("launch-agent.io/run-id=bo-1", 'exit code=3 after=1s log="bad lr"')
    async with world.running(world.agent(config(world, start_timeout_seconds=600))):
        message = await failure_of(world, item, within=120)
        [obj] = await jobs(world, "bo-1")
    conditions = {c["type"]: c for c in obj["status"].get("conditions") or []}
    for kind in ("FailureTarget", "Failed"):
        assert (conditions[kind]["reason"], conditions[kind]["message"]) == (
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit",
        )
    assert obj["status"]["failed"] == 2
    head, _, tail = message.partition("\n\n")
    assert head.startswith(f"Job {world.namespace}/basic-4 failed (ExitCode): container main"), (
        message
    )
    assert head.endswith("exited with code 3"), message
    assert "bad lr" in tail, message
    events = {(e["reason"], e["message"]) for e in await world.events()}
    assert ("BackoffLimitExceeded", "Job has reached the specified backoff limit") in events


# --- the TTL-after-finished controller and the garbage collector ------------------------------


async def test_a_finished_job_is_deleted_by_its_ttl_and_its_pods_by_the_gc(world: World) -> None:
    world.write_spec(
        "basic.yaml", spec(job="      backoffLimit: 0\n      ttlSecondsAfterFinished: 2\n")
    )
    item = world.push(run_spec("ttl-1"))
    await world.script("launch-agent.io/run-id=ttl-1", "succeed after=1s")
    async with world.running(world.agent(config(world, start_timeout_seconds=600))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(lambda: pods(world, "ttl-1"), message="the pod")
        await until(lambda: agent.runs.get(item.id) is None, within=90, message="run released")

        async def gone() -> bool:
            return not await jobs(world, "ttl-1") and not await pods(world, "ttl-1")

        await until(gone, within=60, message="the Job deleted by its TTL, its pod by the GC")
    assert item.state is ItemState.CLAIMED and item.failure is None
    assert item.warnings == [], item.warnings
