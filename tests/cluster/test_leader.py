"""Leader failover on a coordination.k8s.io/v1 Lease, on either tier: two `launch-agent run`
processes, the leader SIGKILLed (no release, its renewals stop mid-term), the standby takes the
Lease within its duration, adopts the leader's runs and dispatches the rest; every item claimed
once, one Job each (`tests/e2e/test_leader_failover.py` is the sandbox-only version with held
requests).

On the real tier the Lease is the upstream API server's: its optimistic concurrency on
`resourceVersion` is what makes the two replicas' updates exclusive, and `leaseTransitions` is
the server's count of holders changing.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from launch_agent.realcluster.kubehttp import path_of
from launch_agent.sandbox.wandb import ItemState
from tests.cluster.processes import START_TIMEOUT, agent_process, write_config
from tests.cluster.test_jobs import JOB_SPEC
from tests.cluster.world import World, reported_once, run_spec, until

LEASE = "tier-ha"
LEASE_SECONDS = 4.0
RETRY_SECONDS = 0.5
# client-go's bound: the lease duration after the standby last saw the record change (one
# jittered retry period late at most), plus one more jittered try; and a second for the test
# seeing it (its polling, and a loaded machine's request latency).
TAKEOVER_BOUND = LEASE_SECONDS + 2 * 2.2 * RETRY_SECONDS + 1.0


def election(world: World, identity: str) -> dict[str, Any]:
    return {
        "enabled": True,
        "namespace": world.namespace,
        "lease_name": LEASE,
        "identity": identity,
        "lease_duration_seconds": LEASE_SECONDS,
        "renew_deadline_seconds": 3.0,
        "retry_period_seconds": RETRY_SECONDS,
    }


async def lease(world: World) -> dict[str, Any]:
    found = await world.http.find(
        path_of("coordination.k8s.io/v1", "leases", world.namespace, LEASE)
    )
    return (found or {}).get("spec") or {}


async def holder(world: World) -> str:
    return str((await lease(world)).get("holderIdentity") or "")


async def test_sigkill_of_the_leader_hands_the_lease_over_and_loses_nothing(
    world: World, tmp_path: Path
) -> None:
    world.write_spec("basic.yaml", JOB_SPEC)
    runs = [f"ha-{n}" for n in range(6)]
    for run in runs:
        await world.script(f"launch-agent.io/run-id={run}", "succeed after=1h")
    config_a = write_config(world, tmp_path / "a.yaml", leader_election=election(world, "agent-a"))
    config_b = write_config(world, tmp_path / "b.yaml", leader_election=election(world, "agent-b"))
    before = [world.push(run_spec(run)) for run in runs[:3]]
    async with agent_process(world, config_a) as a:

        async def a_leads() -> bool:
            return await holder(world) == "agent-a"

        await until(a_leads, within=START_TIMEOUT, message=f"a leads\n{a.output()}")
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in before),
            within=START_TIMEOUT,
            message=f"a dispatches\n{a.output()}",
        )
        async with agent_process(world, config_b) as b:
            await until(
                lambda: b.said("standby: agent-a leads"),
                within=START_TIMEOUT,
                message=f"b waits as a standby\n{b.output()}",
            )
            # The standby registered nothing with W&B and popped nothing.
            assert len(world.state.agents) == 1
            transitions = int((await lease(world)).get("leaseTransitions") or 0)
            a.process.kill()
            killed = time.monotonic()

            async def b_leads() -> bool:
                return await holder(world) == "agent-b"

            await until(b_leads, within=START_TIMEOUT, message=f"b takes over\n{b.output()}")
            took = time.monotonic() - killed
            assert took < TAKEOVER_BOUND, f"takeover took {took:.2f}s"
            assert int((await lease(world)).get("leaseTransitions") or 0) == transitions + 1
            after = [world.push(run_spec(run)) for run in runs[3:]]
            await until(
                lambda: all(i.state is ItemState.CLAIMED for i in after),
                within=START_TIMEOUT,
                message=f"b dispatches\n{b.output()}",
            )
            await until(
                lambda: b.said(f"took over with {len(before)} run(s)"),
                within=30,
                message=f"b adopts a's runs\n{b.output()}",
            )
    for item in [*before, *after]:
        assert reported_once(item, ItemState.CLAIMED), item.history
        assert item.pops == 1
    jobs = await world.objects("batch/v1", "jobs")
    assert sorted(j["metadata"]["labels"]["launch-agent.io/run-id"] for j in jobs) == runs
