"""`tracking.build_pods`: which pod states end a Kaniko build, and what the reason names."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.tracking.build_pods import (
    BuildContext,
    BuildState,
    assess_build,
    job_outcome,
    unschedulable_pods,
)

CTX = BuildContext("registry.example/kaniko/executor:v9", "kaniko", "registry-docker-config")
RUNNING_JOB: dict[str, Any] = {"metadata": {"name": "build-abc"}, "status": {"active": 1}}


def job(ctype: str | None, reason: str = "", message: str = "") -> dict[str, Any]:
    conditions = []
    if ctype:
        conditions.append({"type": ctype, "status": "True", "reason": reason, "message": message})
    return {"metadata": {"name": "build-abc"}, "status": {"conditions": conditions}}


def pod(
    name: str = "build-abc-x1",
    *,
    phase: str = "Pending",
    waiting: tuple[str, str] | None = None,
    terminated: str | None = None,
    unschedulable: str | None = None,
    memory: str | None = "4Gi",
) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": "1", "memory": "2Gi"}}
    if memory:
        resources["limits"] = {"memory": memory}
    status: dict[str, Any] = {"phase": phase}
    state: dict[str, Any] = {}
    if waiting:
        state = {"waiting": {"reason": waiting[0], "message": waiting[1]}}
    if terminated:
        code = 137 if terminated == "OOMKilled" else 1
        state = {"terminated": {"reason": terminated, "exitCode": code}}
    if state:
        status["containerStatuses"] = [
            {"name": "kaniko", "image": CTX.kaniko_image, "state": state}
        ]
    if unschedulable is not None:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable,
            }
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": "kaniko",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"containers": [{"name": "kaniko", "resources": resources}]},
        "status": status,
    }


SCHED = "0/3 nodes are available: 3 Insufficient memory."
PULL = ("ImagePullBackOff", 'Back-off pulling image "registry.example/kaniko/executor:v9"')


@pytest.mark.parametrize(
    ("the_job", "pods", "waited", "state", "words", "ran"),
    [
        (job("Complete"), [], {}, BuildState.SUCCEEDED, [], True),
        (RUNNING_JOB, [], {}, BuildState.RUNNING, [], True),
        (RUNNING_JOB, [pod(phase="Running")], {}, BuildState.RUNNING, [], True),
        # The first failed pull may be a hiccup: only the back-off is final.
        (RUNNING_JOB, [pod(waiting=("ErrImagePull", "not found"))], {}, BuildState.RUNNING, [], True),
        (
            RUNNING_JOB,
            [pod(waiting=PULL)],
            {},
            BuildState.FAILED,
            ["Kaniko executor image registry.example/kaniko/executor:v9 cannot be pulled",
             "builder.kaniko-image", "Back-off pulling image"],
            False,
        ),
        (
            RUNNING_JOB,
            [pod(waiting=("InvalidImageName", "bad"))],
            {},
            BuildState.FAILED,
            ["is not a valid name", "builder.kaniko-image"],
            False,
        ),
        (
            RUNNING_JOB,
            [pod(waiting=("CreateContainerConfigError", 'secret "registry-docker-config" not found'))],
            {},
            BuildState.FAILED,
            ["Secret registry-docker-config", "docker config Secret", "namespace kaniko"],
            False,
        ),
        (
            RUNNING_JOB,
            [pod(waiting=("CreateContainerConfigError", 'secret "aws-keys" not found'))],
            {},
            BuildState.FAILED,
            ["Secret aws-keys is missing in namespace kaniko"],
            False,
        ),
        # OOMKilled is final at once (backoffLimit 0), before the Job's own condition.
        (
            RUNNING_JOB,
            [pod(phase="Failed", terminated="OOMKilled")],
            {},
            BuildState.FAILED,
            ["Kaniko executor in pod build-abc-x1 was OOMKilled", "memory limit 4Gi",
             "builder.kaniko-config"],
            True,
        ),
        (
            job("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            [pod(phase="Failed", terminated="OOMKilled", memory=None)],
            {},
            BuildState.FAILED,
            ["OOMKilled", "no limit is set"],
            True,
        ),
        (
            job("Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit"),
            [pod(phase="Failed", terminated="Error")],
            {},
            BuildState.FAILED,
            ["the build Job failed: BackoffLimitExceeded: Job has reached"],
            True,
        ),
        (job("Failed", "DeadlineExceeded"), [], {}, BuildState.FAILED, ["DeadlineExceeded"], True),
        (
            RUNNING_JOB,
            [pod(unschedulable=SCHED)],
            {"build-abc-x1": 600.0},
            BuildState.FAILED,
            ["build-abc-x1 could not be scheduled for 600s", SCHED,
             "unschedulable_timeout_seconds is 600", "cpu 1, memory 2Gi"],
            False,
        ),
        (RUNNING_JOB, [pod(unschedulable=SCHED)], {"build-abc-x1": 599.0}, BuildState.RUNNING,
         [], True),
        # A completed Job wins over anything a stale pod still shows.
        (job("Complete"), [pod(waiting=PULL)], {}, BuildState.SUCCEEDED, [], True),
    ],
)  # fmt: skip
def test_assess_build(
    the_job: dict[str, Any],
    pods: list[dict[str, Any]],
    waited: dict[str, float],
    state: BuildState,
    words: list[str],
    ran: bool,
) -> None:
    status = assess_build(the_job, pods, waited, 600.0, CTX)
    assert status.state is state, status.reason
    for word in words:
        assert word in status.reason
    assert status.ran is ran
    # Pod-level causes name the fix; a bare Job failure leaves it to the log tail.
    assert status.explained is (
        state is BuildState.FAILED and "the build Job failed" not in status.reason
    )


def test_an_unschedulable_pod_asks_for_a_recheck_at_its_deadline() -> None:
    pods = [pod("a", unschedulable=SCHED), pod("b", unschedulable="")]
    status = assess_build(RUNNING_JOB, pods, {"a": 100.0, "b": 450.0}, 600.0, CTX)
    assert status.state is BuildState.RUNNING
    assert status.recheck_in == pytest.approx(150.0)
    assert assess_build(RUNNING_JOB, [pod(phase="Running")], {}, 600.0, CTX).recheck_in is None


@pytest.mark.parametrize(
    ("conditions", "outcome"),
    [
        ([], None),
        ([{"type": "Complete", "status": "True"}], "succeeded"),
        ([{"type": "SuccessCriteriaMet", "status": "True"}], "succeeded"),
        ([{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}], "DeadlineExceeded"),
        ([{"type": "Failed", "status": "False", "reason": "X"}], None),
        ([{"type": "FailureTarget", "status": "True", "reason": "R", "message": "m"}], "R: m"),
    ],
)
def test_job_outcome(conditions: list[dict[str, Any]], outcome: str | None) -> None:
    assert job_outcome({"status": {"conditions": conditions}}) == outcome


def test_unschedulable_pods_names_only_pending_unschedulable_pods() -> None:
    pods = [pod("a", unschedulable=SCHED), pod("b", phase="Running"), pod("c", unschedulable="")]
    assert unschedulable_pods(pods) == {"a": SCHED, "c": ""}


@given(
    st.permutations(
        [
            pod("p1", waiting=PULL),
            pod("p2", phase="Failed", terminated="OOMKilled"),
            pod("p3", unschedulable=SCHED),
            pod("p4", phase="Running"),
        ]
    ),
    st.floats(min_value=0, max_value=1e4),
)
def test_the_verdict_does_not_depend_on_pod_order(pods: list[dict[str, Any]], wait: float) -> None:
    waited = {"p3": wait}
    first = assess_build(RUNNING_JOB, pods, waited, 600.0, CTX)
    again = assess_build(RUNNING_JOB, list(reversed(pods)), waited, 600.0, CTX)
    assert first == again
    assert first.state is BuildState.FAILED  # a pull back-off is final whatever else is there
