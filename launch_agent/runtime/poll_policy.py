"""When to poll W&B and which queues to pop: pure decisions of the poller.

- Capacity: `max_jobs` with W&B's meaning (-1 unlimited) minus runs in flight. The poller never
  pops more than it can start, so work it cannot start stays in W&B for other agents.
- Fairness: one request pops from every queue (aliases batch them); when capacity is smaller
  than the number of queues, a rotating start gives every queue its turn.
- Depth: a queue that filled every pop it was given last round gets twice as many the next
  round (up to `max_per_queue`); one that came back short goes back to one. A deep queue drains
  in a few requests, and an idle one costs a single pop per round. Pops are interleaved across
  queues, so when capacity runs out every queue has had the same number of turns.
- Interval: right after a pop returned work the next poll comes after `active` seconds; every
  empty poll doubles the interval up to `idle`, so an idle agent costs a few requests a minute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


def capacity(max_jobs: int, inflight: int) -> int | None:
    """How many more runs may start now; None means unlimited."""
    if max_jobs == -1:
        return None
    return max(0, max_jobs - inflight)


def queues_to_pop(queues: Sequence[str], room: int | None, turn: int) -> list[str]:
    """The queues to pop this round: at most one item each and at most `room` in total."""
    if not queues:
        return []
    start = turn % len(queues)
    rotated = [*queues[start:], *queues[:start]]
    return rotated if room is None else rotated[:room]


@dataclass
class PopPlan:
    """How many pops each queue gets in one request (see the module docstring)."""

    max_per_queue: int = 8
    depth: dict[str, int] = field(default_factory=dict)

    def slots(
        self,
        queues: Sequence[str],
        room: int | None,
        turn: int,
        caps: Mapping[str, int] | None = None,
    ) -> list[str]:
        """The queue of every pop in this round's request, interleaved, at most `room`.

        `caps` bounds single queues (the quota's pending runs per leaf); a queue capped at 0
        is not popped this round.
        """
        order = queues_to_pop(queues, None, turn)
        wanted = {queue: self.depth.get(queue, 1) for queue in order}
        if caps:
            wanted = {q: min(n, caps[q]) if q in caps else n for q, n in wanted.items()}
        limit = sum(wanted.values()) if room is None else room
        out: list[str] = []
        level = 0
        while len(out) < limit:
            batch = [queue for queue in order if wanted[queue] > level]
            if not batch:
                break
            out.extend(batch[: limit - len(out)])
            level += 1
        return out

    def record(self, queue: str, asked: int, got: int) -> None:
        """What one round's pops from `queue` returned."""
        if asked and got >= asked:
            self.depth[queue] = min(self.max_per_queue, asked * 2)
        else:
            self.depth.pop(queue, None)


@dataclass
class PollInterval:
    active: float
    idle: float
    factor: float = 2.0
    current: float = 0.0

    def __post_init__(self) -> None:
        self.current = self.active

    def after(self, got_work: bool) -> float:
        """The wait before the next poll, given what the last one returned."""
        if got_work:
            self.current = self.active
        else:
            self.current = min(self.idle, max(self.active, self.current * self.factor))
        return self.current
