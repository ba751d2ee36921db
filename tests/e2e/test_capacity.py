"""Capacity (`max_jobs`), several agents on one queue, warnings once per run, health and metrics."""

from __future__ import annotations

import asyncio

import aiohttp

from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, poll_rounds, run_spec, until


async def test_max_jobs_pops_only_what_can_start(env: Env) -> None:
    for i in range(3):
        env.cluster.script(f"launch-agent.io/run-id=m{i}", "succeed after=30s")
    items = [env.push(run_spec(f"m{i}")) for i in range(3)]
    async with env.running(env.agent(env.config(max_jobs=1))) as agent:
        await until(lambda: items[0].state is ItemState.CLAIMED, message="first claimed")
        await poll_rounds(agent)
        assert [i.state for i in items[1:]] == [ItemState.PENDING, ItemState.PENDING]
        assert items[1].pops == 0, "the agent never pops what it cannot start"
        env.advance(40)
        await until(lambda: items[1].state is ItemState.CLAIMED, message="second after first")
        assert items[2].state is ItemState.PENDING
        env.advance(40)
        await until(lambda: items[2].state is ItemState.CLAIMED, message="third")
        env.advance(40)
        await until(lambda: len(agent.runs) == 0, message="all done")
    assert len(env.jobs()) == 3


async def test_two_agents_on_one_queue_never_start_an_item_twice(env: Env) -> None:
    items = [env.push(run_spec(f"t{i}")) for i in range(12)]
    one = env.agent(env.config(agent_name="agent-one"))
    two = env.agent(env.config(agent_name="agent-two"))
    async with env.running(one), env.running(two):
        for item in items:
            await until(lambda i=item: i.state is ItemState.CLAIMED, message="claimed")  # type: ignore[misc]
    jobs = env.jobs()
    assert len(jobs) == len(items)
    assert (
        len({j["metadata"]["annotations"]["launch-agent.io/run-queue-item-id"] for j in jobs}) == 12
    )
    assert all(i.pops == 1 for i in items)


async def test_a_warning_is_reported_once_per_run(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=cl", "crashloop code=2 after=1s")
    item = env.push(run_spec("cl"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        for _ in range(6):
            env.advance(40)
            await asyncio.sleep(0.1)
        await until(lambda: item.warnings, message="warning")
        await asyncio.sleep(0.5)
        messages = [w.message for w in item.warnings]
        assert len(messages) == len(set(messages)), messages
        assert any("CrashLoopBackOff" in m or "crash" in m.lower() for m in messages), messages
        assert all(w.stage == "run" for w in item.warnings)


async def test_health_readiness_and_metrics(env: Env) -> None:
    item = env.push(run_spec("h1"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        base = f"http://127.0.0.1:{agent.health_port}"
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{base}/healthz") as response:
                assert response.status == 200
            async with session.get(f"{base}/readyz") as response:
                assert response.status == 200, await response.text()
            async with session.get(f"{base}/metrics") as response:
                text = await response.text()
        assert 'launch_agent_pops_total{queue="q1"} 1.0' in text
        assert 'launch_agent_submits_total{kind="Job",outcome="created",queue="q1"} 1.0' in text
        assert "launch_agent_pop_to_create_seconds_count 1.0" in text
        assert (
            'launch_agent_api_request_seconds_count{api="wandb",operation="ackRunQueueItem"}'
            in text
        )


async def test_a_deep_queue_drains_in_few_requests_and_an_idle_one_costs_one_pop(
    env: Env,
) -> None:
    items = [env.push(run_spec(f"deep{i}")) for i in range(40)]
    env.wandb.log.reset()
    async with env.running(
        env.agent(
            env.config(
                poll={
                    "active_interval_seconds": 0.02,
                    "idle_interval_seconds": 0.1,
                    "max_pops_per_queue": 8,
                }
            )
        )
    ) as agent:
        await until(lambda: all(i.state is ItemState.CLAIMED for i in items), message="all acked")
        requests = env.wandb.log.count("popFromRunQueue")
        pops = env.wandb.log.count("field:popFromRunQueue")
        # 1, 2, 4, 8, 8, 8, 8, 8 pops per request drain 40 items in 8 requests (plus the empty
        # rounds that follow); one pop per request would have needed 40.
        assert requests <= 12, (requests, pops)
        env.wandb.log.reset()
        await poll_rounds(agent, 3)
        idle_requests = env.wandb.log.count("popFromRunQueue")
        idle_pops = env.wandb.log.count("field:popFromRunQueue")
        assert idle_requests >= 1
        assert idle_pops == idle_requests, "an empty queue is popped once per round"
    assert len(env.jobs()) == 40
