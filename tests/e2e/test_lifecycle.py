"""Stop from the W&B UI, 409 adoption, restart adoption, preemption requeue, stopPolling."""

from __future__ import annotations

import asyncio
import heapq

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, poll_rounds, run_spec, until


async def test_stop_from_the_ui_deletes_the_workload_and_its_pods(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=s1", "succeed after=1h")
    item = env.push(run_spec("s1"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        await until(lambda: env.pods_of(item), message="pod running")
        env.state.stop_run("ent", "proj", "s1")
        await until(lambda: not env.jobs(), message="Job deleted")
        env.advance(1)
        await until(lambda: not env.pods_of(item), message="pods deleted (Background)")
        await until(lambda: agent.runs.get(item.id) is None, message="record released")
        assert item.state is ItemState.CLAIMED, "a stop asked for by W&B is not a failure"
        assert item.failure is None


async def test_a_workload_that_already_exists_is_adopted_not_duplicated(env: Env) -> None:
    """A crash after create and before ack: the next pop's create answers 409 and adopts."""
    item = env.push(run_spec("a1"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="first ack")
        job = env.jobs()[0]
        await until(lambda: agent.runs.get(item.id) is not None)
    # Simulate the lost ack: W&B offers the item again (its lease lapsed without a claim).
    item.state = ItemState.PENDING
    item.launch_agent_id = None
    queue = item.queue
    heapq.heappush(queue.pending, queue.sort_key(item))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="second ack")
        labels = {"queue": "q1", "kind": "Job", "outcome": "adopted"}
        assert agent.metrics.registry.get_sample_value("launch_agent_submits_total", labels) == 1
        jobs = env.jobs()
        assert [j["metadata"]["uid"] for j in jobs] == [job["metadata"]["uid"]]
        assert item.associated_run_id == "a1"


async def test_restart_adopts_running_workloads_and_reports_their_end(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=r1", 'exit code=2 after=60s log="boom"')
    item = env.push(run_spec("r1"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
    # The agent is gone; the run goes on and fails while nobody watches.
    env.advance(120)
    assert item.state is ItemState.CLAIMED
    async with env.running() as agent:
        await until(
            lambda: item.state is ItemState.FAILED, message="failure reported after restart"
        )
        assert item.failure is not None
        assert "exited with code 2" in item.failure.message
        assert "boom" in item.failure.message
        await until(lambda: agent.runs.get(item.id) is None)
    # A third start finds the Job marked as reported and does not report it again.
    reports = len(item.history)
    async with env.running() as agent:
        await poll_rounds(agent)
        assert agent.runs.get(item.id) is None
        assert len(item.history) == reports
    assert len(env.jobs()) == 1


async def test_preempted_run_is_requeued_with_the_same_run_id(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=p1", "preempted after=10s; succeed after=5s")
    item = env.push(run_spec("p1"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(30)

        def requeued() -> list[RunQueueItem]:
            return [i for i in env.state.items.values() if i.id != item.id]

        again = await until(requeued, message="requeued item")
        assert again[0].run_spec["_resume_count"] == 1
        assert again[0].run_spec["run_id"] == "p1"
        await until(lambda: again[0].state is ItemState.CLAIMED, message="requeued item claimed")
        assert item.failure is None
        env.advance(30)
        names = {j["metadata"]["name"] for j in env.jobs()}
        assert len(names) == 2, names


async def test_preemption_beyond_max_requeues_fails_the_item(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=p2", "preempted after=10s")
    item = env.push(run_spec("p2", _resume_count=2))
    config = env.config(tracking={"max_requeues": 2, "stop_check_seconds": 0.1})
    async with env.running(env.agent(config)):
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(30)
        await until(lambda: item.state is ItemState.FAILED, message="failed")
        assert item.failure is not None
        assert "preempted" in item.failure.message
        assert "tracking.max_requeues" in item.failure.message
        assert len(env.state.items) == 1


async def test_stop_polling_from_wandb_stops_the_agent(env: Env) -> None:
    agent = env.agent()
    task = asyncio.create_task(agent.run(), name="agent-under-test")
    await asyncio.wait_for(agent.ready.wait(), 20)
    assert agent.agent_id is not None
    env.state.set_stop_polling(agent.agent_id)
    await asyncio.wait_for(task, 20)
    assert env.state.agents[agent.agent_id].status == "KILLED"


async def test_least_privilege_rbac_no_patch_and_an_existing_secret(env: Env) -> None:
    """The Helm chart's Role: Secret `get` by name only, no `patch` on Jobs."""
    env.kube.objects.create(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "wandb-api-key-test-agent"},
            "data": {"password": "a2V5"},
        },
    )
    env.kube.faults.add(FaultRule("POST secrets", status=403))
    env.kube.faults.add(FaultRule("PATCH jobs", status=403))
    env.cluster.script("launch-agent.io/run-id=rb", 'exit code=7 after=2s log="rbac run"')
    item = env.push(run_spec("rb"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(10)
        await until(lambda: item.state is ItemState.FAILED, message="failed")
        assert item.failure is not None
        assert "exited with code 7" in item.failure.message
        assert "rbac run" in item.failure.message
        await until(lambda: not env.jobs(), message="reported Job deleted instead of annotated")
        await until(lambda: agent.runs.get(item.id) is None)
    assert env.kube.log.count("POST secrets") == 0
