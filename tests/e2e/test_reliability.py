"""Reliability regressions (issue 16): reports cut by a shutdown, held runs across a restart.

- A run fails while W&B refuses every `failRunQueueItem` with 503, and the agent stops while the
  reporter retries. Nothing reached W&B, so the Job must stay unmarked and the next start must
  report the failure (a bool once read "not sent" as "refused" and the Job was marked reported).
"""

from __future__ import annotations

from launch_agent.runtime.runs import REPORTED
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until


async def test_a_failure_report_cut_by_a_shutdown_is_sent_on_the_next_start(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=f1", "exit code=3 after=1s")
    item = env.push(run_spec("f1"))
    rule = env.wandb.faults.add(FaultRule("failRunQueueItem", status=503))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        # Two refused tries: the reporter is in its retry loop when the agent stops.
        await until(lambda: rule.fired >= 2, message="the failure report retrying")
    assert item.state is ItemState.CLAIMED, "nothing reached W&B"
    (job,) = env.jobs()
    annotations = job["metadata"].get("annotations") or {}
    assert REPORTED not in annotations, "a Job whose failure W&B never got is not 'reported'"
    env.wandb.faults.remove(rule)
    async with env.running():
        await until(lambda: item.state is ItemState.FAILED, within=20, message="late report")
    assert item.failure is not None
    assert "exited with code 3" in item.failure.message
