"""Job and pod status tables: every case the issue names, as the API server writes it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from launch_agent.model.run_state import Reason, RunState
from launch_agent.tracking import TrackingPolicy, assess, assess_deleted
from tests.unit.tracking.shapes import (
    NOW,
    UNSCHEDULABLE_MSG,
    cond,
    container_status,
    job,
    pod,
    ts,
    unschedulable_pod,
)

RUNNING_POD = pod("run-abc-x7k2p", "Running", container_status(running=True))
OOM_POD = pod("run-abc-x7k2p", "Failed", container_status(terminated=("OOMKilled", 137)))
EXIT3_POD = pod("run-abc-x7k2p", "Failed", container_status(terminated=("Error", 3)))
PULL_BACKOFF = pod(
    "run-abc-x7k2p",
    "Pending",
    container_status(
        image="ghcr.io/acme/trian:1.2",
        waiting=("ImagePullBackOff", 'Back-off pulling image "ghcr.io/acme/trian:1.2"'),
    ),
)
ERR_IMAGE_PULL = pod(
    "run-abc-x7k2p",
    "Pending",
    container_status(
        image="ghcr.io/acme/trian:1.2",
        waiting=("ErrImagePull", "rpc error: code = NotFound desc = failed to pull and unpack"),
    ),
)
INVALID_IMAGE = pod(
    "run-abc-x7k2p",
    "Pending",
    container_status(
        image="ghcr.io/Acme/Train:latest",
        waiting=("InvalidImageName", 'Failed to apply default image tag "ghcr.io/Acme/Train"'),
    ),
)
CONFIG_ERROR = pod(
    "run-abc-x7k2p",
    "Pending",
    container_status(waiting=("CreateContainerConfigError", 'secret "wandb-api-key" not found')),
)
CRASH_LOOP = pod(
    "run-abc-x7k2p",
    "Running",
    container_status(
        waiting=("CrashLoopBackOff", "back-off 40s restarting failed container=main"),
        last_terminated=("Error", 1),
    ),
)
CRASH_LOOP_OOM = pod(
    "run-abc-x7k2p",
    "Running",
    container_status(
        waiting=("CrashLoopBackOff", "back-off 40s restarting failed container=main"),
        last_terminated=("OOMKilled", 137),
    ),
)
PREEMPTED_POD = pod(
    "run-abc-x7k2p",
    "Failed",
    container_status(terminated=("Error", 143)),
    conditions=[
        cond(
            "DisruptionTarget",
            reason="PreemptionByScheduler",
            message="Preempted in order to admit critical pod",
        )
    ],
)
DRAINED_POD = pod(
    "run-abc-x7k2p",
    "Failed",
    container_status(terminated=("Error", 143)),
    conditions=[
        cond("DisruptionTarget", reason="EvictionByEvictionAPI", message="Eviction API: evicting")
    ],
)
EVICTED_POD = pod(
    "run-abc-x7k2p",
    "Failed",
    reason="Evicted",
    message="The node was low on resource: memory. Threshold quantity: 100Mi, available: 50Mi.",
)

CASES: list[tuple[str, dict[str, Any], list[dict[str, Any]], RunState, Reason | None]] = [
    ("just created", job(), [], RunState.STARTING, None),
    ("active, pod pending", job(active=1), [pod()], RunState.STARTING, None),
    ("pod running", job(active=1), [RUNNING_POD], RunState.RUNNING, None),
    ("job reports ready", job(active=1, ready=1), [], RunState.RUNNING, None),
    ("suspended by spec", job(suspend=True), [], RunState.QUEUED, None),
    (
        "suspended condition (Kueue)",
        job(cond("Suspended", reason="JobSuspended", message="Job suspended")),
        [],
        RunState.QUEUED,
        None,
    ),
    (
        "complete",
        job(cond("SuccessCriteriaMet"), cond("Complete"), succeeded=1),
        [pod("run-abc-x7k2p", "Succeeded", container_status(terminated=("Completed", 0)))],
        RunState.SUCCEEDED,
        None,
    ),
    ("success criteria met first", job(cond("SuccessCriteriaMet")), [], RunState.SUCCEEDED, None),
    (
        "backoff limit, no pods left",
        job(
            cond(
                "Failed",
                reason="BackoffLimitExceeded",
                message="Job has reached the specified backoff limit",
            ),
            failed=1,
        ),
        [],
        RunState.FAILED,
        Reason.BACKOFF_LIMIT_EXCEEDED,
    ),
    (
        "failure target before failed",
        job(cond("FailureTarget", reason="BackoffLimitExceeded")),
        [],
        RunState.FAILED,
        Reason.BACKOFF_LIMIT_EXCEEDED,
    ),
    (
        "deadline exceeded beats the pod's exit code",
        job(
            cond(
                "Failed",
                reason="DeadlineExceeded",
                message="Job was active longer than specified deadline",
            )
        ),
        [EXIT3_POD],
        RunState.FAILED,
        Reason.DEADLINE_EXCEEDED,
    ),
    (
        "backoff limit explained by OOMKilled",
        job(cond("Failed", reason="BackoffLimitExceeded"), failed=1),
        [OOM_POD],
        RunState.FAILED,
        Reason.OOM_KILLED,
    ),
    (
        "backoff limit explained by exit code",
        job(cond("Failed", reason="BackoffLimitExceeded"), failed=1),
        [EXIT3_POD],
        RunState.FAILED,
        Reason.EXIT_CODE,
    ),
    (
        "pod failure policy explained by OOMKilled",
        job(
            cond(
                "Failed",
                reason="PodFailurePolicy",
                message="Container main for pod ml/run-abc-x7k2p failed with exit code 137 matching FailJob rule at index 0",
            )
        ),
        [OOM_POD],
        RunState.FAILED,
        Reason.OOM_KILLED,
    ),
    (
        "failed because its pod was preempted",
        job(cond("Failed", reason="BackoffLimitExceeded"), failed=1),
        [PREEMPTED_POD],
        RunState.PREEMPTED,
        Reason.PREEMPTED,
    ),
    (
        "failed because its pod was drained",
        job(cond("Failed", reason="BackoffLimitExceeded"), failed=1),
        [DRAINED_POD],
        # A drain is the infrastructure's doing: requeued, not failed (issue 14).
        RunState.PREEMPTED,
        Reason.EVICTED,
    ),
    (
        "failed because its pod was evicted by the kubelet",
        job(cond("Failed", reason="BackoffLimitExceeded"), failed=1),
        [EVICTED_POD],
        # Node memory pressure is the node's, not the run's.
        RunState.PREEMPTED,
        Reason.EVICTED,
    ),
    # The kubelet keeps retrying a pull whose error may recover: a warning within the grace.
    ("image pull back-off", job(active=1), [PULL_BACKOFF], RunState.STARTING, Reason.IMAGE_PULL),
    (
        "image pull back-off past the grace",
        job(active=1),
        [
            {
                **PULL_BACKOFF,
                "metadata": {
                    **PULL_BACKOFF["metadata"],
                    "creationTimestamp": ts(timedelta(minutes=6)),
                },
            }
        ],
        RunState.FAILED,
        Reason.IMAGE_PULL,
    ),
    (
        "a pull of an image that does not exist fails at once",
        job(active=1),
        [ERR_IMAGE_PULL],
        RunState.FAILED,
        Reason.IMAGE_PULL,
    ),
    (
        "invalid image name",
        job(active=1),
        [INVALID_IMAGE],
        RunState.FAILED,
        Reason.INVALID_IMAGE_NAME,
    ),
    (
        "create container config error within its grace",
        job(active=1),
        [CONFIG_ERROR],
        RunState.STARTING,
        Reason.CREATE_CONTAINER_CONFIG_ERROR,
    ),
    (
        "create container config error past its grace",
        job(active=1),
        [
            {
                **CONFIG_ERROR,
                "metadata": {
                    **CONFIG_ERROR["metadata"],
                    "creationTimestamp": ts(timedelta(minutes=6)),
                },
            }
        ],
        RunState.FAILED,
        Reason.CREATE_CONTAINER_CONFIG_ERROR,
    ),
    (
        "crash loop is a warning",
        job(active=1),
        [CRASH_LOOP],
        RunState.RUNNING,
        Reason.CRASH_LOOP_BACK_OFF,
    ),
    (
        "crash loop of OOMs says OOM",
        job(active=1),
        [CRASH_LOOP_OOM],
        RunState.RUNNING,
        Reason.OOM_KILLED,
    ),
    (
        "unschedulable within the deadline",
        job(active=1),
        [unschedulable_pod(timedelta(minutes=2))],
        RunState.STARTING,
        Reason.UNSCHEDULABLE,
    ),
    (
        "unschedulable past the deadline",
        job(active=1),
        [unschedulable_pod(timedelta(minutes=11))],
        RunState.FAILED,
        Reason.UNSCHEDULABLE,
    ),
    (
        "pod OOMKilled, Job may retry",
        job(active=0, failed=1),
        [OOM_POD],
        RunState.STARTING,
        Reason.OOM_KILLED,
    ),
    (
        "retried pod running after an OOM",
        job(active=1, failed=1),
        [OOM_POD, pod("run-abc-z9q", "Running", container_status(running=True))],
        RunState.RUNNING,
        Reason.OOM_KILLED,
    ),
    (
        "being deleted",
        {**job(active=1), "metadata": {"name": "run-abc", "deletionTimestamp": ts()}},
        [RUNNING_POD],
        RunState.STOPPED,
        Reason.STOPPED,
    ),
    (
        "complete and being deleted stays complete",
        {**job(cond("Complete")), "metadata": {"name": "run-abc", "deletionTimestamp": ts()}},
        [],
        RunState.SUCCEEDED,
        None,
    ),
    (
        "suspended with a leftover stuck pod stays queued",
        job(suspend=True),
        [PULL_BACKOFF],
        RunState.QUEUED,
        None,
    ),
]


@pytest.mark.parametrize(
    ("workload", "pods", "state", "reason"),
    [pytest.param(w, p, s, r, id=name) for name, w, p, s, r in CASES],
)
def test_job_and_pods(
    workload: dict[str, Any], pods: list[dict[str, Any]], state: RunState, reason: Reason | None
) -> None:
    got_state, diagnosis = assess(workload, pods, NOW)
    assert got_state is state
    assert (diagnosis.reason if diagnosis else None) is reason
    if diagnosis is not None:
        assert diagnosis.terminal is state.terminal
        assert "\n" not in diagnosis.message


MESSAGES: list[tuple[str, dict[str, Any], list[dict[str, Any]], list[str]]] = [
    (
        "OOM names the container",
        job(cond("Failed", reason="BackoffLimitExceeded")),
        [OOM_POD],
        ["container main", "OOMKilled", "memory limit"],
    ),
    (
        "exit code N",
        job(cond("Failed", reason="BackoffLimitExceeded")),
        [EXIT3_POD],
        ["exited with code 3"],
    ),
    (
        "pull names the image",
        job(active=1),
        [PULL_BACKOFF],
        ["ghcr.io/acme/trian:1.2", "Back-off pulling"],
    ),
    ("invalid image quoted", job(active=1), [INVALID_IMAGE], ["'ghcr.io/Acme/Train:latest'"]),
    (
        "config error names the secret",
        job(active=1),
        [CONFIG_ERROR],
        ['secret "wandb-api-key" not found'],
    ),
    (
        "scheduler message verbatim",
        job(active=1),
        [unschedulable_pod(timedelta(minutes=12))],
        ["cannot be scheduled for 12m00s", "3 Insufficient nvidia.com/gpu", "gave up after 10m00s"],
    ),
    (
        "deadline",
        job(
            cond(
                "Failed",
                reason="DeadlineExceeded",
                message="Job was active longer than specified deadline",
            )
        ),
        [],
        ["Job run-abc", "activeDeadlineSeconds", "active longer than specified deadline"],
    ),
    (
        "evicted",
        job(cond("Failed", reason="BackoffLimitExceeded")),
        [EVICTED_POD],
        ["evicted", "low on resource: memory"],
    ),
]


@pytest.mark.parametrize(
    ("workload", "pods", "needles"), [pytest.param(w, p, n, id=i) for i, w, p, n in MESSAGES]
)
def test_messages_say_what_to_act_on(
    workload: dict[str, Any], pods: list[dict[str, Any]], needles: list[str]
) -> None:
    _, diagnosis = assess(workload, pods, NOW)
    assert diagnosis is not None
    for needle in needles:
        assert needle in diagnosis.message


def test_diagnosis_carries_container_image_and_detail() -> None:
    _, pull = assess(job(active=1), [PULL_BACKOFF], NOW)
    assert pull is not None
    assert (pull.container, pull.image, pull.pod) == (
        "main",
        "ghcr.io/acme/trian:1.2",
        "run-abc-x7k2p",
    )
    _, oom = assess(job(cond("Failed", reason="BackoffLimitExceeded")), [OOM_POD], NOW)
    assert oom is not None
    assert (oom.container, oom.exit_code) == ("main", 137)
    _, unsched = assess(job(active=1), [unschedulable_pod(timedelta(hours=1))], NOW)
    assert unsched is not None
    assert unsched.detail == unsched.scheduler_message == UNSCHEDULABLE_MSG
    assert pull.scheduler_message is None


@pytest.mark.parametrize(
    ("deadline", "state"),
    [(timedelta(minutes=1), RunState.FAILED), (timedelta(minutes=30), RunState.STARTING)],
)
def test_unschedulable_deadline_is_configurable(deadline: timedelta, state: RunState) -> None:
    policy = TrackingPolicy(unschedulable_deadline=deadline)
    got, _ = assess(job(active=1), [unschedulable_pod(timedelta(minutes=5))], NOW, policy)
    assert got is state


@pytest.mark.parametrize(
    ("workload", "state", "reason"),
    [
        (job(active=1), RunState.STOPPED, Reason.DELETED),
        (job(cond("Complete")), RunState.SUCCEEDED, None),
        (
            job(cond("Failed", reason="BackoffLimitExceeded")),
            RunState.FAILED,
            Reason.BACKOFF_LIMIT_EXCEEDED,
        ),
    ],
    ids=["deleted while running", "TTL after success", "TTL after failure"],
)
def test_deleted_workload(workload: dict[str, Any], state: RunState, reason: Reason | None) -> None:
    got, diagnosis = assess_deleted(workload, [], NOW)
    assert got is state
    assert (diagnosis.reason if diagnosis else None) is reason
