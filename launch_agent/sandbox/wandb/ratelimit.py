"""W&B's request rate limit, as a client sees it: `RateLimit-*` on every answer, then 429s.

W&B limits requests per API key (its docs: "rate limited by IP and API key"). Its answers
carry the IETF draft's headers, `RateLimit-Limit`, `RateLimit-Remaining` and `RateLimit-Reset`
(whole seconds until the window resets), and a request over the limit gets 429 with
`Retry-After`. The sandbox models that with a fixed window per server (one API key is served):
`limit` GraphQL requests per `window` seconds, a test choosing both. The 429's body is a
GraphQL error, as W&B's other error answers are.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class RateLimit:
    """`limit` requests per `window` seconds; `rejected` counts the 429s, for tests."""

    limit: int
    window: float = 60.0
    clock: Callable[[], float] = time.monotonic
    rejected: int = 0
    served: int = 0
    _started: float | None = field(default=None, init=False)
    _used: int = field(default=0, init=False)

    def take(self) -> tuple[bool, dict[str, str]]:
        """Whether this request is served, and the headers its answer carries."""
        now = self.clock()
        if self._started is None or now >= self._started + self.window:
            self._started, self._used = now, 0
        reset = max(1, math.ceil(self._started + self.window - now))
        allowed = self._used < self.limit
        if allowed:
            self._used += 1
            self.served += 1
        else:
            self.rejected += 1
        headers = {
            "RateLimit-Limit": str(self.limit),
            "RateLimit-Remaining": str(max(0, self.limit - self._used)),
            "RateLimit-Reset": str(reset),
        }
        if not allowed:
            headers["Retry-After"] = str(reset)
        return allowed, headers
