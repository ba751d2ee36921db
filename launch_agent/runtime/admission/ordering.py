"""Created runs reach the quota engine in the order they were stamped.

The creates and acks of one pop finish in any order, but the engine's queue order is the stamp
order (strictly increasing enqueue times), so a restart rebuilds the same queue. Each stamped
item gets a ticket; a created run waits here until every earlier ticket is created or
abandoned (its dispatch failed after the stamp)."""

from __future__ import annotations

from launch_agent.runtime.runs import RunRecord


class StampOrder:
    def __init__(self) -> None:
        self._order: dict[str, int] = {}  # item id → ticket, from the stamp until created
        self._done: dict[int, RunRecord | None] = {}  # finished tickets waiting for earlier ones
        self._awaiting: set[str] = set()  # item ids of the records waiting in `_done`
        self._tickets = 0
        self._head = 0

    def stamp(self, rqi_id: str) -> None:
        if rqi_id in self._order:
            # Stamped by a dispatch of the same item still in flight: a second ticket would
            # replace the first, which then is never created nor abandoned, and every later
            # ticket would wait behind it for good (the quota stall `bench chaos` saw).
            return
        self._order[rqi_id] = self._tickets
        self._tickets += 1

    def stamped(self, rqi_id: str) -> bool:
        """Stamped and not yet handed to the engine: its dispatch submits it, in order."""
        return rqi_id in self._order or rqi_id in self._awaiting

    def awaiting(self, rqi_id: str) -> bool:
        """Created, waiting for an earlier ticket."""
        return rqi_id in self._awaiting

    def created(self, record: RunRecord) -> list[RunRecord] | None:
        """The records now due, in stamp order; None if `record` was never stamped."""
        ticket = self._order.pop(record.rqi_id, None)
        if ticket is None:
            return None
        self._done[ticket] = record
        self._awaiting.add(record.rqi_id)
        return self._flush()

    def abandon(self, rqi_id: str) -> list[RunRecord]:
        """Stamped but never created: later tickets stop waiting for it."""
        ticket = self._order.pop(rqi_id, None)
        if ticket is None:
            return []
        self._done[ticket] = None
        return self._flush()

    def _flush(self) -> list[RunRecord]:
        due: list[RunRecord] = []
        while self._head in self._done:
            record = self._done.pop(self._head)
            self._head += 1
            if record is not None:
                self._awaiting.discard(record.rqi_id)
                due.append(record)
        return due
