"""Status tables for each custom resource kind, shaped after the CRD status schemas."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.model.run_state import Reason, RunState
from launch_agent.tracking import assess
from tests.unit.tracking.shapes import NOW, cond, container_status, custom, pod


def rjs(
    name: str,
    active: int = 0,
    ready: int = 0,
    succeeded: int = 0,
    failed: int = 0,
    suspended: int = 0,
) -> dict[str, Any]:
    return {
        "name": name,
        "active": active,
        "ready": ready,
        "succeeded": succeeded,
        "failed": failed,
        "suspended": suspended,
    }


def jobset(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return custom("jobset.x-k8s.io/v1alpha2", "JobSet", status, **spec)


def pytorchjob(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return custom("kubeflow.org/v1", "PyTorchJob", status, **spec)


def trainjob(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return custom("trainer.kubeflow.org/v1alpha1", "TrainJob", status, **spec)


def lws(status: dict[str, Any]) -> dict[str, Any]:
    return custom("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", status)


def rayjob(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return custom("ray.io/v1", "RayJob", status, **spec)


def vcjob(phase: str, reason: str = "", message: str = "", **counts: int) -> dict[str, Any]:
    return custom(
        "batch.volcano.sh/v1alpha1",
        "Job",
        {
            "state": {"phase": phase, "reason": reason, "message": message},
            "minAvailable": 2,
            **counts,
        },
    )


CASES: list[tuple[str, dict[str, Any], RunState, Reason | None]] = [
    # JobSet: replicatedJobsStatus is a list of per-replicated-job counts.
    ("jobset new", jobset({}), RunState.STARTING, None),
    (
        "jobset active",
        jobset({"replicatedJobsStatus": [rjs("workers", active=2)]}),
        RunState.STARTING,
        None,
    ),
    (
        "jobset ready",
        jobset({"replicatedJobsStatus": [rjs("leader", ready=1), rjs("workers", active=2)]}),
        RunState.RUNNING,
        None,
    ),
    ("jobset suspended spec", jobset({}, suspend=True), RunState.QUEUED, None),
    (
        "jobset children suspended",
        jobset({"replicatedJobsStatus": [rjs("workers", suspended=2)]}),
        RunState.QUEUED,
        None,
    ),
    (
        "jobset suspended condition",
        jobset(
            {
                "conditions": [
                    cond("Suspended", reason="SuspendedJobs", message="jobset is suspended")
                ]
            }
        ),
        RunState.QUEUED,
        None,
    ),
    (
        "jobset completed",
        jobset(
            {
                "conditions": [
                    cond(
                        "Completed",
                        reason="AllJobsCompleted",
                        message="jobset completed successfully",
                    )
                ],
                "terminalState": "Completed",
            }
        ),
        RunState.SUCCEEDED,
        None,
    ),
    (
        "jobset failed",
        jobset(
            {
                "conditions": [
                    cond(
                        "Failed",
                        reason="FailedJobs",
                        message="jobset failed due to reaching max number of restarts",
                    )
                ],
                "terminalState": "Failed",
            }
        ),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    (
        "jobset terminal state only",
        jobset({"terminalState": "Failed"}),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    # PyTorchJob (training-operator v1): JobCondition types.
    (
        "pytorch created",
        pytorchjob({"conditions": [cond("Created", reason="PyTorchJobCreated")]}),
        RunState.STARTING,
        None,
    ),
    (
        "pytorch running",
        pytorchjob(
            {
                "conditions": [
                    cond("Created", reason="PyTorchJobCreated"),
                    cond("Running", reason="PyTorchJobRunning"),
                ]
            }
        ),
        RunState.RUNNING,
        None,
    ),
    (
        "pytorch suspended by runPolicy",
        pytorchjob({}, runPolicy={"suspend": True}),
        RunState.QUEUED,
        None,
    ),
    (
        "pytorch succeeded",
        pytorchjob(
            {
                "conditions": [
                    cond("Running", "False"),
                    cond(
                        "Succeeded",
                        reason="PyTorchJobSucceeded",
                        message="PyTorchJob ml/run-abc successfully completed.",
                    ),
                ]
            }
        ),
        RunState.SUCCEEDED,
        None,
    ),
    (
        "pytorch failed",
        pytorchjob(
            {
                "conditions": [
                    cond(
                        "Failed",
                        reason="PyTorchJobFailed",
                        message="PyTorchJob ml/run-abc has failed because 1 Master replica(s) failed.",
                    )
                ]
            }
        ),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    # TrainJob (Trainer v2).
    ("trainjob new", trainjob({}), RunState.STARTING, None),
    (
        "trainjob running",
        trainjob({"jobsStatus": [rjs("node", active=2, ready=2)]}),
        RunState.RUNNING,
        None,
    ),
    (
        "trainjob suspended",
        trainjob({"conditions": [cond("Suspended", reason="Suspended")]}),
        RunState.QUEUED,
        None,
    ),
    (
        "trainjob complete",
        trainjob({"conditions": [cond("Complete", reason="JobsCompleted")]}),
        RunState.SUCCEEDED,
        None,
    ),
    (
        "trainjob failed",
        trainjob({"conditions": [cond("Failed", reason="JobsFailed", message="jobset failed")]}),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    # LeaderWorkerSet: serves until deleted.
    (
        "lws progressing",
        lws({"conditions": [cond("Progressing", reason="GroupsProgressing")], "replicas": 1}),
        RunState.STARTING,
        None,
    ),
    (
        "lws available",
        lws({"conditions": [cond("Available", reason="AllGroupsReady")], "readyReplicas": 1}),
        RunState.RUNNING,
        None,
    ),
    ("lws ready replicas", lws({"readyReplicas": 2}), RunState.RUNNING, None),
    # RayJob: jobDeploymentStatus + jobStatus.
    ("ray initializing", rayjob({"jobDeploymentStatus": "Initializing"}), RunState.STARTING, None),
    (
        "ray pending job",
        rayjob({"jobDeploymentStatus": "Running", "jobStatus": "PENDING"}),
        RunState.STARTING,
        None,
    ),
    (
        "ray running",
        rayjob({"jobDeploymentStatus": "Running", "jobStatus": "RUNNING"}),
        RunState.RUNNING,
        None,
    ),
    ("ray suspended", rayjob({"jobDeploymentStatus": "Suspended"}), RunState.QUEUED, None),
    ("ray suspend spec", rayjob({}, suspend=True), RunState.QUEUED, None),
    (
        "ray complete",
        rayjob({"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}),
        RunState.SUCCEEDED,
        None,
    ),
    (
        "ray app failed",
        rayjob(
            {
                "jobDeploymentStatus": "Complete",
                "jobStatus": "FAILED",
                "reason": "AppFailed",
                "message": "Job entrypoint command failed with exit code 1",
            }
        ),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    (
        "ray deadline",
        rayjob(
            {
                "jobDeploymentStatus": "Failed",
                "reason": "DeadlineExceeded",
                "message": "The RayJob has passed the activeDeadlineSeconds.",
            }
        ),
        RunState.FAILED,
        Reason.DEADLINE_EXCEEDED,
    ),
    (
        "ray validation failed",
        rayjob({"jobDeploymentStatus": "ValidationFailed", "reason": "ValidationFailed"}),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    (
        "ray stopped",
        rayjob({"jobDeploymentStatus": "Complete", "jobStatus": "STOPPED"}),
        RunState.STOPPED,
        Reason.STOPPED,
    ),
    # Volcano Job: status.state.phase.
    ("volcano pending gang", vcjob("Pending"), RunState.QUEUED, None),
    ("volcano gang admitted, pods pending", vcjob("Pending", pending=2), RunState.STARTING, None),
    ("volcano running", vcjob("Running"), RunState.RUNNING, None),
    ("volcano restarting", vcjob("Restarting"), RunState.RUNNING, None),
    ("volcano completed", vcjob("Completed"), RunState.SUCCEEDED, None),
    (
        "volcano failed",
        vcjob("Failed", "PodFailed", "task worker failed"),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    (
        "volcano terminated",
        vcjob("Terminated", "PodEvicted"),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
    (
        "volcano aborted",
        vcjob("Aborted", "Aborted", "aborted by user"),
        RunState.STOPPED,
        Reason.STOPPED,
    ),
    # An unknown kind falls back to common conditions.
    ("unknown kind new", custom("example.com/v1", "Thing", {}), RunState.STARTING, None),
    (
        "unknown kind succeeded",
        custom("example.com/v1", "Thing", {"conditions": [cond("Succeeded")]}),
        RunState.SUCCEEDED,
        None,
    ),
    (
        "unknown kind failed",
        custom("example.com/v1", "Thing", {"conditions": [cond("Failed", reason="Boom")]}),
        RunState.FAILED,
        Reason.WORKLOAD_FAILED,
    ),
]


@pytest.mark.parametrize(
    ("workload", "state", "reason"), [pytest.param(w, s, r, id=i) for i, w, s, r in CASES]
)
def test_custom_resource_status(
    workload: dict[str, Any], state: RunState, reason: Reason | None
) -> None:
    got, diagnosis = assess(workload, [], NOW)
    assert got is state
    assert (diagnosis.reason if diagnosis else None) is reason


def test_failed_custom_resource_message_keeps_controller_words() -> None:
    _, diagnosis = assess(
        pytorchjob(
            {
                "conditions": [
                    cond(
                        "Failed",
                        reason="PyTorchJobFailed",
                        message="PyTorchJob ml/run-abc has failed because 1 Master replica(s) failed.",
                    )
                ]
            }
        ),
        [],
        NOW,
    )
    assert diagnosis is not None
    assert diagnosis.message.startswith("PyTorchJob run-abc failed (PyTorchJobFailed)")
    assert "1 Master replica(s) failed" in diagnosis.message


def test_volcano_job_is_named_as_such() -> None:
    _, diagnosis = assess(vcjob("Failed", "PodFailed"), [], NOW)
    assert diagnosis is not None
    assert diagnosis.message.startswith("Volcano Job run-abc failed")


def test_failed_pytorchjob_explained_by_worker_oom() -> None:
    # A JobSet/PyTorchJob pod carries the child's labels; the runtime hands us the run's pods.
    oom = pod(
        "run-abc-worker-0", "Failed", container_status("pytorch", terminated=("OOMKilled", 137))
    )
    state, diagnosis = assess(
        pytorchjob({"conditions": [cond("Failed", reason="PyTorchJobFailed")]}), [oom], NOW
    )
    assert state is RunState.FAILED
    assert diagnosis is not None
    assert (diagnosis.reason, diagnosis.container) == (Reason.OOM_KILLED, "pytorch")


# The registry's "not found" cannot recover: the run fails at the first ErrImagePull.
PULL_NOT_FOUND = (
    "ErrImagePull",
    'failed to pull and unpack image "ghcr.io/acme/train:1.2": failed to resolve reference'
    ' "ghcr.io/acme/train:1.2": ghcr.io/acme/train:1.2: not found',
)


def test_image_pull_fails_an_admitted_volcano_gang_stuck_in_pending() -> None:
    stuck = pod("run-abc-worker-0", "Pending", container_status(waiting=PULL_NOT_FOUND))
    state, diagnosis = assess(vcjob("Pending", pending=1, running=1), [stuck], NOW)
    assert state is RunState.FAILED
    assert diagnosis is not None
    assert diagnosis.reason is Reason.IMAGE_PULL


def test_image_pull_fails_a_jobset_that_never_fails_itself() -> None:
    stuck = pod("run-abc-workers-0-0", "Pending", container_status(waiting=PULL_NOT_FOUND))
    state, diagnosis = assess(
        jobset({"replicatedJobsStatus": [rjs("workers", active=1)]}), [stuck], NOW
    )
    assert state is RunState.FAILED
    assert diagnosis is not None
    assert diagnosis.reason is Reason.IMAGE_PULL
