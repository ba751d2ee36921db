"""The agent's in-memory record of each run in flight, rebuilt from the cluster on start.

Kubernetes is the durable record (docs/agent.md, idempotent creates): every workload
carries the agent, queue, run-queue-item and run id as labels and annotations, so a restarted
agent rebuilds this table from its informers' first list and never needs a file of its own.

Bounds: a record exists from the moment the dispatcher is about to create a workload until the
run's terminal state was handled, then it is removed. The only other map, `recently_finished`,
is an LRU of fixed size that stops late events of a finished workload (a Job's pods are
deleted by its TTL an hour later) from adopting it again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from launch_agent.model import labels as L
from launch_agent.model.run_state import RunState
from launch_agent.model.sweeps import SCHEDULER_MARK
from launch_agent.render.naming import label_value
from launch_agent.runtime.clock import monotonic
from launch_agent.tracking.views import Meta

# Annotations the runtime adds to what render produced.
RUN_SPEC = L.PREFIX + "run-spec"  # the item's runSpec as JSON, for requeues after a restart
REPORTED = L.PREFIX + "reported"  # the terminal state was reported to W&B (restart: skip it)
RECENTLY_FINISHED = 10_000
GONE_PODS = 8


@dataclass(eq=False, slots=True)
class RunRecord:
    """One run the agent created or adopted."""

    rqi_id: str
    queue: str
    entity: str
    project: str
    run_id: str
    namespace: str
    name: str
    api_version: str
    kind: str
    label: str = ""
    started: float = field(default_factory=monotonic)  # adopted runs: when first seen
    # This process saw W&B claim the item (its ack, or the item CLAIMED when asked). An adopted
    # workload does not say whether the ack of the process that created it landed (a kill
    # between the create and the ack): False until W&B is asked, which the finisher does
    # before the workload is cleaned up (`Settlement.settle`, runtime/settlement.py).
    acked: bool = False
    adopted: bool = False
    state: RunState | None = None
    warned: frozenset[str] = frozenset()
    stop_requested_at: float | None = None
    deleting: bool = False
    deleted: bool = False
    # The deletion was seen only as absence from a relist (no watch was open when it happened:
    # client-go's `DeletedFinalStateUnknown`, `tools/cache/delta_fifo.go`), so `last` may
    # predate the workload's final status.
    end_unseen: bool = False
    finishing: bool = False
    # A sweep scheduler: counted against `max_schedulers`, not `max_jobs` (model/sweeps.py).
    scheduler: bool = False
    # The last workload object seen (the informer's cache entry), for a DELETED assessment.
    last: Mapping[str, Any] | None = None
    # Last states of the run's pods that were deleted (a preempted pod is deleted by the
    # scheduler): they still explain the run's end. At most `GONE_PODS`, newest kept.
    gone_pods: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    # A pod is unschedulable: the run's state can change with time alone (its deadline).
    timed: bool = False
    # Pods of the run that still exist and have not ended: they hold their node's resources
    # (a pod deleted gracefully keeps its GPUs until its containers stop).
    live_pods: int = 0
    # A failed workload whose pods do not explain it yet: wait for them until then (monotonic).
    explain_until: float | None = None
    # Until when its last assessment cannot change with time alone (`tracking.steady_until`;
    # None: at any moment): the periodic recheck skips it until then, events never do.
    steady_until: datetime | None = None
    # The `ttlSecondsAfterFinished` taken off its Job while its item is unsettled
    # (`runtime/ttl_hold.py`); after a restart the Job's annotation says it.
    held_ttl: int | None = None
    # MultiKueue: the worker cluster the run is placed on now (its Kueue Workload's
    # `status.clusterName`; None while it waits), and every worker it was placed on, in order
    # (`runtime/kueue_watch.py` keeps both).
    worker: str | None = None
    placements: tuple[str, ...] = ()

    def placed(self, worker: str | None) -> bool:
        """Record where the run is placed now; True when that is a new placement (a first one,
        or one after Kueue took the run back, even onto the same worker). Deleted pods of an
        earlier placement no longer explain the run."""
        new = worker is not None and worker != self.worker
        self.worker = worker
        if new:
            assert worker is not None
            self.placements = (*self.placements, worker)
            self.gone_pods.clear()
        return new

    def __post_init__(self) -> None:
        if not self.label:
            self.label = label_value(self.rqi_id)

    def pod_gone(self, pod: Mapping[str, Any]) -> None:
        name = Meta(pod).name
        self.gone_pods.pop(name, None)
        self.gone_pods[name] = pod
        while len(self.gone_pods) > GONE_PODS:
            del self.gone_pods[next(iter(self.gone_pods))]

    @property
    def workload(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> RunRecord | None:
        """Rebuild a record from a workload the agent created; None if it is not one."""
        meta = Meta(obj)
        rqi = meta.annotation(L.RUN_QUEUE_ITEM_ID)
        if rqi is None:
            return None
        return cls(
            rqi_id=rqi,
            queue=meta.annotation(L.QUEUE_NAME) or meta.label(L.QUEUE) or "",
            entity=meta.annotation(L.ENTITY) or "",
            project=meta.annotation(L.PROJECT) or "",
            run_id=meta.label(L.RUN_ID) or "",
            namespace=meta.namespace,
            name=meta.name,
            api_version=str(obj.get("apiVersion") or ""),
            kind=str(obj.get("kind") or ""),
            adopted=True,
            scheduler=meta.annotation(SCHEDULER_MARK) == "true",
            last=obj,
        )


def item_of(obj: Mapping[str, Any]) -> str | None:
    """The run-queue-item id of a workload the agent created (its exact annotation)."""
    return Meta(obj).annotation(L.RUN_QUEUE_ITEM_ID)


def reported(obj: Mapping[str, Any]) -> bool:
    return REPORTED in Meta(obj).annotations


class RunTable:
    """Records by run-queue-item id and by the label-safe id pods carry."""

    def __init__(self, on_change: Callable[[], None] | None = None) -> None:
        """`on_change` is called whenever a run is added, ends or is removed (the agent passes
        the poller's wake-up)."""
        self._by_item: dict[str, RunRecord] = {}
        self._by_label: dict[str, str] = {}
        self._finished: OrderedDict[str, None] = OrderedDict()
        # Items popped whose dispatch has not registered a record yet (they hold a slot).
        self.dispatching = 0
        self._finishing = 0  # records in the table with `finishing` set (O(1) `inflight`)
        self._schedulers = 0  # scheduler records neither finishing nor removed
        self._on_change = on_change

    def __len__(self) -> int:
        return len(self._by_item)

    def __iter__(self) -> Iterator[RunRecord]:
        return iter(list(self._by_item.values()))

    def get(self, rqi_id: str) -> RunRecord | None:
        return self._by_item.get(rqi_id)

    def by_label(self, label: str) -> RunRecord | None:
        rqi = self._by_label.get(label)
        return None if rqi is None else self._by_item.get(rqi)

    @property
    def inflight(self) -> int:
        """Runs that count against `max_jobs`: created and not terminal, plus dispatches.
        Sweep schedulers count against `max_schedulers` instead, as in W&B's agent
        (`num_running_jobs` leaves them out)."""
        return self.dispatching + len(self._by_item) - self._finishing - self._schedulers

    @property
    def schedulers(self) -> int:
        """Sweep schedulers created and not terminal (W&B's `num_running_schedulers`)."""
        return self._schedulers

    def finished_recently(self, rqi_id: str) -> bool:
        return rqi_id in self._finished

    def add(self, record: RunRecord) -> RunRecord:
        existing = self._by_item.get(record.rqi_id)
        if existing is not None:
            return existing
        self._finished.pop(record.rqi_id, None)
        self._by_item[record.rqi_id] = record
        self._by_label[record.label] = record.rqi_id
        if record.scheduler and not record.finishing:
            self._schedulers += 1
        self._changed()
        return record

    def remove(self, record: RunRecord, *, finished: bool = True) -> None:
        if self._by_item.get(record.rqi_id) is record:
            del self._by_item[record.rqi_id]
            self._by_label.pop(record.label, None)
            if record.finishing:
                self._finishing -= 1
            elif record.scheduler:
                self._schedulers -= 1
        if finished:
            self._finished[record.rqi_id] = None
            while len(self._finished) > RECENTLY_FINISHED:
                self._finished.popitem(last=False)
        self._changed()

    def mark_finishing(self, record: RunRecord) -> None:
        if not record.finishing and self._by_item.get(record.rqi_id) is record:
            self._finishing += 1
            if record.scheduler:
                self._schedulers -= 1
        record.finishing = True
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change()
