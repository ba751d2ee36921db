"""Runs dispatched through MultiKueue (real tier only: the sandbox has no MultiKueue, see
conftest): created on the manager in the form Kueue's adapter expects, admitted by Kueue,
run on a worker, tracked from the manager's mirrored status, and W&B told the worker."""

from __future__ import annotations

import re

from launch_agent.render.kinds import MULTIKUEUE_CONTROLLER
from launch_agent.sandbox.wandb import ItemState
from tests.cluster.multi.multiworld import MultiWorld
from tests.cluster.world import run_spec, until

JOB_SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: multi
spec:
  queues: [q1]
  namespace: NAMESPACE
  kueue:
    queueName: lq
    multiKueue: true
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      backoffLimit: 0
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
              resources:
                requests: {cpu: "1", memory: 1Gi}
"""
ON_WORKER = re.compile(r"MultiKueue runs it on worker cluster (worker-\d)")


def workers_reported(messages: list[str]) -> list[str]:
    return [m.group(1) for text in messages if (m := ON_WORKER.search(text))]


async def test_runs_spread_over_the_workers_and_each_item_names_its_worker(
    mworld: MultiWorld,
) -> None:
    """Four runs of 1 CPU on two workers of 2 CPUs each: both workers run some; each item
    hears once which worker runs it, and the status snapshot names it while it runs."""
    mworld.write_spec("multi.yaml", JOB_SPEC)
    items = [mworld.push(run_spec(f"spread-{i}")) for i in range(4)]
    await mworld.script("launch-agent.io/agent=tier-agent", "succeed after=6s")
    async with mworld.running() as agent:
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items), within=120, message="claimed"
        )
        jobs = await mworld.objects("batch/v1", "jobs")
        assert len(jobs) == 4
        for job in jobs:
            # The form the Job adapter dispatches (kueue job_multikueue_adapter.go).
            assert job["spec"]["managedBy"] == MULTIKUEUE_CONTROLLER
            assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "lq"

        def running_on() -> set[str]:
            rows = agent.status.snapshot()["runs"]["items"]
            return {r["worker"] for r in rows if r["state"] == "running" and r["worker"]}

        # While they run, the status page and `launch-agent status` name each run's worker.
        await until(lambda: running_on() == {"worker-1", "worker-2"}, message="both running")
        await until(
            lambda: all(workers_reported([w.message for w in i.warnings]) for i in items),
            within=120,
            message="every item told its worker",
        )
        await until(lambda: len(agent.runs) == 0, within=180, message="every run released")
    placed = [workers_reported([w.message for w in i.warnings]) for i in items]
    assert all(len(p) == 1 for p in placed), placed  # once per item
    assert {p[0] for p in placed} == {"worker-1", "worker-2"}, placed
    assert all(i.failure is None for i in items)
    # Nothing ran on the manager: it has no nodes, its Job controller leaves managed Jobs alone.
    assert await mworld.objects("v1", "pods") == []
