"""Every failure reason reaches W&B as `failRunQueueItem` with its stage and an actionable message.

Each case scripts one outcome in the simulated cluster for one run, lets simulated time pass
and reads what the W&B sandbox recorded for the item: stage `run`, the reason in words, the
container or image involved, and the tail of the container's log when it ran.
"""

from __future__ import annotations

import pytest

from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, run_spec, until

CASES = [
    # (outcome, advance seconds, fragments the message must contain, workload deleted)
    (
        'oomkilled after=3s log="loading shards" log="allocating 80GiB"',
        10,
        ["OOMKilled", "container main", "allocating 80GiB"],
        False,
    ),
    ('exit code=3 after=2s log="ValueError: bad lr"', 10, ["exited with code 3", "bad lr"], False),
    ("imagepullbackoff", 30, ["registry.example/train:1", "pull"], True),
    ("invalidimagename", 5, ["InvalidImageName"], True),
    # A missing Secret may still sync: failed after tracking.container_config_grace_seconds (300).
    ("createcontainerconfigerror", 310, ["CreateContainerConfigError"], True),
    (
        'unschedulable message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu."',
        130,
        ["0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "cannot be scheduled"],
        True,
    ),
    ("fail after=2s", 10, ["exited with code 1"], False),
    ("succeed after=2h", 3700, ["deadline"], False),
]


@pytest.mark.parametrize(
    ("outcome", "seconds", "fragments", "deleted"),
    CASES,
    ids=[c[0].split()[0] + ("-deadline" if "2h" in c[0] else "") for c in CASES],
)
async def test_failure_reaches_wandb_with_stage_and_reason(
    env: Env, outcome: str, seconds: float, fragments: list[str], deleted: bool
) -> None:
    env.cluster.script("launch-agent.io/run-id=r1", outcome)
    item = env.push(run_spec("r1"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(seconds)
        await until(lambda: item.state is ItemState.FAILED, message=f"failure of {outcome}")
        assert item.failure is not None
        assert item.failure.stage == "run"
        for fragment in fragments:
            assert fragment.lower() in item.failure.message.lower(), item.failure.message
        await until(lambda: agent.runs.get(item.id) is None, message="record released")
        jobs = env.jobs()
        if deleted:
            assert jobs == [], "a stuck run's Job is deleted"
            await until(lambda: not env.pods_of(item), message="pods gone")
        else:
            assert len(jobs) == 1
            assert "launch-agent.io/reported" in jobs[0]["metadata"]["annotations"]


async def test_a_node_pressure_eviction_requeues_the_run(env: Env) -> None:
    # The kubelet's eviction (DisruptionTarget TerminationByKubelet) is the node's doing, not
    # the run's: requeued like a preemption (issue 14), failed only past tracking.max_requeues.
    env.cluster.script("launch-agent.io/run-id=e1", "evicted after=2s")
    item = env.push(run_spec("e1"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(10)

        def requeued() -> list[RunQueueItem]:
            return [i for i in env.state.items.values() if i.id != item.id]

        again = await until(requeued, message="requeued item")
        assert again[0].run_spec["_resume_count"] == 1
        assert item.failure is None


async def test_an_eviction_past_max_requeues_fails_with_the_kubelets_words(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=e2", "evicted after=2s")
    item = env.push(run_spec("e2"))
    config = env.config(tracking={"max_requeues": 0, "stop_check_seconds": 0.1})
    async with env.running(env.agent(config)):
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(10)
        await until(lambda: item.state is ItemState.FAILED, message="failed")
        assert item.failure is not None
        assert "TerminationByKubelet" in item.failure.message, item.failure.message
        assert "The node was low on resource: memory" in item.failure.message
        assert "tracking.max_requeues" in item.failure.message
