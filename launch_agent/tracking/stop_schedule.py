"""Which runs the stop check asks W&B about on each tick, within a request budget.

Asking about every run every 10 s costs `ceil(runs / batch)` requests a tick: 600 a minute at
10,000 runs. A stop pressed in the UI matters most for a run that just started (a wrong
config, a typo spotted at once), so runs are in two tiers:

- young runs (started less than `young_seconds` ago) are asked about on every tick;
- older runs are asked about once every `old_interval` seconds each, spread evenly over the
  ticks (round robin in a stable order), so a tick carries `old * interval / old_interval`
  of them and no burst follows a restart.

Requests are what W&B counts, not runs: the last request of a tick is filled up with older runs
beyond their share when it has room, at no extra request. Above everything,
`max_requests_per_minute` caps the stop checks: when young runs alone would need more requests
than the cap allows, they too are asked about in round robin (each still within
`ceil(young / capacity)` ticks) and the older runs wait for their turn.

Pure: the caller passes the runs with their ages and sends the requests.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class StopCheckPolicy:
    interval: float = 10.0  # seconds between ticks; young runs are asked about on every tick
    young_seconds: float = 3600.0
    old_interval: float = 300.0  # each older run at least this often, budget permitting
    batch: int = 100  # runs per request (the client's chunk)
    max_requests_per_minute: int = 100

    def __post_init__(self) -> None:
        if self.interval <= 0 or self.young_seconds < 0 or self.old_interval < self.interval:
            raise ValueError("need interval > 0, young_seconds >= 0, old_interval >= interval")
        if self.batch < 1 or self.max_requests_per_minute < 1:
            raise ValueError("batch and max_requests_per_minute must be at least 1")

    @property
    def requests_per_tick(self) -> int:
        """The budget of one tick; at least one request, or nothing would ever be checked."""
        return max(1, math.floor(self.max_requests_per_minute * self.interval / 60))

    @property
    def capacity(self) -> int:
        """Runs one tick can carry."""
        return self.requests_per_tick * self.batch

    def requests_per_minute(self, young: int, old: int) -> float:
        """Steady-state requests a minute with `young` and `old` runs in flight."""
        share = math.ceil(old * self.interval / self.old_interval)
        runs = min(self.capacity, young + share)
        return math.ceil(runs / self.batch) * 60 / self.interval


class _RoundRobin:
    """A cursor over a changing set of keys: each call takes the next `n` after the last one
    taken, in sorted order, wrapping around; keys that came or went meanwhile are no matter."""

    def __init__(self) -> None:
        self._last: object | None = None

    def take(self, keys: Sequence[K], n: int) -> list[K]:
        if n <= 0 or not keys:
            return []
        if n >= len(keys):
            return list(keys)
        ordered = sorted(keys, key=repr)
        start = 0
        if self._last is not None:
            last = repr(self._last)
            start = next((i for i, k in enumerate(ordered) if repr(k) > last), 0)
        taken = [ordered[(start + i) % len(ordered)] for i in range(n)]
        self._last = taken[-1]
        return taken


class StopSchedule:
    """The runs to ask about on each tick; keeps the round-robin positions between ticks."""

    def __init__(self, policy: StopCheckPolicy) -> None:
        self.policy = policy
        self._young = _RoundRobin()
        self._old = _RoundRobin()

    def select(self, runs: Sequence[tuple[K, float]]) -> list[K]:
        """`runs` are (key, age in seconds); the keys to check now, young ones first."""
        p = self.policy
        young = [k for k, age in runs if age < p.young_seconds]
        old = [k for k, age in runs if age >= p.young_seconds]
        chosen = self._young.take(young, p.capacity)
        room = p.capacity - len(chosen)
        if room <= 0 or not old:
            return chosen
        share = math.ceil(len(old) * p.interval / p.old_interval)
        # Round the tick up to whole requests: the last one's spare places are free.
        filled = math.ceil((len(chosen) + share) / p.batch) * p.batch - len(chosen)
        return chosen + self._old.take(old, min(room, max(share, filled)))
