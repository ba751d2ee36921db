"""Disruptions are infrastructure, not the run's fault: requeued like a preemption.

The sandbox plays each as the component that causes it writes it: a drain's Eviction API call
(`DisruptionTarget` `EvictionByEvictionAPI`, then SIGTERM), a lost node (the taint manager's
`DeletionByTaintManager`, then the pod GC), an orphaned pod the pod GC removes
(`DeletionByPodGC`), and graceful node shutdown on a spot reclaim (`reason: Terminated`,
`TerminationByKubelet`). Each run goes back onto its queue with the same run id and
`_resume_count + 1` (within `tracking.max_requeues`), and W&B hears no failure.
"""

from __future__ import annotations

import pytest

from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, run_spec, until


@pytest.mark.parametrize("kind", ["drained", "nodelost", "podgc", "nodeshutdown"])
async def test_disruption_requeues_the_run(env: Env, kind: str) -> None:
    env.cluster.script("launch-agent.io/run-id=d1", f"{kind} after=10s; succeed after=5s")
    item = env.push(run_spec("d1"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")

        def requeued() -> list[RunQueueItem]:
            return [i for i in env.state.items.values() if i.id != item.id]

        again = await until(requeued, advance=lambda: env.advance(5), message="requeued item")
        assert again[0].run_spec["_resume_count"] == 1
        assert again[0].run_spec["run_id"] == "d1"
        assert item.failure is None, item.failure
        await until(lambda: again[0].state is ItemState.CLAIMED, message="requeued item claimed")
