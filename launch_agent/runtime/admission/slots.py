"""W&B's `max_jobs` as the admission stage: a number of slots, nothing else decided."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render.decisions import NO_DECISIONS, Admission
from launch_agent.runtime.poll_policy import capacity
from launch_agent.runtime.runs import RunRecord


class MaxJobs:
    """`max_jobs` runs at once; -1 is unlimited."""

    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max_jobs

    def room(self, inflight: int) -> int | None:
        return capacity(self.max_jobs, inflight)

    def queue_caps(self, queues: Sequence[str]) -> Mapping[str, int]:
        return {}

    @contextmanager
    def holding(self, queue: str, rqi_id: str) -> Iterator[None]:
        yield  # a popped item counts in `RunTable.inflight` from the pop on

    def admit(
        self, rqi_id: str, queue: str, spec: QueueSpec, run_spec: Mapping[str, Any]
    ) -> Admission:
        return NO_DECISIONS

    def created(self, record: RunRecord) -> None:
        pass
