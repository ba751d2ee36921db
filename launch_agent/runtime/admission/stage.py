"""The one interface of the admission stage, called by the poller and the dispatcher.

- may I pop: `room` (how many more runs in total, None: unlimited) and `queue_caps` (per-queue
  bounds for this round; queues not named are bounded only by `room`), asked by the poller;
- admit this run: `holding` (the popped item holds its place from the pop until its run is
  known or it failed), `admit` (the decisions render applies: `render.decisions.Admission`,
  or `NotAdmitted`), `created` (the workload exists and the item is acked), called by the
  dispatcher; leaving `holding` releases the item.

`slots.MaxJobs` (W&B's `max_jobs`), `quota.QuotaAdmission` (`quota.mode: agent`) and
`kueue.KueueAdmission` (`quota.mode: kueue`) are interchangeable behind it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render.decisions import Admission
from launch_agent.runtime.runs import RunRecord


class AdmissionStage(Protocol):
    def room(self, inflight: int) -> int | None: ...

    def queue_caps(self, queues: Sequence[str]) -> Mapping[str, int]: ...

    def holding(self, queue: str, rqi_id: str) -> AbstractContextManager[None]: ...

    def admit(
        self, rqi_id: str, queue: str, spec: QueueSpec, run_spec: Mapping[str, Any]
    ) -> Admission: ...

    def created(self, record: RunRecord) -> None: ...
