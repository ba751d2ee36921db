"""`quota.mode: kueue` end to end: the agent, the sandbox's Kueue emulation and W&B.

Runs are created suspended with the LocalQueue label, Kueue admits them by ClusterQueue quota,
and what Kueue says reaches W&B as warnings on the item."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from launch_agent.adapters.kube import InformerSettings
from launch_agent.runtime.admission.kueue import KueueAdmission
from launch_agent.runtime.startup import StartupError
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.cluster.kueue import KueueController
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from launch_agent.tracking.kueue import KueueState
from tests.e2e.conftest import BASIC_SPEC, CRDS, Env, poll_rounds, run_spec, until

KUEUE_CRDS = (
    "kueue.x-k8s.io_workloads.yaml",
    "kueue.x-k8s.io_clusterqueues.yaml",
    "kueue.x-k8s.io_localqueues.yaml",
)
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_SPEC = BASIC_SPEC.replace(
    "  namespace: default\n", "  namespace: default\n  kueue:\n    queueName: lq\n"
)


async def install_kueue(env: Env, cpu: str | None = "1") -> None:
    env.cluster.kueue.enabled = True
    for name in KUEUE_CRDS:
        await env.kube.load_crd_file(CRDS / name)
    if cpu is None:
        return
    env.kube.objects.create(
        "clusterqueues.kueue.x-k8s.io",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": "cq"},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [
                            {
                                "name": "default-flavor",
                                "resources": [
                                    {"name": "cpu", "nominalQuota": cpu},
                                    {"name": "memory", "nominalQuota": "64Gi"},
                                ],
                            }
                        ],
                    }
                ],
            },
        },
    )
    env.kube.objects.create(
        "localqueues.kueue.x-k8s.io",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": "default"},
            "spec": {"clusterQueue": "cq"},
        },
    )


def job_of(env: Env, item: RunQueueItem) -> dict[str, Any]:
    [job] = [
        j
        for j in env.jobs()
        if j["metadata"]["annotations"]["launch-agent.io/run-queue-item-id"] == item.id
    ]
    return job


def warned(item: RunQueueItem, text: str) -> bool:
    return any(text in w.message for w in item.warnings)


async def test_runs_wait_for_kueue_and_start_when_quota_frees(env: Env) -> None:
    (env.specs_dir / "basic.yaml").write_text(KUEUE_SPEC)
    await install_kueue(env, cpu="1")
    env.cluster.script("launch-agent.io/run-id=k1", "succeed after=30s")
    env.cluster.script("launch-agent.io/run-id=k2", "succeed after=30s")
    items = env.push(run_spec("k1")), env.push(run_spec("k2"))
    admitted = "admitted by Kueue: LocalQueue default/lq (ClusterQueue cq)"
    async with env.running(env.agent(env.config(quota={"mode": "kueue"}))) as agent:
        assert isinstance(agent.admission, KueueAdmission)
        # The run tracker and Kueue's watch share the settings they were given; neither
        # rewires them (the tracker used to set its own label selector and transform on them).
        assert agent.informer_settings == InformerSettings(backoff_base=0.05, backoff_cap=0.5)
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items), message="both created"
        )
        for item in items:
            assert job_of(env, item)["metadata"]["labels"][QUEUE_LABEL] == "lq"
        # Both are popped in one round and created concurrently: Kueue admits whichever
        # Workload it saw first, and the other waits.
        first = await until(
            lambda: next((i for i in items if warned(i, admitted)), None),
            message="one admitted",
        )
        second = items[1] if first is items[0] else items[0]
        await until(
            lambda: warned(
                second,
                "waiting for Kueue: LocalQueue default/lq: couldn't assign flavors to pod set"
                " main: insufficient unused quota for cpu in flavor default-flavor, 1 more needed",
            ),
            message="second waits",
        )
        assert job_of(env, second)["spec"]["suspend"] is True
        assert not env.pods_of(second)
        assert job_of(env, first)["spec"]["suspend"] is False

        env.advance(31)  # the first run completes; Kueue releases its quota to the second
        await until(
            lambda: warned(second, "admitted by Kueue"), message="second admitted after the first"
        )
        await until(lambda: env.pods_of(second), message="second's pod")
        env.advance(31)
        await until(lambda: len(agent.runs) == 0, message="both finished")
    assert (first.state, second.state) == (ItemState.CLAIMED, ItemState.CLAIMED)
    assert first.failure is None and second.failure is None
    # One warning per distinct message: waiting once, admitted once.
    texts = [w.message for w in second.warnings]
    assert len(texts) == len(set(texts)) == 2, texts


async def test_missing_local_queue_is_reported_at_start_and_on_the_run(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    await install_kueue(env, cpu="4")
    item = env.push(run_spec("m1"))
    config = env.config(quota={"mode": "kueue", "kueue": {"default_local_queue": "team-lq"}})
    with caplog.at_level(logging.WARNING, logger="launch_agent.runtime.kueue_watch"):
        async with env.running(env.agent(config)):
            assert "Kueue LocalQueue default/team-lq does not exist" in caplog.text
            await until(lambda: item.state is ItemState.CLAIMED, message="created")
            # The spec names no LocalQueue: quota.kueue.default_local_queue is used.
            job = job_of(env, item)
            assert job["metadata"]["labels"][QUEUE_LABEL] == "team-lq"
            assert job["spec"]["suspend"] is True
            await until(
                lambda: warned(
                    item,
                    "Kueue cannot admit this run: LocalQueue team-lq doesn't exist. Create"
                    " LocalQueue team-lq in namespace default",
                ),
                message="inadmissible warning",
            )
            assert not env.pods_of(item)


async def test_at_most_max_pending_runs_wait_per_local_queue(env: Env) -> None:
    (env.specs_dir / "basic.yaml").write_text(KUEUE_SPEC)
    await install_kueue(env, cpu="1")
    for i in range(6):
        env.cluster.script(f"launch-agent.io/run-id=p{i}", "succeed after=30s")
    items = [env.push(run_spec(f"p{i}")) for i in range(6)]
    config = env.config(quota={"mode": "kueue", "max_pending_per_leaf": 2})

    def claimed() -> int:
        return sum(i.state is ItemState.CLAIMED for i in items)

    async with env.running(env.agent(config)) as agent:
        watch = agent.admission
        assert isinstance(watch, KueueAdmission)
        # One admitted (1 cpu of quota) and two waiting in the LocalQueue; three stay in W&B.
        await until(lambda: claimed() == 3, message="three created")
        await until(
            lambda: watch.watch.states.get(KueueState.PENDING) == 2, message="two pending in Kueue"
        )
        await poll_rounds(agent)
        assert claimed() == 3
        assert [i.pops for i in items[3:]] == [0, 0, 0]
        assert watch.waiting() == {("default", "lq"): 2}
        env.advance(31)  # one finishes, the next is admitted: room for one more waiting run
        await until(lambda: claimed() == 4, message="a fourth popped")
        await poll_rounds(agent)
        assert claimed() == 4


async def test_start_fails_when_kueue_is_not_installed(env: Env) -> None:
    (env.specs_dir / "basic.yaml").write_text(KUEUE_SPEC)
    with pytest.raises(StartupError, match=r"does not serve Kueue's Workload API.*install Kueue"):
        async with env.running(env.agent(env.config(quota={"mode": "kueue"}))):
            pass


def set_cpu_quota(env: Env, cpu: str) -> None:
    cq = env.kube.objects.get("clusterqueues.kueue.x-k8s.io", "cq", namespace="")
    flavor = cq["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["resources"][0]["nominalQuota"] = cpu
    env.kube.objects.patch("clusterqueues.kueue.x-k8s.io", "cq", {"spec": cq["spec"]}, namespace="")


async def test_an_evicted_run_waits_and_is_admitted_again(env: Env) -> None:
    (env.specs_dir / "basic.yaml").write_text(KUEUE_SPEC)
    await install_kueue(env, cpu="1")
    env.cluster.script("launch-agent.io/run-id=ev", "succeed after=300s")
    item = env.push(run_spec("ev"))
    async with env.running(env.agent(env.config(quota={"mode": "kueue"}))) as agent:
        await until(lambda: warned(item, "admitted by Kueue"), message="admitted")
        await until(lambda: env.pods_of(item), message="running")
        set_cpu_quota(env, "0")  # another tenant reclaims the quota; Kueue preempts the run
        [wl] = env.kube.objects.list("workloads.kueue.x-k8s.io", namespace="default")
        message = (
            "Preempted to accommodate a workload (UID: u-2) due to reclamation within the cohort"
        )
        KueueController.evict(Ctx(env.cluster.store, env.clock), wl, "InCohortReclamation", message)
        env.cluster.step()
        await until(
            lambda: warned(
                item,
                f"evicted by Kueue (InCohortReclamation: {message}); the run is suspended and"
                " waits in LocalQueue default/lq to be admitted again",
            ),
            message="eviction reported",
        )
        assert job_of(env, item)["spec"]["suspend"] is True
        assert item.state is ItemState.CLAIMED and item.failure is None
        assert isinstance(agent.admission, KueueAdmission)
        assert agent.admission.waiting() == {("default", "lq"): 1}
        set_cpu_quota(env, "1")
        await until(
            lambda: (
                [w.message for w in item.warnings].count(
                    "admitted by Kueue: LocalQueue default/lq (ClusterQueue cq)"
                )
                == 2
            ),
            message="admitted again",
        )
        await until(lambda: job_of(env, item)["spec"]["suspend"] is False, message="resumed")
        assert item.failure is None


async def test_a_restarted_agent_does_not_repeat_what_it_reported(env: Env) -> None:
    (env.specs_dir / "basic.yaml").write_text(KUEUE_SPEC)
    await install_kueue(env, cpu="1")
    for run in ("r1", "r2"):
        env.cluster.script(f"launch-agent.io/run-id={run}", "succeed after=300s")
    items = [env.push(run_spec("r1")), env.push(run_spec("r2"))]
    config = env.config(quota={"mode": "kueue", "max_pending_per_leaf": 1})
    async with env.running(env.agent(config)):
        await until(lambda: warned(items[0], "admitted by Kueue"), message="first admitted")
        await until(lambda: warned(items[1], "waiting for Kueue"), message="second waits")
    before = [len(i.warnings) for i in items]
    third = env.push(run_spec("r3"))
    async with env.running(env.agent(config)) as agent:
        assert isinstance(agent.admission, KueueAdmission)
        await until(lambda: len(agent.runs) == 2, message="adopted")
        await until(lambda: agent.admission.waiting() == {("default", "lq"): 1}, message="state")  # type: ignore[attr-defined]
        await poll_rounds(agent)
        assert [len(i.warnings) for i in items] == before
        # The adopted waiting run fills the LocalQueue's cap: the new item stays in W&B.
        assert third.state is ItemState.PENDING and third.pops == 0
