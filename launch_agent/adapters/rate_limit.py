"""The async side of a token bucket (`model/token_bucket.py`): wait for a token on the loop.

`RateLimiter.acquire()` reserves a token and sleeps until it is due, with `asyncio`'s timer (the
loop runs other work meanwhile; nothing blocks it). The sleep is `aio.wait_event` on the stop
event when there is one, so a stopping agent is never held behind its own limiter: the wait
ends at once and `acquire` answers False. What a caller does then is its own policy: the
Kubernetes client sends the request anyway (shutdown's last creates and reports are few, and
the API server's priority and fairness still protects it); the dispatcher leaves the item
for a later pop (`runtime/pace.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from launch_agent.aio import wait_event
from launch_agent.model.token_bucket import TokenBucket


class RateLimiter:
    """At most `rate` acquisitions per second on average, `burst` at once."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        stop: asyncio.Event | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bucket = TokenBucket(rate, burst)
        self._stop = stop
        self._clock = clock
        # For metrics and tests: acquisitions that had to wait, and the seconds waited.
        self.delayed = 0
        self.waited = 0.0

    def idle(self) -> bool:
        """Whether the bucket refilled: dropping it loses nothing a later caller needs."""
        return self.bucket.full(self._clock())

    async def acquire(self) -> bool:
        """Wait for a token; False when the stop event ended the wait first (the token is
        given back)."""
        wait = self.bucket.reserve(self._clock())
        if wait <= 0:
            return True
        self.delayed += 1
        self.waited += wait
        if self._stop is None:
            await asyncio.sleep(wait)
            return True
        if await wait_event(self._stop, wait):
            self.bucket.cancel(self._clock())
            return False
        return True
