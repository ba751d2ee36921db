"""Reliability regressions (issue 16): reports cut by a shutdown, held runs across a restart.

- A run fails while W&B refuses every `failRunQueueItem` with 503, and the agent stops while the
  reporter retries. Nothing reached W&B, so the Job must stay unmarked and the next start must
  report the failure (a bool once read "not sent" as "refused" and the Job was marked reported).
- A custom kind whose `suspendPath` is `spec.control.hold`, in `quota.mode: agent`: one run
  admitted, one held. A new agent rebuilds the quota engine from the informers' slim cache; if
  the cache drops the flag, the held run reads as resumed by hand and is charged.
"""

from __future__ import annotations

from typing import Any

from launch_agent.quota import RunState as QState
from launch_agent.runtime.agent import Agent
from launch_agent.runtime.runs import REPORTED
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, poll_rounds, run_spec, until


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


WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"},
    "spec": {
        "group": "example.com",
        "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}

# A custom kind whose suspend flag is neither `spec.suspend` nor `spec.runPolicy.suspend`.
WIDGET_SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: widgets
spec:
  queues: [qw]
  namespace: default
  quota:
    leaf: w.1
  podTemplatePaths: [spec.replicaSpecs.*.template]
  suspendPath: spec.control.hold
  plural: widgets
  template:
    apiVersion: example.com/v1
    kind: Widget
    spec:
      replicaSpecs:
        main:
          replicas: 1
          template:
            spec:
              containers:
                - name: main
                  image: ${image_uri}
                  resources:
                    requests: {cpu: "1", memory: 1Gi}
  overridable: [overrides.args]
"""

ONE_CPU = {"min": {"cpu": 1}, "max": {"cpu": 1}}
WIDGET_TREE: dict[str, Any] = {
    "root": {
        "name": "root",
        **ONE_CPU,
        "children": [{"name": "w", **ONE_CPU, "children": [{"name": "w.1", **ONE_CPU}]}],
    }
}
CPU = 10**9


def widget_hold(env: Env, item: RunQueueItem) -> object:
    for widget in env.kube.objects.list("widgets", namespace="default"):
        if widget["metadata"]["annotations"].get("launch-agent.io/run-queue-item-id") == item.id:
            return widget["spec"].get("control", {}).get("hold")
    return None


def quota_view(agent: Agent) -> tuple[dict[str, int], list[str]]:
    assert agent.quota is not None
    engine = agent.quota.engine
    waiting = sorted(r.id for r in engine.runs.values() if r.state is QState.PENDING)
    return engine.usage("root"), waiting


async def test_a_held_custom_kind_stays_held_and_uncharged_across_a_restart(env: Env) -> None:
    env.kube.register_crd(WIDGET_CRD)
    (env.specs_dir / "basic.yaml").unlink()
    (env.specs_dir / "widgets.yaml").write_text(WIDGET_SPEC)
    env.state.add_queue("qw")
    first, second = (env.push(run_spec(f"w{i}"), "qw") for i in range(2))
    quota = {"mode": "agent", "tree": WIDGET_TREE, "max_pending_per_leaf": 2}

    def agent() -> Agent:
        return env.agent(env.config(queues=["qw"], quota=quota))

    async with env.running(agent()) as one:
        await until(lambda: widget_hold(env, first) is False, message="first admitted")
        await until(lambda: widget_hold(env, second) is True, message="second held")
        assert quota_view(one) == ({"cpu": CPU}, [second.id])
    async with env.running(agent()) as again:
        # Read back from the informers' slim cache: the hold flag must have survived it.
        assert quota_view(again) == ({"cpu": CPU}, [second.id]), "the held run is not charged"
        await poll_rounds(again)
        assert widget_hold(env, second) is True


async def test_a_ui_stop_seen_by_another_replica_is_not_reported_as_a_failure(env: Env) -> None:
    """Found by `launch-agent bench chaos --runs 40 --kills 3 --replicas 2 --seed 8`: the
    leader saw the UI stop and deleted the Job; the standby saw only the deletion and, once it
    took over, failed the item with "deleted before it finished". Here the agent never checks
    stops itself (an hour between checks) while the run is stopped in W&B and its Job deleted,
    as by the replica that saw the stop."""
    env.cluster.script("launch-agent.io/run-id=s1", "succeed after=1h")
    item = env.push(run_spec("s1"))
    config = env.config(tracking={"stop_check_seconds": 3600, "stop_check_old_seconds": 3600})
    async with env.running(env.agent(config)) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.state.set_run_state("ent", "proj", "s1", "running")
        env.state.stop_run("ent", "proj", "s1")
        (job,) = env.jobs()
        env.kube.objects.delete("jobs", job["metadata"]["name"], namespace="default")
        assert agent.finisher is not None
        finisher = agent.finisher
        await until(lambda: finisher.handled == 1, message="the deletion handled")
    assert item.failure is None, item.failure
    assert item.state is ItemState.CLAIMED


async def test_a_workload_deleted_by_someone_else_is_still_a_failure(env: Env) -> None:
    """The other side of the check above: W&B says the run was not stopped."""
    env.cluster.script("launch-agent.io/run-id=s2", "succeed after=1h")
    item = env.push(run_spec("s2"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.state.set_run_state("ent", "proj", "s2", "running")
        (job,) = env.jobs()
        env.kube.objects.delete("jobs", job["metadata"]["name"], namespace="default")
        await until(lambda: item.state is ItemState.FAILED, message="the deletion reported")
    assert item.failure is not None
    assert "was deleted before it finished" in item.failure.message
