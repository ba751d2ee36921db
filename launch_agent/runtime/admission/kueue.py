"""`quota.mode: kueue` as the admission stage: Kueue decides when runs start; the agent caps
how many wait in it and labels each run with its LocalQueue.

- **admit**: the run is rendered with the `kueue.x-k8s.io/queue-name` label of the queue spec's
  `spec.kueue.queueName`, or `quota.kueue.default_local_queue` for specs that name none (and
  whose kind Kueue can queue: `render.decisions.default_kueue_queue`), and suspended for kinds
  Kueue admits by unsuspending. Kueue creates a `Workload` for it, admits it when its
  ClusterQueue has quota, and unsuspends it; `runtime/kueue_watch.py` reports what it says;
- **may I pop**:
  - `room`: `max_jobs` counts every run the agent holds, admitted or waiting in Kueue, exactly
    as without Kueue (so `max_jobs: -1` leaves the whole decision to Kueue);
  - `queue_caps`: at most `quota.max_pending_per_leaf` runs not admitted yet per LocalQueue,
    so work Kueue cannot start soon stays in W&B for other agents. A run counts as waiting
    from its creation until its Workload is admitted, and again after an eviction. Items
    popped but not created yet are not attributable to a queue; they count against every
    LocalQueue (a conservative bound, exact once they are created). W&B queues that share a
    LocalQueue share its room, round-robin (`gate.share_caps`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from launch_agent.model.config import AgentConfig
from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render.decisions import Admission
from launch_agent.runtime.admission.gate import share_caps
from launch_agent.runtime.kueue_watch import (
    KueueWatch,
    LocalQueueKey,
    kueue_queue_of,
    local_queue_of,
)
from launch_agent.runtime.poll_policy import capacity
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore


class KueueAdmission:
    """The pending cap per LocalQueue and the Kueue label (module docstring)."""

    def __init__(
        self, watch: KueueWatch, runs: RunTable, specs: SpecStore, config: AgentConfig
    ) -> None:
        self.watch = watch
        self.runs = runs
        self.specs = specs
        self.quota = config.quota
        self.max_jobs = config.max_jobs
        self.max_pending = config.quota.max_pending_per_leaf
        self._turn = 0

    def waiting(self) -> dict[LocalQueueKey, int]:
        """Runs not admitted yet, per LocalQueue."""
        counts: dict[LocalQueueKey, int] = defaultdict(int)
        for record in self.runs:
            if record.finishing:
                continue
            seen = self.watch.statuses.get((record.namespace, record.kind, record.name))
            if seen is not None:
                status = seen[1]
                if status.state.waiting:
                    counts[(status.namespace, status.local_queue)] += 1
                continue
            key = local_queue_of(self.specs.for_queue(record.queue), self.quota)
            if key is not None:  # created, Kueue has not made its Workload yet
                counts[key] += 1
        return counts

    def room(self, inflight: int) -> int | None:
        return capacity(self.max_jobs, inflight)

    def queue_caps(self, queues: Sequence[str]) -> Mapping[str, int]:
        by_queue: dict[LocalQueueKey, list[str]] = defaultdict(list)
        for queue in queues:
            key = local_queue_of(self.specs.for_queue(queue), self.quota)
            if key is not None:
                by_queue[key].append(queue)
        if not by_queue:
            return {}
        waiting = self.waiting()
        self._turn += 1
        free = {
            key: self.max_pending - waiting.get(key, 0) - self.runs.dispatching for key in by_queue
        }
        return share_caps(by_queue, free, self._turn)

    @contextmanager
    def holding(self, queue: str, rqi_id: str) -> Iterator[None]:
        yield  # popped items count in `RunTable.dispatching` (`queue_caps`)

    def admit(
        self, rqi_id: str, queue: str, spec: QueueSpec, run_spec: Mapping[str, Any]
    ) -> Admission:
        return Admission(kueue_queue=kueue_queue_of(spec, self.quota))

    def created(self, record: RunRecord) -> None:
        pass
