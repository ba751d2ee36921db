"""The operators' harsh behaviours end to end: the agent on the sandbox, judged in W&B.

Each case has the sandbox's controller behave as the upstream one does (KubeRay retries,
Volcano's finish rule, Kueue deactivation, JobSet / Trainer creation failures reported only in
Events, PyTorchJob restarts) and checks what W&B records for the run: its outcome and the
upstream words in the failure message.
"""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from launch_agent.model.run_state import RunState
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import CRDS, EXAMPLE_SPECS, Env, run_spec, until
from tests.e2e.test_quota_kueue import KUEUE_SPEC, install_kueue

NS = "ml-training"


@pytest.fixture
async def ops_env(env: Env) -> Env:
    await env.kube.load_crds_from(CRDS)
    env.kube.objects.create(
        "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, ""
    )
    return env


def use_spec(env: Env, file: str, queue: str, edit: Any = None) -> None:
    """Install an example queue spec, optionally edited (text in, text out)."""
    text = (EXAMPLE_SPECS / file).read_text()
    if edit is not None:
        text = edit(text)
    (env.specs_dir / file).write_text(text)
    env.state.add_queue(queue)


def push(env: Env, run_id: str, queue: str) -> RunQueueItem:
    spec = run_spec(run_id)
    spec.pop("overrides")
    return env.push(spec, queue=queue)


def config(env: Env, queue: str, **tracking: Any) -> Any:
    return env.config(
        queues=[queue],
        namespaces=[NS],
        tracking={"stop_check_seconds": 0.1, "unschedulable_timeout_seconds": 120, **tracking},
    )


def succeeded(agent: Any) -> float | None:
    value = agent.metrics.registry.get_sample_value(
        "launch_agent_run_outcomes_total", {"state": "succeeded"}
    )
    return None if value is None else float(value)


# --- RayJob -------------------------------------------------------------------------------


def _retrying_rayjob(backoff: int) -> Any:
    def edit(text: str) -> str:
        return text.replace(
            "      entrypoint: python train.py\n",
            "      entrypoint: python train.py\n"
            f"      backoffLimit: {backoff}\n"
            "      submitterConfig: {backoffLimit: 0}\n",
        )

    return edit


def _rayjob_history(env: Env) -> list[tuple[str, dict[str, Any]]]:
    """Every write to a RayJob, and its deletion, in order."""
    seen: list[tuple[str, dict[str, Any]]] = []

    def listen(storage: str, kind: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") == "RayJob":
            deleting = kind == "DELETED" or bool(obj["metadata"].get("deletionTimestamp"))
            seen.append(("deleted" if deleting else "written", dict(obj.get("status") or {})))

    env.kube.store.listeners.append(listen)
    return seen


async def test_rayjob_retry_that_succeeds_is_a_successful_run(ops_env: Env) -> None:
    env = ops_env
    use_spec(env, "rayjob.yaml", "ray", _retrying_rayjob(2))
    history = _rayjob_history(env)
    # The submitter plays the Ray job: the first attempt fails, the retry succeeds.
    env.cluster.script("ray.io/originated-from-crd=RayJob", "fail after=5s; succeed after=5s")
    item = push(env, "ray-retry", "ray")
    async with env.running(env.agent(config(env, "ray"))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        # Small steps, so the agent watches the RayJob through its Retrying status (3 s).
        await until(
            lambda: agent.runs.get(item.id) is None,
            advance=lambda: env.advance(0.5),
            within=60,
            message="run finished",
        )
        assert item.failure is None, item.failure
        assert succeeded(agent) == 1
    statuses = [s for what, s in history if what == "written"]
    assert any(s.get("jobDeploymentStatus") == "Retrying" for s in statuses)
    deletions = [s for what, s in history if what == "deleted"]
    # Not deleted in the middle of the retry: only once the second attempt completed.
    assert all(s.get("jobDeploymentStatus") == "Complete" for s in deletions), deletions


async def test_rayjob_exhausting_its_retries_fails_with_upstream_words(ops_env: Env) -> None:
    env = ops_env
    use_spec(env, "rayjob.yaml", "ray", _retrying_rayjob(1))
    env.cluster.script("ray.io/originated-from-crd=RayJob", "exit code=3 after=5s")
    item = push(env, "ray-exhausted", "ray")
    async with env.running(env.agent(config(env, "ray"))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        # The most attempts the RayJob had counted, whenever it was written (it may be gone
        # by the time the test sees the failure).
        counted = [0]
        env.kube.store.listeners.append(
            lambda storage, kind, obj: (
                counted.__setitem__(
                    0, max(counted[0], int((obj.get("status") or {}).get("failed") or 0))
                )
                if obj.get("kind") == "RayJob"
                else None
            )
        )
        attempts_when_failed: list[int] = []

        def failed() -> bool:
            if item.state is not ItemState.FAILED:
                return False
            attempts_when_failed.append(counted[0])
            return True

        await until(failed, advance=lambda: env.advance(0.25), within=30, message="run failed")
        assert item.failure is not None
        assert "Job entrypoint command failed with exit code 3" in item.failure.message
        # Failed only once the retry failed too (backoffLimit 1: two attempts).
        assert attempts_when_failed == [2], attempts_when_failed
        await until(lambda: agent.runs.get(item.id) is None, message="record released")


async def test_rayjob_head_pod_refused_fails_with_the_rayclusters_event(ops_env: Env) -> None:
    """KubeRay's RayCluster `<rayjob>-<random>` (not named like any pod of the run) cannot
    create its head pod: only its `FailedToCreateHeadPod` Events and `ReplicaFailure` say
    so. The agent files them under the run, fails it at the start deadline with their words,
    and deleting the RayJob takes the RayCluster with it (ownerReference GC)."""
    env = ops_env
    use_spec(env, "rayjob.yaml", "ray")
    env.kube.objects.create(
        "resourcequotas",
        {"metadata": {"name": "mem-quota"}, "spec": {"hard": {"limits.memory": "4Gi"}}},
        namespace=NS,
    )
    item = push(env, "ray-head-refused", "ray")
    async with env.running(env.agent(config(env, "ray", start_timeout_seconds=300))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(
            lambda: env.kube.objects.list("rayclusters.ray.io", namespace=NS), message="cluster"
        )
        [rc] = env.kube.objects.list("rayclusters.ray.io", namespace=NS)
        assert agent.tracker is not None
        tracker = agent.tracker
        await until(lambda: tracker.events.of(item.id), message="the Event reached the agent")
        assert item.state is ItemState.CLAIMED  # a refused create is not final before the deadline
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(30),
            within=30,
            message="failed at the start deadline",
        )
        assert item.failure is not None
        message = item.failure.message
        assert "did not start within 5m" in message, message
        assert "FailedToCreateHeadPod" in message and "Failed to create head Pod" in message
        assert "exceeded quota: mem-quota" in message, message
        await until(
            lambda: not env.kube.objects.list("rayjobs", namespace=NS),
            advance=lambda: env.advance(5),
            message="the RayJob is deleted",
        )
        # Its RayCluster goes by ownerReference GC, nothing is left behind.
        await until(
            lambda: not env.kube.objects.list("rayclusters.ray.io", namespace=NS),
            advance=lambda: env.advance(5),
            message=f"RayCluster {rc['metadata']['name']} collected",
        )


# --- Volcano ------------------------------------------------------------------------------


async def test_volcano_one_failed_pod_of_three_is_not_a_failed_run(ops_env: Env) -> None:
    """Without policies the job finishes only when all pods have: with minAvailable 2, one
    failed pod and two successes complete the job."""
    env = ops_env
    use_spec(
        env,
        "volcano-job.yaml",
        "volcano",
        lambda t: t.replace("      minAvailable: 3\n", "      minAvailable: 2\n"),
    )
    env.cluster.script("volcano.sh/job-name", "fail after=2s; succeed after=30s")
    item = push(env, "vc-one-failed", "volcano")
    async with env.running(env.agent(config(env, "volcano"))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        for _ in range(20):
            env.advance(5)
            if agent.runs.get(item.id) is None:
                break
        await until(lambda: agent.runs.get(item.id) is None, message="run finished")
        assert item.failure is None, item.failure
        assert succeeded(agent) == 1


async def test_volcano_fails_only_when_every_pod_finished(ops_env: Env) -> None:
    env = ops_env
    use_spec(env, "volcano-job.yaml", "volcano")
    env.cluster.script("volcano.sh/job-name", "fail after=2s; succeed after=30s")
    item = push(env, "vc-all-done", "volcano")
    async with env.running(env.agent(config(env, "volcano"))):
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        done: set[str] = set()  # pods that ended, as the store saw them (GC may follow)
        env.kube.store.listeners.append(
            lambda storage, kind, obj: (
                done.add(obj["metadata"]["name"])
                if obj.get("kind") == "Pod"
                and (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                else None
            )
        )
        finished_pods: list[int] = []

        def failed() -> bool:
            if item.state is not ItemState.FAILED:
                return False
            finished_pods.append(len(done))
            return True

        await until(failed, advance=lambda: env.advance(0.5), within=30, message="run failed")
        assert finished_pods == [3], finished_pods  # not at the first failed pod


# --- Kueue --------------------------------------------------------------------------------


async def test_kueue_deactivation_fails_the_run_with_its_reason(env: Env) -> None:
    (env.specs_dir / "basic.yaml").write_text(KUEUE_SPEC)
    await install_kueue(env, cpu="1")
    env.cluster.script("launch-agent.io/run-id=deact", "succeed after=600s")
    item = env.push(run_spec("deact"))
    async with env.running(env.agent(env.config(quota={"mode": "kueue"}))) as agent:
        await until(lambda: env.pods_of(item), advance=lambda: env.advance(1), message="running")
        [wl] = env.kube.objects.list("workloads.kueue.x-k8s.io", namespace="default")
        # An admin (or Kueue's requeuing limit) deactivates the Workload.
        env.kube.objects.patch(
            "workloads.kueue.x-k8s.io",
            wl["metadata"]["name"],
            {"spec": {"active": False}},
            namespace="default",
        )
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(5),
            message="deactivation reported as a failure",
        )
        assert item.failure is not None
        # The admin's `spec.active: false` is final on its own: the run may fail before Kueue
        # writes its Evicted condition ("The workload is deactivated"), with the field's words.
        message = item.failure.message
        assert "(Deactivated)" in message, message
        assert "The workload is deactivated" in message or "spec.active: false" in message
        # (That the Job is stopped for good is the sandbox's Kueue, tested in
        # tests/integration/sandbox_kube/test_kueue_deactivation.py; the failed run's Job is
        # the agent's to clean up.)
        await until(lambda: agent.runs.get(item.id) is None, message="record released")


# --- JobSet startup order -------------------------------------------------------------------


def _workers_depend_on_the_driver(text: str) -> str:
    """jobset `depends_on.go`: the workers' Jobs are created once the driver's completed."""
    return text.replace(
        "        - name: workers\n          replicas: 1\n",
        "        - name: workers\n          replicas: 1\n"
        "          dependsOn: [{name: driver, status: Complete}]\n",
    )


async def test_jobset_waiting_on_depends_on_is_starting_then_fails_at_the_deadline(
    ops_env: Env,
) -> None:
    """The driver runs and never completes: the workers are never created. Not "running"
    (the old judgement, which would hold the slot forever): starting, then failed at the
    start deadline with what the JobSet waits for."""
    env = ops_env
    use_spec(env, "jobset-gke.yaml", "jobset-tpu", _workers_depend_on_the_driver)
    env.cluster.script("jobset.sigs.k8s.io/replicatedjob-name=driver", "run")
    item = push(env, "js-waits", "jobset-tpu")
    async with env.running(
        env.agent(config(env, "jobset-tpu", start_timeout_seconds=300))
    ) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(lambda: agent.runs.get(item.id), message="tracked")
        record = agent.runs.get(item.id)
        assert record is not None and agent.tracker is not None
        tracker = agent.tracker
        # The tracker judges the run on every event of its pods: once its cache holds the
        # running driver pod, that judgement has been made.
        await until(
            lambda: any(
                (p.get("status") or {}).get("phase") == "Running" for p in tracker.pods_of(record)
            ),
            advance=lambda: env.advance(1),
            message="the agent saw the driver run",
        )
        assert record.state is RunState.STARTING, record.state
        assert [j["metadata"]["name"] for j in env.kube.objects.list("jobs", namespace=NS)] == [
            record.name + "-driver-0"
        ]
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(30),
            within=30,
            message="failed at the start deadline",
        )
        assert item.failure is not None
        message = item.failure.message
        assert "did not start within 5m" in message, message
        assert "replicatedJob workers dependsOn driver being Complete" in message, message


async def test_jobset_depends_on_reached_runs_to_success(ops_env: Env) -> None:
    env = ops_env
    use_spec(env, "jobset-gke.yaml", "jobset-tpu", _workers_depend_on_the_driver)
    env.cluster.script("jobset.sigs.k8s.io/replicatedjob-name=driver", "succeed after=10s")
    env.cluster.script("jobset.sigs.k8s.io/replicatedjob-name=workers", "succeed after=10s")
    item = push(env, "js-in-turn", "jobset-tpu")
    async with env.running(env.agent(config(env, "jobset-tpu"))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(
            lambda: agent.runs.get(item.id) is None,
            advance=lambda: env.advance(2),
            within=30,
            message="run finished",
        )
        assert item.failure is None, item.failure
        assert succeeded(agent) == 1


# --- JobSet / Trainer creation failures (Events only) ---------------------------------------


async def test_jobset_child_jobs_refused_fail_the_run_with_the_event(ops_env: Env) -> None:
    env = ops_env
    # An admin's template the Job API refuses (a Job's pods may not restart Always): JobSet
    # only says so in JobCreationFailed Warning Events.
    use_spec(
        env,
        "jobset-gke.yaml",
        "jobset-tpu",
        lambda t: t.replace(
            "                spec:\n                  containers:\n",
            "                spec:\n                  restartPolicy: Always\n                  containers:\n",
        ),
    )
    item = push(env, "js-refused", "jobset-tpu")
    async with env.running(env.agent(config(env, "jobset-tpu", start_timeout_seconds=300))):
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(30),
            message="failed at the start deadline",
        )
        assert item.failure is not None
        assert "JobCreationFailed" in item.failure.message or (
            'Unsupported value: "Always"' in item.failure.message
        ), item.failure.message


async def test_trainjob_resources_not_created_fail_the_run_with_the_event(env: Env) -> None:
    await env.kube.load_crd_file(CRDS / "trainer.kubeflow.org_trainjobs.yaml")  # no JobSet CRD
    env.kube.objects.create(
        "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, ""
    )
    shutil.copy(EXAMPLE_SPECS / "trainjob.yaml", env.specs_dir / "trainjob.yaml")
    env.state.add_queue("trainjob")
    item = push(env, "tj-no-jobset", "trainjob")
    async with env.running(env.agent(config(env, "trainjob", start_timeout_seconds=300))):
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(30),
            message="failed at the start deadline",
        )
        assert item.failure is not None
        assert "TrainJob resources reconciliation failed" in item.failure.message, (
            item.failure.message
        )


# --- PyTorchJob ---------------------------------------------------------------------------


async def test_pytorchjob_restarting_is_still_running(ops_env: Env) -> None:
    env = ops_env
    use_spec(
        env,
        "pytorchjob.yaml",
        "pytorch-ddp",
        lambda t: t.replace("restartPolicy: Never", "restartPolicy: ExitCode").replace(
            "        pytorchReplicaSpecs:\n",
            "        runPolicy:\n          backoffLimit: 3\n        pytorchReplicaSpecs:\n",
        ),
    )
    # The master is killed once (137, retryable): the operator recreates it and it succeeds.
    env.cluster.script(
        "training.kubeflow.org/replica-type=master", "exit code=137 after=5s; succeed after=20s"
    )
    env.cluster.script("training.kubeflow.org/replica-type=worker", "succeed after=30s")
    item = push(env, "pt-restart", "pytorch-ddp")
    async with env.running(env.agent(config(env, "pytorch-ddp"))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        restarted: list[bool] = []  # a Restarting condition written (the agent watched it)
        env.kube.store.listeners.append(
            lambda storage, kind, obj: (
                restarted.append(True)
                if obj.get("kind") == "PyTorchJob"
                and any(
                    c["type"] == "Restarting" and c["status"] == "True"
                    for c in (obj.get("status") or {}).get("conditions") or []
                )
                else None
            )
        )
        await until(lambda: restarted, advance=lambda: env.advance(1), message="Restarting")
        for _ in range(20):
            env.advance(5)
            if agent.runs.get(item.id) is None:
                break
        await until(lambda: agent.runs.get(item.id) is None, message="run finished")
        assert item.failure is None, item.failure
        assert succeeded(agent) == 1


async def test_volcano_task_short_of_its_min_available_fails_the_run(ops_env: Env) -> None:
    """volcano `state/running.go`: the job's 2 successes meet its minAvailable 2, but its
    master task (minAvailable 1 by default) had none: Failed, and the master's pod says why."""
    env = ops_env
    use_spec(
        env,
        "volcano-job.yaml",
        "volcano",
        lambda t: t.replace("      minAvailable: 3\n", "      minAvailable: 2\n").replace(
            "          replicas: 2\n", "          replicas: 2\n          minAvailable: 1\n"
        ),
    )
    env.cluster.script("volcano.sh/task-spec=master", "exit code=3 after=2s")
    env.cluster.script("volcano.sh/task-spec=worker", "succeed after=10s")
    item = push(env, "vc-master-failed", "volcano")
    async with env.running(env.agent(config(env, "volcano"))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="claimed")
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(2),
            within=30,
            message="run failed",
        )
        assert item.failure is not None
        message = item.failure.message
        assert "exited with code 3" in message and "-master-0" in message, message
        assert "task master had 0 succeeded pods, fewer than its minAvailable 1" in message
        assert succeeded(agent) is None
