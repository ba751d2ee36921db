"""The success path for every workload kind, with the example queue specs and the real CRDs."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from launch_agent.model.run_state import RunState
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import CRDS, EXAMPLE_SPECS, Env, run_spec, until

# (spec file, queue, namespace, plural of the workload)
KINDS = [
    ("job.yaml", "gpu-job", "ml-training", "jobs"),
    ("job-wandb-form.yaml", "k8s-test", "wandb", "jobs"),
    ("jobset-gke.yaml", "jobset-tpu", "ml-training", "jobsets"),
    ("leaderworkerset.yaml", "lws-multihost", "ml-training", "leaderworkersets"),
    ("pytorchjob.yaml", "pytorch-ddp", "ml-training", "pytorchjobs"),
    ("rayjob.yaml", "ray", "ml-training", "rayjobs"),
    ("trainjob.yaml", "trainjob", "ml-training", "trainjobs"),
    ("volcano-job.yaml", "volcano", "ml-training", "jobs.batch.volcano.sh"),
]


@pytest.fixture
async def kinds_env(env: Env) -> Env:
    await env.kube.load_crds_from(CRDS)
    for ns in ("ml-training", "wandb"):
        env.kube.objects.create(
            "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}, ""
        )
    for file, queue, _, _ in KINDS:
        shutil.copy(EXAMPLE_SPECS / file, env.specs_dir / file)
        env.state.add_queue(queue)
    return env


def _workloads(env: Env, plural: str, namespace: str) -> list[dict[str, Any]]:
    return env.kube.objects.list(plural, namespace=namespace)


@pytest.mark.parametrize(("file", "queue", "namespace", "plural"), KINDS, ids=[k[0] for k in KINDS])
async def test_every_kind_runs_to_success(
    kinds_env: Env, file: str, queue: str, namespace: str, plural: str
) -> None:
    env = kinds_env
    spec = run_spec(f"k-{queue}")
    if plural == "leaderworkersets":
        env.cluster.script(f"launch-agent.io/run-id=k-{queue}", "run")  # serves until stopped
    spec.pop("overrides")
    item = env.push(spec, queue=queue)
    config = env.config(
        queues=[k[1] for k in KINDS], namespaces=["default", "ml-training", "wandb"]
    )
    async with env.running(env.agent(config)) as agent:
        await until(lambda: item.state is not ItemState.PENDING, message="popped")
        await until(lambda: item.state in (ItemState.CLAIMED, ItemState.FAILED), message="claimed")
        assert item.failure is None, item.failure
        created = _workloads(env, plural, namespace)
        assert len(created) == 1
        assert created[0]["metadata"]["labels"]["launch-agent.io/agent"] == "test-agent"
        if plural == "leaderworkersets":
            # A LeaderWorkerSet serves until it is stopped: running, then stop from the UI.
            record = agent.runs.get(item.id)
            assert record is not None
            for _ in range(10):
                env.advance(30)
                if record.state is RunState.RUNNING:
                    break
            await until(lambda: record.state is RunState.RUNNING, message="LWS running")
            env.state.stop_run("ent", "proj", f"k-{queue}")
            await until(lambda: not _workloads(env, plural, namespace), message="LWS deleted")
            await until(lambda: agent.runs.get(item.id) is None, message="LWS record released")
            assert item.failure is None
            return
        for _ in range(20):
            env.advance(30)
            if agent.runs.get(item.id) is None:
                break
        await until(lambda: agent.runs.get(item.id) is None, message=f"{queue} finished")
        assert item.failure is None, item.failure
        outcomes = agent.metrics.registry.get_sample_value(
            "launch_agent_run_outcomes_total", {"state": "succeeded"}
        )
        assert outcomes == 1
        if plural != "jobs":
            await until(lambda: not _workloads(env, plural, namespace), message="CR deleted")


async def test_kueue_suspended_job_is_queued_until_admitted(kinds_env: Env) -> None:
    """The Job is created suspended for Kueue: queued (in flight, no failure) until admitted."""
    env = kinds_env
    env.kube.objects.create(
        "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}, ""
    )
    # The example spec runs as this ServiceAccount; the API server refuses pods naming one
    # that does not exist (the ServiceAccount admission plugin).
    env.kube.objects.create(
        "serviceaccounts", {"metadata": {"name": "training-data-reader"}}, "team-a"
    )
    shutil.copy(EXAMPLE_SPECS / "job-kueue.yaml", env.specs_dir / "job-kueue.yaml")
    env.state.add_queue("team-a")
    spec = run_spec("kq")
    spec.pop("overrides")
    item = env.push(spec, queue="team-a")
    config = env.config(queues=["team-a"], namespaces=["team-a"])
    async with env.running(env.agent(config)) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        job = env.jobs("team-a")[0]
        assert job["spec"]["suspend"] is True
        assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
        record = agent.runs.get(item.id)
        assert record is not None
        env.advance(60)
        await until(lambda: record.state is RunState.QUEUED, message="queued")
        assert agent.runs.inflight == 1
        # What Kueue does when the LocalQueue admits the workload.
        env.kube.objects.patch(
            "jobs", job["metadata"]["name"], {"spec": {"suspend": False}}, namespace="team-a"
        )
        for _ in range(5):
            env.advance(30)
            if agent.runs.get(item.id) is None:
                break
        await until(lambda: agent.runs.get(item.id) is None, message="finished after admission")
        assert item.failure is None
