"""Retry timing shared by the Kubernetes and W&B clients (pure).

Each call gets a bounded number of attempts with jittered exponential backoff; `Retry-After`
(seconds or an HTTP date) is honoured as a lower bound on the wait, and one longer than
`max_retry_after` ends the retries at once, since waiting that long inside one call would stall
the caller: the caller's own pause is the better place. When the attempts are used up the client
raises its "unavailable" error and the caller pauses that work; nothing ends the process.

The jitter is "equal jitter": half of each backoff step is fixed and half random, so agents (or
informers) that lost the same server together spread their retries, and none retries at once.
Which statuses are retried is each client's business (`kube/backoff.py`, `wandb_retry.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per call and the timing between them. `timeout` is per attempt, in seconds."""

    attempts: int = 6
    base_delay: float = 0.2
    max_delay: float = 10.0
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
        """The wait before retry number `retry` (0 for the first retry); `rand` in [0, 1)."""
        step = min(self.max_delay, self.base_delay * (2.0 ** min(retry, 30)))
        return step / 2 + rand * step / 2

    def delay(self, retry: int, rand: float, retry_after: float | None) -> float | None:
        """The wait before the next attempt, or None when `Retry-After` asks for too long."""
        wait = self.backoff(retry, rand)
        if retry_after is None:
            return wait
        if retry_after > self.max_retry_after:
            return None
        return max(wait, retry_after)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return seconds if seconds >= 0 else None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
