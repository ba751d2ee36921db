"""A run that fails on a worker (real tier only: the sandbox has no MultiKueue, see conftest):
the reason, log tail and Events come from the worker that ran it, read with the read-only RBAC
the chart ships for workers; without that access the failure says plainly which worker the
agent cannot read and what it needs."""

from __future__ import annotations

import re
from pathlib import Path

from launch_agent.sandbox.wandb import ItemState
from tests.cluster.multi.multiworld import MultiWorld, reader_kubeconfig
from tests.cluster.world import run_spec, until

SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: multi
spec:
  queues: [q1]
  namespace: NAMESPACE
  kueue: {queueName: lq, multiKueue: true}
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
                requests: {cpu: "CPU", memory: 1Gi}
"""
FAILING = 'exit code=3 after=1s log="loading shards" log="ValueError: bad learning rate"'


async def test_a_failure_on_a_worker_reports_its_pods_reason_and_log_tail(
    mworld: MultiWorld, tmp_path: Path
) -> None:
    readers = {
        name: await reader_kubeconfig(mworld, name, tmp_path) for name in sorted(mworld.workers)
    }
    mworld.write_spec("multi.yaml", SPEC.replace("CPU", "1"))
    item = mworld.push(run_spec("bad-1"))
    await mworld.script("launch-agent.io/run-id=bad-1", FAILING)
    workers = [{"name": n, "kubeconfig": str(p)} for n, p in readers.items()]
    agent = mworld.agent(mworld.config(multikueue={"workers": workers}))
    async with mworld.running(agent):
        await until(lambda: item.state is ItemState.FAILED, within=150, message="failed")
    assert item.failure is not None
    message = item.failure.message
    assert item.failure.stage == "run"
    assert "exited with code 3" in message, message
    assert "container main" in message, message
    assert "ValueError: bad learning rate" in message, message  # the worker's kubelet log
    assert any(f"on worker cluster {w}" in message for w in mworld.workers), message
    # The pod it names ran on the worker (MultiKueue removed it with the finished Workload):
    # the manager never had one.
    assert re.search(r"in pod multi-\d+-[a-z0-9]{5} exited", message), message
    assert await mworld.objects("v1", "pods") == []
    assert "cannot read" not in message


async def test_without_access_to_a_worker_the_failure_says_which_and_what_it_needs(
    mworld: MultiWorld, tmp_path: Path
) -> None:
    """Each run takes a whole worker (2 CPUs), so the two go to different workers: one the
    agent has a kubeconfig for whose ServiceAccount has no RBAC (refused), one not listed."""
    refused = await reader_kubeconfig(mworld, "worker-1", tmp_path, rbac=False)
    mworld.write_spec("multi.yaml", SPEC.replace("CPU", "2"))
    items = [mworld.push(run_spec(f"blind-{i}")) for i in range(2)]
    await mworld.script("launch-agent.io/agent=tier-agent", FAILING)
    config = mworld.config(
        multikueue={"workers": [{"name": "worker-1", "kubeconfig": str(refused)}]}
    )
    async with mworld.running(mworld.agent(config)):
        await until(
            lambda: all(i.state is ItemState.FAILED for i in items), within=150, message="failed"
        )
    messages = {}
    for item in items:
        assert item.failure is not None
        text = item.failure.message
        worker = next(w for w in mworld.workers if f"on worker cluster {w}" in text)
        messages[worker] = text
        # The manager's mirrored Job status still says how it ended.
        assert "BackoffLimitExceeded" in text, text
        assert f"the agent cannot read worker cluster {worker}" in text, text
        assert "get, list and watch on pods, pods/log and events" in text, text
        assert f"namespace {mworld.namespace}" in text, text
        assert "ValueError" not in text  # no log tail: it is on the worker
    assert sorted(messages) == ["worker-1", "worker-2"], messages
    assert "forbidden" in messages["worker-1"].lower(), messages["worker-1"]
    assert "not listed under multikueue.workers" in messages["worker-2"], messages["worker-2"]
