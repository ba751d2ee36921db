"""When the Kubernetes client retries, and how long it waits (pure).

Requests: 429, 5xx and network errors (refused, reset, timed out) are retried a bounded number
of times; every other status is an answer, not an accident, and is raised at once. `Retry-After`
(seconds, as kube-apiserver's priority-and-fairness sends it) is honoured as a lower bound on the
wait. A create that timed out may have reached the server: retrying it is safe because objects
have deterministic names, so the retry answers 409 and the caller adopts the existing object.

Watches: reconnect forever (an informer never gives up), with the same jittered exponential
delay, reset once a connection delivered events again.

Jitter is "equal jitter": half of each step fixed, half random, so a fleet of informers that lost
the same API server spreads its reconnects, and none retries at once.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per request and the timing between them; `timeout` is per attempt, seconds."""

    attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 10.0
    # A Retry-After above this ends the retries: the caller's own pause is the better place to
    # wait that long than inside one request.
    max_retry_after: float = 60.0
    timeout: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")

    def backoff(self, retry: int, rand: float) -> float:
        """The wait before retry number `retry` (0-based); `rand` in [0, 1)."""
        step = min(self.max_delay, self.base_delay * (2.0 ** min(retry, 30)))
        return step / 2 + rand * step / 2

    def delay(self, retry: int, rand: float, retry_after: float | None) -> float | None:
        """The wait before the next attempt, or None when the server asks for too long."""
        wait = self.backoff(retry, rand)
        if retry_after is None:
            return wait
        if retry_after > self.max_retry_after:
            return None
        return max(wait, retry_after)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a `Retry-After` header (kube-apiserver sends whole seconds)."""
    if value is None:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


@dataclass
class Backoff:
    """The reconnect delay of one watch: grows on each failure, resets on success."""

    base: float = 0.2
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self) -> float:
        step = min(self.cap, self.base * (2.0 ** min(self.failures, 30)))
        self.failures += 1
        return step / 2 + self.rng.random() * step / 2

    def reset(self) -> None:
        self.failures = 0
