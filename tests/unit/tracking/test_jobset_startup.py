"""`tracking.jobset_startup.waiting`: jobset's InOrder startupPolicy and dependsOn, read from
the spec and `status.replicatedJobsStatus` (`startup_policy.go`, `depends_on.go`)."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.adapters.kube.cache import tracking_view
from launch_agent.tracking.jobset_startup import waiting


def jobset(
    rjs: list[dict[str, Any]],
    rows: dict[str, dict[str, int]],
    *,
    in_order: bool = False,
    conditions: tuple[str, ...] = (),
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicatedJobs": [{**rj, "template": {"spec": {"parallelism": 1}}} for rj in rjs]
    }
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": spec,
        "status": {
            "replicatedJobsStatus": [{"name": n, **row} for n, row in rows.items()],
            "conditions": [{"type": c, "status": "True"} for c in conditions],
        },
    }


DRIVER_WORKERS: list[dict[str, Any]] = [{"name": "driver"}, {"name": "workers", "replicas": 4}]
COMPLETE: list[dict[str, Any]] = [
    {"name": "init"},
    {"name": "train", "dependsOn": [{"name": "init", "status": "Complete"}]},
]
READY: list[dict[str, Any]] = [
    {"name": "init", "replicas": 2},
    {"name": "train", "dependsOn": [{"name": "init", "status": "Ready"}]},
]


@pytest.mark.parametrize(
    ("js", "expected"),
    [
        (
            jobset(DRIVER_WORKERS, {"driver": {"active": 1}}, in_order=True),
            "workers is created once driver",
        ),
        (jobset(DRIVER_WORKERS, {"driver": {"ready": 1}}, in_order=True), None),
        # The last replicatedJob has been created: the normal starting/running rules apply.
        (
            jobset(
                DRIVER_WORKERS, {"driver": {"ready": 1}, "workers": {"active": 1}}, in_order=True
            ),
            None,
        ),
        # Completed is for good: a driver that later stops being ready holds nothing back.
        (
            jobset(
                DRIVER_WORKERS,
                {"driver": {}},
                in_order=True,
                conditions=("StartupPolicyCompleted",),
            ),
            None,
        ),
        (jobset(DRIVER_WORKERS, {"driver": {"active": 1}}), None),  # no policy: all at once
        (
            jobset(COMPLETE, {"init": {"ready": 1}}),
            "train dependsOn init being Complete (0 of 1 Jobs succeeded)",
        ),
        (jobset(COMPLETE, {"init": {"succeeded": 1}}), None),
        (
            jobset(READY, {"init": {"ready": 1, "failed": 0}}),
            "train dependsOn init being Ready (1 of 2 Jobs ready)",
        ),
        (jobset(READY, {"init": {"ready": 1, "failed": 1}}), None),
    ],
)
def test_waiting(js: dict[str, Any], expected: str | None) -> None:
    said = waiting(js)
    if expected is None:
        assert said is None
    else:
        assert said is not None and expected in said


def test_the_slim_cache_keeps_what_waiting_reads() -> None:
    js = jobset(COMPLETE, {"init": {"ready": 1}})
    slim = tracking_view(jobset(COMPLETE, {"init": {"ready": 1}}))
    assert "template" not in slim["spec"]["replicatedJobs"][0]
    assert waiting(slim) == waiting(js) is not None


def test_mistyped_fields_read_as_absent() -> None:
    js = jobset(COMPLETE, {"init": {"ready": 1}})
    js["spec"]["replicatedJobs"][1]["dependsOn"] = "init"
    js["status"]["replicatedJobsStatus"] = {"init": 1}
    assert waiting(js) is None
    assert waiting({"kind": "JobSet", "spec": [], "status": None}) is None
