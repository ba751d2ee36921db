"""The dispatch pace: at most `dispatch.max_runs_per_second_per_project` runs started per
second per W&B (entity, project).

Each run the agent starts becomes a W&B run (its `wandb.init`, and the agent's own calls about
it), and W&B creates runs per project at a rate of its own: a deep queue popped 8 items at a
time would otherwise start hundreds at once. One token bucket per project (`rate` per second,
a second's worth at once, at least one), waited for right before the workload is created, so
projects do not wait for each other. The wait is on the loop (`adapters/rate_limit.py`) and
ends at once when the agent stops; the item is then left un-acked, for W&B to offer again.

Items wait with their lease running: a pace far below what the agent pops (an unlimited
`max_jobs` and a deep queue) can let leases lapse while they wait. The dispatch in flight
still creates and acks each of them once (runtime/dispatcher.py), but a bounded `max_jobs`
keeps what is popped near what the pace starts.
"""

from __future__ import annotations

import asyncio
import math

from launch_agent.adapters.rate_limit import RateLimiter
from launch_agent.runtime.metrics import Metrics

# Projects whose buckets are kept; past it, the ones that refilled (idle) are dropped.
MAX_PROJECTS = 10_000


class ProjectPace:
    def __init__(self, rate: float | None, *, stop: asyncio.Event, metrics: Metrics) -> None:
        self.rate = rate
        self._stop = stop
        self._metrics = metrics
        self._buckets: dict[tuple[str, str], RateLimiter] = {}

    def _limiter(self, entity: str, project: str) -> RateLimiter:
        assert self.rate is not None
        key = (entity, project)
        limiter = self._buckets.get(key)
        if limiter is None:
            if len(self._buckets) >= MAX_PROJECTS:
                self._forget_idle()
            burst = max(1, math.floor(self.rate))
            limiter = self._buckets[key] = RateLimiter(self.rate, burst, stop=self._stop)
        return limiter

    def _forget_idle(self) -> None:
        for key, limiter in list(self._buckets.items()):
            if limiter.idle():
                del self._buckets[key]

    async def wait(self, entity: str, project: str) -> bool:
        """Whether the run may start now (after its wait); False: the agent is stopping."""
        if self.rate is None:
            return True
        limiter = self._limiter(entity, project)
        before = limiter.delayed
        started = await limiter.acquire()
        if limiter.delayed != before:
            self._metrics.paced.inc()
        return started
