"""Faults around MultiKueue (real tier only): a worker lost mid-run, a worker that refuses the
workload, and the manager's API server restarting. Both are the cluster's to handle; the agent's part is to report what happened to
W&B in words a person can act on, and never to fail, lose or duplicate the run.

A lost worker is Kueue's: once the worker's MultiKueueCluster has been unreachable for
`workerLostTimeout` (20 s here, conftest), the manager evicts the Workload from it and
dispatches it again (`pkg/controller/admissionchecks/multikueue/workload.go`, the
`workerLostTimeout` branch of `reconcileGroup`), and the other worker runs it. A worker that
refuses the remote Workload is one error among the group's: with the AllAtOnce dispatcher the
copies go to every worker (`nominateAndSynchronizeWorkers`), each create's error is joined and
retried, and the worker that accepted it admits it and wins.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from launch_agent.realcluster.kubehttp import ApiError, path_of
from launch_agent.sandbox.wandb import ItemState
from tests.cluster.multi.multiworld import Control, MultiWorld
from tests.cluster.world import run_spec, until

# Each run takes a whole worker (2 CPUs of the namespace's quota there), so the run cannot
# stay where it was and the second worker is the only place for it.
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
                requests: {cpu: "2", memory: 1Gi}
"""


@contextlib.asynccontextmanager
async def stopped(control: Control, cluster: str) -> AsyncIterator[None]:
    """`cluster`'s API server stopped for the block, started again after (whatever happened:
    the namespace's clean-up needs it)."""
    await control.apiserver(cluster, "stop")
    try:
        yield
    finally:
        await control.apiserver(cluster, "start")


async def placed(mworld: MultiWorld, name: str) -> str | None:
    return await mworld.cluster_of("jobs", name, "batch/v1")


async def test_a_worker_lost_mid_run_is_a_requeue_in_wandb_never_a_failure(
    mworld: MultiWorld,
) -> None:
    assert mworld.control is not None
    mworld.write_spec("multi.yaml", SPEC)
    item = mworld.push(run_spec("lost-1"))
    # Long enough to be running when its worker goes; the second worker's run then ends it.
    await mworld.script("launch-agent.io/run-id=lost-1", "succeed after=40s")
    async with mworld.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, within=90, message="claimed")
        (job,) = await mworld.objects("batch/v1", "jobs")
        name = job["metadata"]["name"]
        first = await until(lambda: placed(mworld, name), within=90, message="placed")
        other = next(w for w in mworld.workers if w != first)
        async with stopped(mworld.control, first):
            moved = await until(
                lambda: _elsewhere(mworld, name, first),
                within=150,
                message=f"the run dispatched again after {first} was lost",
            )
            assert moved == other
            await until(
                lambda: agent.runs.get(item.id) is None,
                within=150,
                message="the run ended on the second worker",
            )
    assert item.failure is None, item.failure
    said = " | ".join(w.message for w in item.warnings)
    assert first in said and "requeued" in said.lower(), said
    assert other in said, said
    # One W&B run, one workload on the manager.
    assert [j["metadata"]["name"] for j in await mworld.objects("batch/v1", "jobs")] == [name]


async def _elsewhere(mworld: MultiWorld, name: str, lost: str) -> str | None:
    where = await placed(mworld, name)
    return where if where not in (None, lost) else None


def refusal(namespace: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """A ValidatingAdmissionPolicy and its binding on a worker: no Kueue Workload is created in
    `namespace` there (as an admin's policy would keep a team off a cluster)."""
    name = f"no-runs-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["kueue.x-k8s.io"],
                        "apiVersions": ["*"],
                        "operations": ["CREATE"],
                        "resources": ["workloads"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": f"object.metadata.namespace != '{namespace}'",
                    "message": "this cluster takes no runs from this namespace",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return name, policy, binding


async def test_a_worker_that_refuses_the_workload_leaves_the_runs_to_the_other_worker(
    mworld: MultiWorld,
) -> None:
    refusing, other = mworld.workers
    http = mworld.workers[refusing]
    name, policy, binding = refusal(mworld.namespace)
    vap = "admissionregistration.k8s.io/v1"
    await http.ensure(path_of(vap, "validatingadmissionpolicies"), policy)
    await http.ensure(path_of(vap, "validatingadmissionpolicybindings"), binding)
    try:
        await _refused_then_elsewhere(mworld, refusing, other)
    finally:
        await http.delete(path_of(vap, "validatingadmissionpolicybindings", name=name))
        await http.delete(path_of(vap, "validatingadmissionpolicies", name=name))


async def _refused_then_elsewhere(mworld: MultiWorld, refusing: str, other: str) -> None:
    # Policies take effect once the API server's policy informer has them: until a probe
    # create is refused, a run could still land on the refusing worker.
    await until(
        lambda: _refuses(mworld, refusing), within=60, message=f"{refusing} refuses Workloads"
    )
    mworld.write_spec("multi.yaml", SPEC.replace('cpu: "2"', 'cpu: "1"'))
    items = [mworld.push(run_spec(f"refused-{i}")) for i in range(2)]
    await mworld.script("launch-agent.io/agent=tier-agent", "succeed after=3s")
    async with mworld.running() as agent:
        await until(
            lambda: (
                all(agent.runs.get(i.id) is None and i.state is ItemState.CLAIMED for i in items)
                and all(i.warnings for i in items)
            ),
            within=180,
            message="both runs ended",
        )
    assert [i.failure for i in items] == [None, None]
    for item in items:
        said = " | ".join(w.message for w in item.warnings)
        assert f"worker cluster {other}" in said, said
        assert refusing not in said, said
    assert await mworld.worker_objects(refusing, "batch/v1", "jobs") == []
    assert await mworld.worker_objects(refusing, "kueue.x-k8s.io/v1beta2", "workloads") == []
    jobs = await mworld.objects("batch/v1", "jobs")
    assert sorted(j["metadata"]["labels"]["launch-agent.io/run-id"] for j in jobs) == [
        "refused-0",
        "refused-1",
    ]


async def _refuses(mworld: MultiWorld, worker: str) -> bool:
    probe = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"generateName": "probe-", "namespace": mworld.namespace},
        "spec": {
            "queueName": "lq",
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "c", "image": "busybox:1.36"}],
                        }
                    },
                }
            ],
        },
    }
    http = mworld.workers[worker]
    path = path_of("kueue.x-k8s.io/v1beta2", "workloads", mworld.namespace)
    try:
        await http.create(path, probe, dryRun="All")
    except ApiError as exc:
        return "takes no runs from this namespace" in exc.message
    return False


async def test_the_managers_api_server_restarting_mid_run_loses_and_repeats_nothing(
    mworld: MultiWorld,
) -> None:
    assert mworld.control is not None
    mworld.write_spec("multi.yaml", SPEC.replace('cpu: "2"', 'cpu: "1"'))
    items = [mworld.push(run_spec(f"restart-{i}")) for i in range(3)]
    await mworld.script("launch-agent.io/agent=tier-agent", "succeed after=15s")
    async with mworld.running() as agent:
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items), within=90, message="claimed"
        )
        await mworld.control.apiserver("manager", "restart")
        await until(
            lambda: all(agent.runs.get(i.id) is None for i in items),
            within=150,
            message="every run ended after the restart",
        )
    assert [i.failure for i in items] == [None, None, None]
    jobs = await mworld.objects("batch/v1", "jobs")
    assert sorted(j["metadata"]["labels"]["launch-agent.io/run-id"] for j in jobs) == [
        f"restart-{i}" for i in range(3)
    ]
