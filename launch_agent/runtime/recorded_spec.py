"""The item's runSpec recorded on its workload: written by the dispatcher, read by the finisher.

A preempted run is pushed back onto its queue from it, also by a process that only adopted the
workload (Kubernetes is the durable record, runtime/runs.py), and a replica that took over asks
W&B whether a requeue it would send landed already by the run id and resume count in it. So the
record is the item's runSpec as compact JSON in one annotation (`RUN_SPEC`), without the
submitter's `_wandb_api_key`, and only up to `MAX_RUN_SPEC_ANNOTATION` bytes: annotations share
a 256 KiB budget, and a run whose spec is not recorded is failed instead of requeued.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from launch_agent.model.safe_load import load_json
from launch_agent.model.sweeps import SCHEDULER_MARK
from launch_agent.runtime.runs import RUN_SPEC
from launch_agent.tracking.views import Meta

MAX_RUN_SPEC_ANNOTATION = 64 * 1024


def record_run_spec(run_spec: Mapping[str, Any], *, scheduler: bool) -> dict[str, str]:
    """The annotations that record an item's runSpec (and, for a sweep scheduler, its mark)."""
    text = json.dumps(
        {k: v for k, v in run_spec.items() if k != "_wandb_api_key"},
        separators=(",", ":"),
        default=str,
    )
    recorded = {RUN_SPEC: text} if len(text) <= MAX_RUN_SPEC_ANNOTATION else {}
    if scheduler:
        recorded[SCHEDULER_MARK] = "true"
    return recorded


def recorded_run_spec(workload: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The runSpec a workload records; None when it records none (or not a JSON object)."""
    text = Meta(workload).annotation(RUN_SPEC)
    if text is None:
        return None
    try:
        spec = load_json(text)
    except ValueError:
        return None
    return spec if isinstance(spec, dict) else None


def resume_count(run_spec: Mapping[str, Any]) -> int:
    """How often the run was requeued already (W&B's `_resume_count`; 0 when unreadable)."""
    resumes = run_spec.get("_resume_count", 0)
    return resumes if isinstance(resumes, int) else 0
