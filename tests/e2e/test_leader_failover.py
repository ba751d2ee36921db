"""Two agent processes, one Lease: SIGKILL the leader, the standby takes over, nothing is lost or
duplicated (every item claimed exactly once, one workload each).

The processes are real (`launch-agent run`, as in test_process.py); the sandbox W&B and API
servers run in the test.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, run_spec, until
from tests.e2e.test_process import START_TIMEOUT, agent_process, write_config

LEASE_SECONDS = 3.0
RETRY_SECONDS = 0.25
ELECTION = {
    "enabled": True,
    "namespace": "default",
    "lease_name": "ha-agent",
    "lease_duration_seconds": LEASE_SECONDS,
    "renew_deadline_seconds": 2.0,
    "retry_period_seconds": RETRY_SECONDS,
}
# client-go's takeover bound: the lease duration after the standby last saw the record change,
# which it sees one jittered retry period late at most, plus one more jittered try.
TAKEOVER_BOUND = LEASE_SECONDS + 2 * 2.2 * RETRY_SECONDS


def holder(env: Env) -> str:
    leases = env.kube.objects.list("leases", namespace="default")
    return str(leases[0]["spec"].get("holderIdentity") or "") if leases else ""


def claims(item: RunQueueItem) -> int:
    return sum(1 for _, state in item.history if state is ItemState.CLAIMED)


def jobs_of(env: Env, run: str) -> list[dict[str, Any]]:
    return env.kube.objects.list(
        "jobs", namespace="default", label_selector=f"launch-agent.io/run-id={run}"
    )


async def test_sigkill_of_the_leader_hands_over_within_the_lease_and_loses_nothing(
    env: Env, tmp_path: Path
) -> None:
    runs = [f"ha{i}" for i in range(8)]
    for run in runs:
        env.cluster.script(f"launch-agent.io/run-id={run}", "succeed after=1h")
    config_a = write_config(
        env, tmp_path / "a.yaml", leader_election={**ELECTION, "identity": "agent-a"}
    )
    config_b = write_config(
        env, tmp_path / "b.yaml", leader_election={**ELECTION, "identity": "agent-b"}
    )
    before = [env.push(run_spec(run)) for run in runs[:4]]
    async with agent_process(env, config_a) as a:
        await until(lambda: holder(env) == "agent-a", within=START_TIMEOUT, message="a leads")
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in before),
            within=START_TIMEOUT,
            message=f"a dispatches\n{a.output()}",
        )
        async with agent_process(env, config_b) as b:
            await until(
                lambda: any("standby: agent-a leads" in line for line in b.lines),
                within=START_TIMEOUT,
                message="b waits as a standby",
            )
            # The standby registered nothing with W&B and popped nothing: only a did.
            assert len(env.state.agents) == 1
            assert sum(i.pops for i in before) == len(before)
            a.process.kill()
            killed = time.monotonic()
            await until(
                lambda: holder(env) == "agent-b",
                within=START_TIMEOUT,
                message=f"b takes over\n{b.output()}",
            )
            took = time.monotonic() - killed
            assert took < TAKEOVER_BOUND, f"takeover took {took:.2f}s"
            after = [env.push(run_spec(run)) for run in runs[4:]]
            await until(
                lambda: all(i.state is ItemState.CLAIMED for i in after),
                within=START_TIMEOUT,
                message=f"b dispatches\n{b.output()}",
            )
            assert any(f"took over with {len(before)} run(s)" in line for line in b.lines)
    for item in [*before, *after]:
        assert claims(item) == 1, item.history
        assert item.pops == 1
        assert item.failure is None
    for run in runs:
        assert len(jobs_of(env, run)) == 1, run
    assert len(env.jobs()) == len(runs)


@pytest.mark.parametrize(
    ("server", "route"),
    [("kube", "POST jobs"), ("wandb", "ackRunQueueItem")],
    ids=["create-in-flight", "ack-in-flight"],
)
async def test_the_leader_killed_mid_dispatch_leaves_one_workload_and_one_claim(
    env: Env, tmp_path: Path, server: str, route: str
) -> None:
    env.cluster.script("launch-agent.io/run-id=mid", "succeed after=1h")
    config_a = write_config(
        env, tmp_path / "a.yaml", leader_election={**ELECTION, "identity": "agent-a"}
    )
    config_b = write_config(
        env, tmp_path / "b.yaml", leader_election={**ELECTION, "identity": "agent-b"}
    )
    faults = env.kube.faults if server == "kube" else env.wandb.faults
    async with agent_process(env, config_a) as a:
        await until(lambda: holder(env) == "agent-a", within=START_TIMEOUT, message="a leads")
        async with agent_process(env, config_b) as b:
            await until(
                lambda: any("standby: agent-a leads" in line for line in b.lines),
                within=START_TIMEOUT,
                message="b waits as a standby",
            )
            rule = faults.add(FaultRule(route, delay=4.0, times=1))
            item = env.push(run_spec("mid"))
            await until(lambda: rule.fired == 1, within=START_TIMEOUT, message=f"a held at {route}")
            a.process.kill()
            faults.remove(rule)
            # W&B gives the item back once a's lease on it lapses; b pops it and creates the
            # workload, or adopts a's if that create landed.
            await until(
                lambda: item.state is ItemState.CLAIMED,
                within=START_TIMEOUT,
                message="b claims the item",
            )
            assert holder(env) == "agent-b"
    assert claims(item) == 1, item.history
    assert item.failure is None
    assert len(jobs_of(env, "mid")) == 1


async def test_a_leader_whose_lease_is_taken_stops_at_once(env: Env) -> None:
    """Another replica wrote the Lease (a partition healed the wrong way round, say): the
    leader sees it on its next renewal and stops, before its own term could have run out."""
    election = {
        **ELECTION,
        "identity": "agent-a",
        "lease_duration_seconds": 30.0,
        "renew_deadline_seconds": 20.0,
    }
    agent = env.agent(env.config(leader_election=election))
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run(stop), name="e2e-leader")
    try:
        await asyncio.wait_for(agent.ready.wait(), 20)
        assert agent.readiness.role == "leader"
        started = time.monotonic()
        env.kube.objects.patch(
            "leases", "ha-agent", {"spec": {"holderIdentity": "intruder"}}, "default"
        )
        await asyncio.wait_for(task, 20)  # the agent stopped by itself
        assert time.monotonic() - started < 20.0, "before its renew deadline"
    finally:
        stop.set()
        await asyncio.wait_for(task, 30)
    assert agent.readiness.role == "standby"
    assert agent.supervisor.stopping.is_set()
    # It did not release what is no longer its own.
    lease = env.kube.objects.get("leases", "ha-agent", "default")
    assert lease["spec"]["holderIdentity"] == "intruder"
