"""A Kueue Workload condition whose `reason` is not a string reads as no reason (found by the
fixture fuzzing of test_upstream_fixtures: a list there raised TypeError, unhashable)."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.tracking import kueue


@pytest.mark.parametrize("reason", [[], {}, ["Inadmissible"], 3, None])
def test_a_mistyped_reason_is_pending_not_a_crash(reason: Any) -> None:
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "job-j-1a2b3", "namespace": "ml"},
        "spec": {"active": True},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": reason}]},
    }
    assert kueue.workload_status(workload).state is kueue.KueueState.PENDING
