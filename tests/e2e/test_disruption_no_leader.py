"""A disruption no agent saw is still requeued (issue 14/16, found by `bench chaos`).

The scheduler preempts a run's pod and deletes it while no agent runs (the leader was killed
between the preemption and the requeue). What the next agent adopts is a failed Job and no pod:
the pod that said `DisruptionTarget` is gone. The rule render adds to every Job
(`render/disruption_rule.py`) makes the Job controller write the disruption onto the Job itself
(`PodFailurePolicy`, "Pod ns/name has condition DisruptionTarget matching FailJob rule at index
0"), and the agent requeues the run once instead of failing it.
"""

from __future__ import annotations

from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, poll_rounds, run_spec, until


def requeues(env: Env, item: RunQueueItem) -> list[RunQueueItem]:
    run = item.run_spec["run_id"]
    return [i for i in env.state.items.values() if i.id != item.id and i.run_spec["run_id"] == run]


def running(env: Env, item: RunQueueItem) -> bool:
    return any((p.get("status") or {}).get("phase") == "Running" for p in env.pods_of(item))


async def test_a_disruption_while_no_agent_runs_is_requeued_by_the_next(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=pd1", "preempted after=20s; succeed after=5s")
    item = env.push(run_spec("pd1"))
    async with env.running():
        await until(lambda: running(env, item), advance=lambda: env.advance(1), message="running")
    # No agent: the scheduler preempts the pod, it is deleted, the Job fails.
    env.advance(60)
    assert env.pods_of(item) == []
    [job] = env.jobs()
    failed = {c["type"]: c for c in job["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "PodFailurePolicy", failed
    assert "has condition DisruptionTarget matching FailJob rule" in failed["message"]
    assert requeues(env, item) == [] and item.failure is None

    async with env.running() as agent:
        await until(
            lambda: requeues(env, item) or item.failure,
            advance=lambda: env.advance(1),
            message="requeued or failed",
        )
        assert item.failure is None, item.failure
        again = requeues(env, item)
        await until(
            lambda: again[0].state is ItemState.CLAIMED,
            advance=lambda: env.advance(1),
            message="requeued item claimed",
        )
        await poll_rounds(agent)
    assert [i.run_spec["_resume_count"] for i in requeues(env, item)] == [1]
    assert item.failure is None, item.failure
    assert all(state is not ItemState.FAILED for _, state in item.history), item.history
