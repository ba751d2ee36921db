"""`tracking.volcano.shortfalls`: volcano `state/running.go`'s task rule, read from a dump or
from the informers' slim cache."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.adapters.kube.cache import tracking_view
from launch_agent.tracking.volcano import Shortfall, shortfalls


def job(min_available: int | None, tasks: list[dict[str, Any]], counted: dict[str, Any]) -> Any:
    spec: dict[str, Any] = {"tasks": tasks, "schedulerName": "volcano"}
    if min_available is not None:
        spec["minAvailable"] = min_available
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "vj"},
        "spec": spec,
        "status": {"state": {"phase": "Failed"}, "taskStatusCount": counted},
    }


MASTER_FAILED = {"master": {"phase": {"Failed": 1}}, "worker": {"phase": {"Succeeded": 2}}}


@pytest.mark.parametrize(
    ("min_available", "worker", "counted", "expected"),
    [
        # job min defaults to the tasks' sum (1 + 1): the master task's own minimum applies.
        (None, {"minAvailable": 1}, MASTER_FAILED, (Shortfall("master", 0, 1),)),
        (2, {"minAvailable": 1}, MASTER_FAILED, (Shortfall("master", 0, 1),)),
        # job min 2 < 1 + 3 (worker's minAvailable defaults to its replicas): no task rule.
        (2, {}, MASTER_FAILED, ()),
        # a task with no taskStatusCount entry is skipped, as running.go does.
        (None, {"minAvailable": 1}, {"worker": {"phase": {"Succeeded": 1}}}, ()),
        (
            None,
            {"minAvailable": 2},
            {"worker": {"phase": {"Succeeded": 1}}},
            (Shortfall("worker", 1, 2),),
        ),
    ],
)
def test_shortfalls(
    min_available: int | None,
    worker: dict[str, Any],
    counted: dict[str, Any],
    expected: tuple[Shortfall, ...],
) -> None:
    tasks = [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 3, **worker}]
    assert shortfalls(job(min_available, tasks, counted)) == expected


def test_the_slim_cache_keeps_what_shortfalls_reads() -> None:
    tasks = [
        {"name": "master", "replicas": 1, "template": {"spec": {"containers": []}}},
        {"name": "worker", "replicas": 3, "minAvailable": 1, "template": {}},
    ]
    full = job(2, tasks, MASTER_FAILED)
    slim = tracking_view(job(2, [dict(t) for t in tasks], MASTER_FAILED))
    assert "template" not in slim["spec"]["tasks"][0]
    assert shortfalls(slim) == shortfalls(full) == (Shortfall("master", 0, 1),)


def test_mistyped_fields_read_as_absent() -> None:
    broken = job(None, [{"name": "master", "replicas": "one"}], {"master": []})
    assert shortfalls(broken) == ()
    assert "spec" not in tracking_view({**broken, "spec": 3})
    assert shortfalls({**broken, "spec": {"tasks": "x", "minAvailable": [1]}}) == ()
