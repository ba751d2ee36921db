"""A batch/v1 Job from dispatch to the report in W&B, on either tier: success, a container
killed for memory (with its log tail, which on the real tier the API server fetches from the
simulated kubelet's endpoint), and the Job controller's own BackoffLimitExceeded."""

from __future__ import annotations

import pytest

from launch_agent.sandbox.wandb import ItemState
from tests.cluster.world import World, run_spec, until

JOB_SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: basic
spec:
  queues: [q1]
  namespace: NAMESPACE
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      backoffLimit: 1
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
              resources:
                requests: {cpu: "1", memory: 1Gi}
  defaults:
    activeDeadlineSeconds: 600
"""


async def test_a_job_runs_to_success_and_is_reported_once(world: World) -> None:
    world.write_spec("basic.yaml", JOB_SPEC)
    item = world.push(run_spec("ok-1"))
    await world.script("launch-agent.io/run-id=ok-1", "succeed after=2s")
    async with world.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(lambda: agent.runs.get(item.id) is None, within=90, message="run released")
        assert item.failure is None
        jobs = await world.objects("batch/v1", "jobs")
        assert len(jobs) == 1
        assert jobs[0]["metadata"]["labels"]["launch-agent.io/agent"] == "tier-agent"

        async def complete() -> bool:
            # The run is released at SuccessCriteriaMet; Complete follows once the Job
            # controller has removed its pods' finalizers (Kubernetes 1.31+).
            (job,) = await world.objects("batch/v1", "jobs")
            return any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in job["status"].get("conditions") or []
            )

        await until(complete, message="the Job's Complete condition")


@pytest.mark.parametrize(
    ("outcome", "fragments"),
    [
        (
            'oomkilled after=2s log="loading shards" log="allocating 80GiB"',
            ["OOMKilled", "container main", "allocating 80GiB"],
        ),
        ('exit code=3 after=1s log="ValueError: bad lr"', ["exited with code 3", "bad lr"]),
    ],
    ids=["oomkilled", "exit-code"],
)
async def test_a_failed_job_reaches_wandb_with_the_reason_and_log_tail(
    world: World, outcome: str, fragments: list[str]
) -> None:
    world.write_spec("basic.yaml", JOB_SPEC)
    item = world.push(run_spec("bad-1"))
    await world.script("launch-agent.io/run-id=bad-1", outcome)
    async with world.running():
        await until(lambda: item.state is ItemState.FAILED, within=120, message="failed")
        assert item.failure is not None
        assert item.failure.stage == "run"
        for fragment in fragments:
            assert fragment.lower() in item.failure.message.lower(), item.failure.message
        jobs = await world.objects("batch/v1", "jobs")
        reasons = {c.get("reason") for j in jobs for c in j["status"].get("conditions") or []}
        # backoffLimit 1: two pods failed, and the Job controller itself said so.
        assert "BackoffLimitExceeded" in reasons, reasons
