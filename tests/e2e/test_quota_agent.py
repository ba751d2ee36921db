"""`quota.mode: agent` end to end: the elastic quota tree holds, admits and reclaims real Jobs.

Two teams share a 4-CPU cluster: `a` (queue qa → leaf a.1) and `b` (queue qb → leaf b.1), each
guaranteed 2 CPU and allowed to borrow up to 4. Every run is a 1-CPU Job. The agent creates
each Job suspended, unsuspends it when the tree admits it, suspends it again when the other
team reclaims its guarantee, and W&B (the sandbox) hears why runs wait or were evicted.
"""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.quota import RunState
from launch_agent.quota.requests import ADMITTED, STAMP, QuotaStamp
from launch_agent.runtime.agent import Agent
from launch_agent.runtime.startup import StartupError
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, poll_rounds, run_spec, until

TREE: dict[str, Any] = {
    "root": {
        "name": "root",
        "min": {"cpu": 4},
        "max": {"cpu": 4},
        "children": [
            {
                "name": "a",
                "min": {"cpu": 2},
                "max": {"cpu": 4},
                "children": [{"name": "a.1", "min": {"cpu": 2}, "max": {"cpu": 4}}],
            },
            {
                "name": "b",
                "min": {"cpu": 2},
                "max": {"cpu": 4},
                "children": [{"name": "b.1", "min": {"cpu": 2}, "max": {"cpu": 4}}],
            },
        ],
    }
}

SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: team-{team}
spec:
  queues: [q{team}]
  namespace: default
  quota:
    leaf: {leaf}
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      template:
        spec:
          containers:
            - name: main
              image: ${{image_uri}}
              resources:
                requests: {{cpu: "{cpu}", memory: 1Gi}}
  overridable: [overrides.args]
"""


def setup(env: Env, leaves: dict[str, str], cpu: dict[str, int] | None = None) -> None:
    (env.specs_dir / "basic.yaml").unlink()
    for team, leaf in leaves.items():
        text = SPEC.format(team=team, leaf=leaf, cpu=(cpu or {}).get(team, 1))
        (env.specs_dir / f"team-{team}.yaml").write_text(text)
        env.state.add_queue(f"q{team}")


def quota_agent(env: Env, **overrides: Any) -> Agent:
    queues = overrides.pop("queues", ["qa", "qb"])
    quota = {"mode": "agent", "tree": TREE, "max_pending_per_leaf": 2, **overrides}
    return env.agent(env.config(queues=queues, quota=quota))


def job_of(env: Env, item: RunQueueItem) -> dict[str, Any] | None:
    for job in env.jobs():
        if job["metadata"]["annotations"].get("launch-agent.io/run-queue-item-id") == item.id:
            return job
    return None


def running(env: Env, item: RunQueueItem) -> bool:
    job = job_of(env, item)
    return job is not None and job["spec"].get("suspend") is False and bool(env.pods_of(item))


def suspended(env: Env, item: RunQueueItem) -> bool:
    job = job_of(env, item)
    return job is not None and job["spec"].get("suspend") is True and not env.pods_of(item)


def usage(agent: Agent) -> dict[str, dict[str, int]]:
    assert agent.quota is not None
    engine = agent.quota.engine
    return {node: engine.usage(node) for node in ("root", "a", "a.1", "b", "b.1")}


def pending(agent: Agent) -> list[str]:
    assert agent.quota is not None
    engine = agent.quota.engine
    return sorted(r.id for r in engine.runs.values() if r.state is RunState.PENDING)


CPU = 10**9
WAITING_ROOT = "waiting for quota: root uses 4/4 cpu"  # one CPU in the engine's nanounits


async def test_hold_admit_reclaim_readmit_and_restart(env: Env) -> None:
    setup(env, {"a": "a.1", "b": "b.1"})
    a = [env.push(run_spec(f"a{i}"), "qa") for i in range(7)]
    env.cluster.script("launch-agent.io/queue=qa", "succeed after=1000s")
    env.cluster.script("launch-agent.io/queue=qb", "succeed after=30s")
    async with env.running(quota_agent(env)) as agent:
        # a.1 borrows b's idle guarantee up to its max 4; two more wait suspended.
        await until(lambda: all(running(env, i) for i in a[:4]), message="a0-a3 admitted")
        await until(lambda: all(suspended(env, i) for i in a[4:6]), message="a4, a5 held")
        for item in a[4:6]:
            await until(lambda i=item: i.warnings, message="waiting warning")  # type: ignore[misc]
            assert item.warnings[0].message == "waiting for quota: a.1 uses 4/4 cpu"
        await poll_rounds(agent)
        assert a[6].pops == 0, "never more than max_pending_per_leaf pending runs per leaf"
        assert a[6].state is ItemState.PENDING
        assert usage(agent)["a.1"] == {"cpu": 4 * CPU}

        # Team b takes its guarantee back: the two newest runs of a.1 are suspended again.
        b = [env.push(run_spec(f"b{i}"), "qb") for i in range(2)]
        await until(lambda: all(running(env, i) for i in b), message="b0, b1 admitted")
        await until(lambda: all(suspended(env, i) for i in a[2:4]), message="a2, a3 evicted")
        assert all(running(env, i) for i in a[:2])
        for victim in a[2:4]:
            await until(
                lambda v=victim: any(w.message == WAITING_ROOT for w in v.warnings),  # type: ignore[misc]
                message="waiting warning after the eviction",
            )
            messages = [w.message for w in victim.warnings]
            assert any(
                m.startswith("evicted by the quota tree: reclaimed by run b")
                and "of queue 'qb'" in m
                for m in messages
            ), messages
        assert usage(agent)["a.1"] == {"cpu": 2 * CPU}
        assert usage(agent)["b.1"] == {"cpu": 2 * CPU}
        # The evicted runs keep their original enqueue time: they come back before a4, a5.
        stamps = [QuotaStamp.load(job_of(env, i)["metadata"]["annotations"][STAMP]) for i in a[:6]]  # type: ignore[index]
        assert [s.enqueued for s in stamps] == sorted(s.enqueued for s in stamps)

        # b's runs finish: a2, a3 (not a4, a5) are admitted again.
        env.advance(40)
        await until(lambda: all(running(env, i) for i in a[:4]), message="a2, a3 re-admitted")
        assert all(suspended(env, i) for i in a[4:6])
        await until(lambda: all(i.state is ItemState.CLAIMED for i in b), message="b acked")
        before = usage(agent)
        assert before["a.1"] == {"cpu": 4 * CPU} and before["b.1"] == {}
        pending_before = pending(agent)
        admitted_at = {i.id: job_of(env, i)["metadata"]["annotations"][ADMITTED] for i in a[:4]}  # type: ignore[index]

    # A new agent on the same cluster rebuilds the same usage and the same waiting runs.
    async with env.running(quota_agent(env)) as again:
        assert again.quota is not None
        assert usage(again) == before
        assert pending(again) == pending_before == sorted(i.id for i in a[4:6])
        await poll_rounds(again)
        assert all(running(env, i) for i in a[:4]) and all(suspended(env, i) for i in a[4:6])
        assert a[6].pops == 0
        assert (
            {
                i.id: job_of(env, i)["metadata"]["annotations"][ADMITTED]  # type: ignore[index]
                for i in a[:4]
            }
            == admitted_at
        ), "admission times are kept across the restart"


async def test_refused_runs_and_a_bad_tree(env: Env) -> None:
    setup(env, {"a": "a.1", "c": "zz", "g": "b.1"}, cpu={"g": 5})
    item = env.push(run_spec("c0"), "qc")
    big = env.push(run_spec("g0"), "qg")
    async with env.running(quota_agent(env, queues=["qa", "qc", "qg"])) as agent:
        await until(lambda: item.state is ItemState.FAILED, message="item failed")
        await until(lambda: big.state is ItemState.FAILED, message="too big failed")
        await until(lambda: job_of(env, big) is None, message="too big deleted")
        await until(lambda: len(agent.runs) == 0, message="no run left")
        assert agent.quota is not None and not agent.quota.engine.runs
    assert big.failure is not None
    assert big.failure.message == (
        "the run can never start under the quota tree: requests 5 cpu, more than the max 4 of b.1"
    )
    assert item.failure is not None
    assert "queue spec 'team-c' (team-c.yaml)" in item.failure.message
    assert "spec.quota.leaf: 'zz' is not a leaf of quota.tree (leaves: a.1, b.1)" in (
        item.failure.message
    )
    assert job_of(env, item) is None

    bad = {"root": {**TREE["root"], "min": {"cpu": 3}}}
    config = env.config(queues=["qa"], quota={"mode": "agent", "tree": bad})
    with pytest.raises(StartupError) as caught:
        async with env.running(env.agent(config)):
            pass
    message = str(caught.value)
    assert "quota.tree.root.min.cpu" in message, message
    assert "'root'" in message and "4" in message, message


async def test_a_run_never_ready_is_evicted_backs_off_and_fails(env: Env) -> None:
    setup(env, {"a": "a.1", "b": "b.1"})
    env.cluster.script("launch-agent.io/queue=qa", "succeed start=1000s")
    item = env.push(run_spec("slow"), "qa")
    timers = {"readyTimeout": "10s", "backoffBase": "1s", "backoffLimit": 1}
    tree = {**TREE, **timers}
    config = env.config(queues=["qa", "qb"], quota={"mode": "agent", "tree": tree})
    async with env.running(env.agent(config)) as agent:
        await until(lambda: job_of(env, item) and env.pods_of(item), message="admitted")
        await until(
            lambda: any(
                w.message.startswith("evicted by the quota tree: PodsReadyTimeout: retry 1")
                for w in item.warnings
            ),
            advance=lambda: env.advance(1),
            message="evicted after the readiness timeout",
        )
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(1),
            message="failed after the backoff limit",
        )
        await until(lambda: job_of(env, item) is None, message="deleted")
        assert agent.quota is not None and not agent.quota.engine.runs
    assert item.failure is not None
    assert item.failure.message == (
        "the quota tree gave up on the run: PodsReadyTimeout: not ready after 2 attempts, giving up"
    )
