"""Workload and pod status -> run state and diagnosis. Pure: no I/O, no asyncio.

`assess(workload, pods, now, events=..., kueue_workload=..., main=...)` is the entry point,
shared by the runtime's tracker and `launch-agent diagnose`; `assess_deleted` for a workload
that is gone;
`pod_warnings` for every warning the pods show and `new_warnings` to report each once per run.
The shapes of the objects read, and the one `metadata` reader every layer uses, are `views.py`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from launch_agent.model.run_state import Diagnosis
from launch_agent.tracking.assess import (
    DEFAULT_POLICY,
    Assessment,
    TrackingPolicy,
    assess,
    assess_deleted,
    steady_until,
)
from launch_agent.tracking.pods import MainContainer, main_container_of, summarize_pods
from launch_agent.tracking.warnings import new_warnings


def pod_warnings(
    pods: Sequence[Mapping[str, Any]], now: datetime, policy: TrackingPolicy = DEFAULT_POLICY
) -> tuple[Diagnosis, ...]:
    """Every non-terminal problem the pods show, most important first."""
    summary = summarize_pods(pods, now, policy.unschedulable_deadline, graces=policy.graces)
    return tuple(d for d in summary.warnings if not d.terminal)


__all__ = [
    "DEFAULT_POLICY",
    "Assessment",
    "MainContainer",
    "TrackingPolicy",
    "assess",
    "assess_deleted",
    "main_container_of",
    "new_warnings",
    "pod_warnings",
    "steady_until",
]
