"""Watch streams: the bounded per-resource event log and the per-stream queues.

Every write appends one `WatchEvent` to its resource's log (a bounded deque). A watch started
from resourceVersion N replays the logged events after N; when N is older than the oldest
event still logged the resource version is *compacted* and the stream answers 410 Expired,
exactly what a client with a stale resourceVersion sees from etcd compaction.

A `Watcher` is one open stream. The store pushes events into it synchronously, in the same step
as the write, so there is no gap between the replay and live events: the server registers the
watcher and reads the replay without awaiting in between. Selectors are applied as
kube-apiserver's watch cache does: an object that starts matching arrives as ADDED, one that
stops matching as DELETED. A watcher that falls `max_pending` events behind is closed, like a
slow consumer on a real server, so memory stays bounded whatever the clients do.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from launch_agent.sandbox.kube.selectors import FieldSelector, LabelSelector


@dataclass(frozen=True)
class WatchEvent:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]
    old: dict[str, Any] | None = None


class EventLog:
    """The recent events of one resource; `floor` is the oldest resourceVersion still served."""

    def __init__(self, maxlen: int, floor: int) -> None:
        self.events: deque[WatchEvent] = deque()
        self.maxlen = maxlen
        self.floor = floor

    def append(self, event: WatchEvent) -> None:
        self.events.append(event)
        while len(self.events) > self.maxlen:
            self.floor = self.events.popleft().rv

    def compact(self, up_to: int) -> None:
        while self.events and self.events[0].rv <= up_to:
            self.events.popleft()
        self.floor = max(self.floor, up_to)

    def after(self, rv: int) -> list[WatchEvent]:
        """Events newer than `rv`, oldest first (scans from the newest end)."""
        out = []
        for event in reversed(self.events):
            if event.rv <= rv:
                break
            out.append(event)
        out.reverse()
        return out


class Watcher:
    """One open watch stream's filter and pending events."""

    def __init__(
        self,
        storage: str,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        max_pending: int = 10_000,
    ) -> None:
        self.storage = storage
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.max_pending = max_pending
        self.pending: deque[tuple[str, dict[str, Any]]] = deque()
        self.wake = asyncio.Event()
        self.closed: str | None = None  # why the server must end the stream

    def matches(self, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels.matches(meta.get("labels")) and self.fields.matches(obj)

    def translate(self, event: WatchEvent) -> tuple[str, dict[str, Any]] | None:
        """The event this stream should see for `event`, if any."""
        now = self.matches(event.obj)
        if event.type == "MODIFIED" and event.old is not None:
            before = self.matches(event.old)
            if now and not before:
                return ("ADDED", event.obj)
            if before and not now:
                return ("DELETED", event.obj)
        return (event.type, event.obj) if now else None

    def offer(self, event: WatchEvent) -> None:
        if self.closed:
            return
        seen = self.translate(event)
        if seen is None:
            return
        if len(self.pending) >= self.max_pending:
            self.close("watcher fell too far behind")
            return
        self.pending.append(seen)
        self.wake.set()

    def replay(self, events: Iterable[WatchEvent]) -> None:
        for event in events:
            self.offer(event)

    def close(self, reason: str) -> None:
        self.closed = reason
        self.pending.clear()
        self.wake.set()

    def take(self) -> list[tuple[str, dict[str, Any]]]:
        batch = list(self.pending)
        self.pending.clear()
        self.wake.clear()
        return batch
