"""Failures a real cluster shows only in Events, end to end on the sandbox.

The sandbox's API server refuses pods as kube-apiserver does (a ResourceQuota object in the
namespace, a missing ServiceAccount, a namespace labelled `pod-security.kubernetes.io/enforce`),
and its Job controller leaves only a `FailedCreate` Warning Event on the Job. Before the Events
informer and the start deadline, such a run stayed "starting" forever and held its `max_jobs`
slot. Each test asserts the W&B state and the upstream words in the message ("exceeded quota",
`serviceaccount "x" not found`), never our enum names.
"""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model.run_state import RunState
from launch_agent.render.naming import label_value
from launch_agent.runtime.agent import Agent
from launch_agent.sandbox.cluster.jobs import JobController
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import BASIC_SPEC, Env, poll_rounds, run_spec, until
from tests.e2e.test_quota_agent import TREE, quota_agent, running, setup

START_TIMEOUT = 120.0


def failed_creates(env: Env) -> list[dict[str, Any]]:
    return [
        e
        for e in env.kube.objects.list("events", "default")
        if e["reason"] == "FailedCreate" and e["type"] == "Warning"
    ]


def config(env: Env, **tracking: Any) -> Any:
    return env.config(
        max_jobs=1,
        tracking={
            "stop_check_seconds": 0.1,
            "unschedulable_timeout_seconds": 120,
            "start_timeout_seconds": START_TIMEOUT,
            **tracking,
        },
    )


async def fails_at_start_deadline(env: Env, agent: Agent, item: RunQueueItem) -> str:
    """Let the refusal reach the agent, pass the start deadline, return W&B's failure text."""
    await until(lambda: item.state is ItemState.CLAIMED, message="ack")
    await until(lambda: failed_creates(env), message="the Job controller's FailedCreate")
    assert agent.tracker is not None
    tracker = agent.tracker
    await until(lambda: tracker.events.of(item.id), message="the Event reached the agent")
    assert item.state is ItemState.CLAIMED, "a refused create is not a failure before the deadline"
    env.advance(START_TIMEOUT + 1)
    await until(lambda: item.state is ItemState.FAILED, message="failed at the start deadline")
    assert item.failure is not None
    assert item.failure.stage == "run"
    await until(lambda: not jobs_of(env, item), message="the Job is deleted (frees max_jobs)")
    return item.failure.message


async def failure_text(item: RunQueueItem) -> str:
    await until(lambda: item.state is ItemState.FAILED, message="failed at the deadline")
    assert item.failure is not None
    assert item.failure.stage == "run"
    return item.failure.message


def jobs_of(env: Env, item: RunQueueItem) -> list[dict[str, Any]]:
    selector = f"launch-agent.io/run-queue-item={label_value(item.id)}"
    return env.kube.objects.list("jobs", namespace="default", label_selector=selector)


async def test_resource_quota_exceeded_fails_the_run_naming_the_quota(env: Env) -> None:
    env.kube.objects.create(
        "resourcequotas",
        {"metadata": {"name": "team-quota"}, "spec": {"hard": {"requests.cpu": "500m"}}},
    )
    first = env.push(run_spec("q1"))
    second = env.push(run_spec("q2"))
    async with env.running(env.agent(config(env))) as agent:
        message = await fails_at_start_deadline(env, agent, first)
        assert "exceeded quota: team-quota" in message, message
        assert "requested: requests.cpu=1, used: requests.cpu=0, limited: requests.cpu=500m" in (
            message
        )
        assert "did not start" in message
        # The slot is free again: the next run is popped (and refused the same way).
        await until(lambda: second.state is ItemState.CLAIMED, message="next run popped")


async def test_missing_service_account_fails_the_run_with_the_admission_error(
    env: Env,
) -> None:
    spec = BASIC_SPEC.replace(
        "  defaults:\n", "  security:\n    serviceAccountName: trainer\n  defaults:\n"
    )
    (env.specs_dir / "basic.yaml").write_text(spec)
    item = env.push(run_spec("sa1"))
    async with env.running(env.agent(config(env))) as agent:
        message = await fails_at_start_deadline(env, agent, item)
        assert (
            "error looking up service account default/trainer:"
            ' serviceaccount "trainer" not found' in message
        ), message


async def test_service_account_that_exists_runs(env: Env) -> None:
    """The same spec with the account in place: admission passes and the run succeeds."""
    spec = BASIC_SPEC.replace(
        "  defaults:\n", "  security:\n    serviceAccountName: trainer\n  defaults:\n"
    )
    (env.specs_dir / "basic.yaml").write_text(spec)
    env.kube.objects.create("serviceaccounts", {"metadata": {"name": "trainer"}})
    item = env.push(run_spec("sa2"))
    async with env.running(env.agent(config(env))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        await until(lambda: env.pods_of(item), message="pod created")
        env.advance(10)
        await until(lambda: agent.runs.get(item.id) is None, message="run finished")
        assert item.failure is None
        assert failed_creates(env) == []


async def test_restricted_namespace_admits_the_agents_pods(env: Env) -> None:
    """PodSecurity `restricted` refuses what the agent does not set; the agent sets it all."""
    env.kube.objects.patch(
        "namespaces",
        "default",
        {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "restricted"}}},
        namespace="",
    )
    item = env.push(run_spec("ps1"))
    async with env.running(env.agent(config(env))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        await until(lambda: env.pods_of(item), message="pod admitted")
        env.advance(10)
        await until(lambda: agent.runs.get(item.id) is None, message="run finished")
        assert item.failure is None


SECRET_VOLUME_SPEC = BASIC_SPEC.replace(
    """              resources:
                requests: {cpu: "1", memory: 1Gi}
""",
    """              resources:
                requests: {cpu: "1", memory: 1Gi}
              volumeMounts:
                - {name: creds, mountPath: /etc/creds, readOnly: true}
          volumes:
            - name: creds
              secret: {secretName: wandb-creds}
""",
)


async def test_missing_secret_volume_fails_at_the_start_deadline_with_failed_mount(
    env: Env,
) -> None:
    assert "wandb-creds" in SECRET_VOLUME_SPEC
    (env.specs_dir / "basic.yaml").write_text(SECRET_VOLUME_SPEC)
    item = env.push(run_spec("m1"))
    async with env.running(env.agent(config(env))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        await until(lambda: env.pods_of(item), message="pod created")
        env.advance(5)
        assert agent.tracker is not None
        tracker = agent.tracker
        await until(lambda: tracker.events.of(item.id), message="FailedMount reached the agent")
        assert item.failure is None, "FailedMount is not a failure before the deadline"
        env.advance(START_TIMEOUT)
        message = await failure_text(item)
        assert (
            'MountVolume.SetUp failed for volume "creds" : secret "wandb-creds" not found'
            in message
        ), message
        await until(lambda: not jobs_of(env, item), message="the Job is deleted")


async def test_secret_volume_created_late_lets_the_run_start(env: Env) -> None:
    """FailedMount is transient: once the Secret exists the pod starts and the run succeeds."""
    (env.specs_dir / "basic.yaml").write_text(SECRET_VOLUME_SPEC)
    item = env.push(run_spec("m2"))
    async with env.running(env.agent(config(env))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        await until(lambda: env.pods_of(item), message="pod created")
        env.advance(5)
        env.kube.objects.create("secrets", {"metadata": {"name": "wandb-creds"}, "data": {}})
        env.advance(30)
        await until(lambda: agent.runs.get(item.id) is None, message="run finished")
        assert item.failure is None


async def test_suspending_a_running_job_posts_no_sigterm_warning(env: Env) -> None:
    """What Kueue (or the agent's quota) does to a running Job: `spec.suspend: true`.

    The Job controller deletes the pods; each is deleted gracefully, its container gets
    SIGTERM and exits 143 before the pod goes. That exit is the suspension, not the run's
    fault: nothing reaches W&B, and the run goes on once resumed.
    """
    env.cluster.script("launch-agent.io/run-id=su1", "succeed after=60s")
    item = env.push(run_spec("su1"))
    async with env.running(env.agent(config(env))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        await until(lambda: env.pods_of(item), message="pod running")
        [job] = jobs_of(env, item)
        env.kube.objects.patch("jobs", job["metadata"]["name"], {"spec": {"suspend": True}})
        env.advance(0.5)
        # Graceful deletion: the pod is still there, terminating, while its container stops.
        [pod] = env.pods_of(item)
        assert pod["metadata"]["deletionTimestamp"]
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 30
        env.advance(1)
        await until(lambda: not env.pods_of(item), message="pod gone after SIGTERM")
        record = agent.runs.get(item.id)
        assert record is not None
        await until(lambda: record.state is RunState.QUEUED, message="queued while suspended")
        env.kube.objects.patch("jobs", job["metadata"]["name"], {"spec": {"suspend": False}})
        env.advance(70)
        await until(lambda: agent.runs.get(item.id) is None, message="finished after resume")
        assert item.failure is None
        assert not [w for w in item.warnings if "143" in w.message], item.warnings


async def test_quota_is_released_only_once_the_evicted_pods_are_gone(env: Env) -> None:
    """`quota.mode: agent` with `instantTermination: false` reclaims CPUs by suspending two
    runs; their pods take 20 s to stop after SIGTERM and hold their CPUs until then. The
    reclaiming runs are admitted only then, as the nodes' resources are really free only then
    (before, the Job's `Suspended` condition counted as termination)."""
    setup(env, {"a": "a.1", "b": "b.1"})
    a = [env.push(run_spec(f"a{i}"), "qa") for i in range(4)]
    env.cluster.script("launch-agent.io/queue=qa", "succeed after=1000s stop=20s")
    tree = {**TREE, "instantTermination": False}
    async with env.running(quota_agent(env, tree=tree)) as agent:
        await until(lambda: all(running(env, i) for i in a), message="a0-a3 admitted")
        env.advance(5)  # the containers run
        b = [env.push(run_spec(f"b{i}"), "qb") for i in range(2)]

        def terminating() -> list[dict[str, Any]]:
            return [p for i in a for p in env.pods_of(i) if p["metadata"].get("deletionTimestamp")]

        await until(lambda: len(terminating()) >= 2, message="runs of a evicted")
        await poll_rounds(agent)
        victims = [
            i for i in a if any(p["metadata"].get("deletionTimestamp") for p in env.pods_of(i))
        ]
        for victim in victims:
            record = agent.runs.get(victim.id)
            assert record is not None
            await until(lambda r=record: r.state is RunState.QUEUED, message="victim queued")  # type: ignore[misc]
        await poll_rounds(agent)
        assert not any(running(env, i) for i in b), "b admitted while a's pods still hold the CPUs"
        env.advance(21)
        await until(lambda: not terminating(), message="the evicted pods stopped")
        await until(
            lambda: all(running(env, i) for i in b), message="b admitted once they are gone"
        )
        assert not [w for i in victims for w in i.warnings if "143" in w.message]


@pytest.mark.parametrize("version", ["1.30", "1.31"])
async def test_job_deadline_is_reported_the_same_on_both_job_controllers(
    env: Env, version: str
) -> None:
    """1.31+ marks `FailureTarget` first and `Failed` only once the SIGTERMed pod is gone (it
    exits 143 in between); 1.30 marks `Failed` at once. Either way W&B hears "deadline", not
    the 143 and not a start deadline."""
    env.cluster.jobs = JobController(version=version)
    env.cluster.script("launch-agent.io/run-id=dl", "succeed after=2h stop=5s")
    item = env.push(run_spec("dl"))
    async with env.running(env.agent(config(env))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        record = agent.runs.get(item.id)
        assert record is not None
        await until(lambda: record.state is RunState.RUNNING, message="running")
        env.advance(3596)  # past the deadline (3600 s after creation), inside the 5 s stop
        [job] = jobs_of(env, item)
        types = {c["type"] for c in job["status"].get("conditions") or []}
        if version == "1.31":
            assert "FailureTarget" in types and "Failed" not in types, types
        else:
            assert "Failed" in types, types
        env.advance(10)
        message = await failure_text(item)
        assert "deadline" in message.lower(), message
        assert "143" not in message and "did not start" not in message, message
        assert not [w for w in item.warnings if "143" in w.message], item.warnings
        [job] = jobs_of(env, item)
        failed = next(c for c in job["status"]["conditions"] if c["type"] == "Failed")
        assert failed["reason"] == "DeadlineExceeded"


async def test_limit_range_refusal_fails_the_run_with_the_limit_rangers_words(env: Env) -> None:
    env.kube.objects.create(
        "limitranges",
        {
            "metadata": {"name": "small-containers"},
            "spec": {"limits": [{"type": "Container", "max": {"memory": "512Mi"}}]},
        },
    )
    item = env.push(run_spec("lr1"))
    async with env.running(env.agent(config(env))) as agent:
        message = await fails_at_start_deadline(env, agent, item)
        assert "maximum memory usage per Container is 512Mi" in message, message
