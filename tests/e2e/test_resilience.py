"""Outages and storms: the agent pauses, retries and catches up; no run is lost or doubled.

- A W&B outage (every request answers 503) while a run fails and new items wait: the process
  stays up, `/readyz` turns 503, and afterwards the failure is reported and the new items run.
  The outage lasts 40 idle poll intervals and several client retry budgets; the agent has no
  timer tied to the outage's absolute length, so a minute-long outage takes the same path.
- A Kubernetes 5xx/429 storm on every route, watches included.
- Dropped watches and forced 410s (compaction) while runs end: no terminal state is missed.
"""

from __future__ import annotations

import asyncio

import aiohttp

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until


async def _ready(port: int) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/readyz") as response,
    ):
        return response.status


async def test_wandb_outage_pauses_and_catches_up(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=o1", 'oomkilled after=10s log="big batch"')
    first = env.push(run_spec("o1"))
    async with env.running() as agent:
        await until(lambda: first.state is ItemState.CLAIMED, message="ack")
        assert agent.health_port is not None
        assert await _ready(agent.health_port) == 200
        env.wandb.faults.outage(4.0, status=503)
        env.advance(20)  # the run fails while W&B is down
        second = env.push(run_spec("o2"))
        await asyncio.sleep(1.5)
        assert await _ready(agent.health_port) == 503
        assert first.state is ItemState.CLAIMED, "nothing reaches W&B during the outage"
        await until(lambda: first.state is ItemState.FAILED, within=20, message="late report")
        assert first.failure is not None
        assert "OOMKilled" in first.failure.message
        await until(lambda: second.state is ItemState.CLAIMED, within=20, message="resumed")
        assert await _ready(agent.health_port) == 200
    assert len(env.jobs()) == 2


async def test_kubernetes_5xx_and_429_storm(env: Env) -> None:
    env.kube.faults.add(FaultRule("*", status=503, rate=0.25))
    env.kube.faults.add(FaultRule("*", status=429, rate=0.15))
    items = [env.push(run_spec(f"s{i}")) for i in range(5)]
    async with env.running() as agent:
        for item in items:
            await until(lambda i=item: i.state is ItemState.CLAIMED, within=60, message="claimed")  # type: ignore[misc]
        env.kube.faults.clear()
        env.advance(10)
        await until(lambda: len(agent.runs) == 0, within=30, message="all finished")
    jobs = env.jobs()
    assert len(jobs) == 5, "exactly one Job per item"
    assert all(i.failure is None for i in items)
    assert env.kube.faults.rules == []


async def test_dropped_watches_and_410s_miss_no_terminal_state(env: Env) -> None:
    codes = [3, 4, 5, 6]
    items = []
    for code in codes:
        env.cluster.script(f"launch-agent.io/run-id=w{code}", f"exit code={code} after={code}s")
        items.append(env.push(run_spec(f"w{code}")))
    async with env.running() as agent:
        for item in items:
            await until(lambda i=item: i.state is ItemState.CLAIMED, message="claimed")  # type: ignore[misc]
        for step in range(8):
            if step % 2:
                env.kube.compact()
            env.kube.drop_watches()
            env.advance(1)
            await asyncio.sleep(0.1)
        for item in items:
            await until(lambda i=item: i.state is ItemState.FAILED, within=20, message="reported")  # type: ignore[misc]
        for code, item in zip(codes, items, strict=True):
            assert item.failure is not None
            assert f"exited with code {code}" in item.failure.message
        restarts = agent.metrics.registry.get_sample_value(
            "launch_agent_watch_restarts_total",
            {"kind": "Job", "namespace": "default", "cause": "gone"},
        )
        assert agent.tracker is not None
        relists = sum(i.stats.lists for i in agent.tracker.informers.informers.values())
        assert relists > 2 or (restarts or 0) > 0
