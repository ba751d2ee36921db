"""The agent's core path: start-up, one run created exactly once, acked, tracked to its end."""

from __future__ import annotations

from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until


async def test_success_creates_one_job_acks_and_reports_nothing(env: Env) -> None:
    item = env.push(run_spec("ok1"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        assert item.associated_run_id == "ok1"
        jobs = env.jobs()
        assert len(jobs) == 1
        job = jobs[0]
        assert job["metadata"]["labels"]["launch-agent.io/agent"] == "test-agent"
        assert job["metadata"]["annotations"]["launch-agent.io/run-queue-item-id"] == item.id
        env.advance(10)
        await until(lambda: agent.runs.get(item.id) is None, message="run finished")
        assert item.state is ItemState.CLAIMED
        assert item.failure is None
        assert env.state.agents[agent.agent_id].status != "KILLED"  # type: ignore[index]
    assert env.state.agents[agent.agent_id].status == "KILLED"  # type: ignore[index]
