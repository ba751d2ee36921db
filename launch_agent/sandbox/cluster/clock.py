"""Clocks for the simulated cluster.

Everything the cluster does is a function of "seconds since the cluster started", read from a
clock: `ManualClock` for tests (time moves only when the test calls `advance`, so a run is
deterministic), `RealClock` for the demo and benchmarks (time is the monotonic wall clock).
Timestamps written into objects (`startTime`, `lastTransitionTime`, `finishedAt`) come from
`now()`, which for a manual clock is the start instant plus the simulated seconds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    manual: bool

    def seconds(self) -> float:
        """Seconds since the clock started (monotonic)."""

    def now(self) -> datetime:
        """The wall-clock instant matching `seconds()`."""


class ManualClock:
    manual = True

    def __init__(self, start: datetime | None = None) -> None:
        self.start = start or datetime.now(UTC).replace(microsecond=0)
        self._elapsed = 0.0

    def seconds(self) -> float:
        return self._elapsed

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self._elapsed)

    def set(self, seconds: float) -> None:
        if seconds < self._elapsed:
            raise ValueError(f"a clock cannot go back ({seconds} < {self._elapsed})")
        self._elapsed = seconds


class RealClock:
    manual = False

    def __init__(self) -> None:
        self._origin = time.monotonic()
        self.start = datetime.now(UTC)

    def seconds(self) -> float:
        return time.monotonic() - self._origin

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.seconds())
