"""Warning Events about the agent's runs, kept in bounded memory for the diagnosis.

Some failures leave no trace in any status, only Events: a pod the Job controller cannot create
(a namespace ResourceQuota, a missing ServiceAccount, PodSecurity admission) is a `FailedCreate`
Event on the Job; a missing Secret volume is `FailedMount` on a pod stuck in ContainerCreating.
The tracker watches core/v1 Events with `fieldSelector=type=Warning`, one watch per namespace
it serves (Events carry no labels, so no label selector can narrow them to the agent's runs),
and files each one under the run it is about: its workload, or an object named after the
workload (its pods `<job>-xxxxx`, a JobSet's Jobs `<jobset>-<replicatedJob>-<index>`, a
RayJob's RayCluster, ...; every controller the agent runs names children so). Events about
anything else are dropped on arrival.

Bounded: each Event is slimmed (`event_view`) before the informer caches it; per run the book
keeps the latest Event per (object, reason), at most `PER_RUN`; `TOTAL` across runs, evicting
the oldest entry of the run updated longest ago; a run's Events go when the run ends.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from launch_agent.adapters.kube import Resource
from launch_agent.tracking.views import Meta

EVENT = Resource("", "v1", "Event", "events")
WARNINGS = "type=Warning"
PER_RUN = 16
TOTAL = 20_000
# An Event message longer than this is cut (the API server allows 1 MiB of object).
MESSAGE_LIMIT = 2048

Obj = dict[str, Any]
EventKey = tuple[str, str, str]  # (involved kind, involved name, reason)


def event_view(obj: Obj) -> Obj:
    """What the diagnosis reads of a core/v1 Event (and the informer needs to cache it)."""
    meta = Meta(obj)
    about = obj.get("involvedObject") or {}
    message = str(obj.get("message") or "")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": meta.name,
            "namespace": meta.namespace,
            "resourceVersion": meta.resource_version,
        },
        "involvedObject": {
            k: about.get(k) for k in ("apiVersion", "kind", "name", "namespace", "uid")
        },
        "type": obj.get("type"),
        "reason": obj.get("reason"),
        "message": message[:MESSAGE_LIMIT],
        "count": obj.get("count"),
        "firstTimestamp": obj.get("firstTimestamp"),
        "lastTimestamp": obj.get("lastTimestamp"),
        "eventTime": obj.get("eventTime"),
        # An Event recorded through events.k8s.io/v1 (kube-scheduler, KubeRay) has no count
        # and no first/last timestamps in this view (`pkg/apis/events/v1/conversion.go`):
        # its repeats are `series.count` and `series.lastObservedTime`.
        "series": _series(obj.get("series")),
        "source": obj.get("source"),
    }


def _series(value: object) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    return {"count": value.get("count"), "lastObservedTime": value.get("lastObservedTime")}


def about(event: Mapping[str, Any]) -> tuple[str, str, str]:
    """(namespace, kind, name) of the object an Event is about."""
    involved = event.get("involvedObject") or {}
    namespace = involved.get("namespace") or Meta(event).namespace
    return str(namespace or ""), str(involved.get("kind") or ""), str(involved.get("name") or "")


def owner_names(name: str) -> list[str]:
    """`name` and each prefix of it ending before a `-`, longest first: the workload names an
    object called `name` can belong to (`train-abc-worker-0-1-x7k2p` -> `train-abc-worker-0-1`,
    ..., `train`)."""
    out = [name]
    cut = name.rfind("-")
    while cut > 0:
        out.append(name[:cut])
        cut = name.rfind("-", 0, cut)
    return out


class EventBook:
    """The latest Warning Events per run (run-queue-item id), bounded."""

    def __init__(self, per_run: int = PER_RUN, total: int = TOTAL) -> None:
        self.per_run, self.total = per_run, total
        self._runs: OrderedDict[str, OrderedDict[EventKey, Obj]] = OrderedDict()
        self._size = 0

    def __len__(self) -> int:
        return self._size

    def add(self, run: str, event: Obj) -> None:
        _, kind, name = about(event)
        key = (kind, name, str(event.get("reason") or ""))
        entries = self._runs.get(run)
        if entries is None:
            entries = self._runs[run] = OrderedDict()
        self._runs.move_to_end(run)
        if key in entries:
            # Deduplicated by reason: the newest Event of a reason about an object replaces
            # the older one (its `count` says how often it happened).
            del entries[key]
            self._size -= 1
        entries[key] = event
        self._size += 1
        while len(entries) > self.per_run:
            entries.popitem(last=False)
            self._size -= 1
        while self._size > self.total:
            oldest_run, oldest = next(iter(self._runs.items()))
            oldest.popitem(last=False)
            self._size -= 1
            if not oldest:
                del self._runs[oldest_run]

    def of(self, run: str) -> list[Obj]:
        return list((self._runs.get(run) or {}).values())

    def forget(self, run: str) -> None:
        entries = self._runs.pop(run, None)
        if entries:
            self._size -= len(entries)

    def runs(self) -> list[str]:
        return list(self._runs)


def file_event(book: EventBook, event: Obj, run_of: Callable[[str, str], str | None]) -> str | None:
    """Put a Warning Event under the run it is about (`run_of(namespace, workload name)`);
    the run, or None when it is about no run of this agent."""
    if event.get("type") != "Warning":
        return None
    namespace, _, name = about(event)
    for candidate in owner_names(name):
        run = run_of(namespace, candidate)
        if run is not None:
            book.add(run, event)
            return run
    return None
