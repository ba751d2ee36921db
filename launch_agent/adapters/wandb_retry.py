"""When and how long the W&B client waits before trying a request again (pure).

The reference agent has no backoff at all and dies after one 19-second outage. Here every call
gets a bounded number of attempts with jittered exponential backoff; when they are used up the
client raises `WandbUnavailable` and the caller pauses that work and tries again later.

- Retried: network errors (refused, reset, timed out), HTTP 5xx, 408 and 429.
- 429 and 503 may carry `Retry-After` (seconds or an HTTP date): the client waits at least that
  long. A `Retry-After` longer than `max_retry_after` ends the retries at once, since waiting
  inside one call that long would stall the caller; the caller's own pause is the better place.
- Not retried: 401/403 (the key is wrong), other 4xx, GraphQL `errors` (same request, same
  answer).

The jitter is "equal jitter": half of each backoff step is fixed and half random, so agents
restarted together spread out but no retry is ever immediate.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal

Verdict = Literal["ok", "retry", "auth", "fail"]


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per call and the timing between them. `timeout` is per attempt, in seconds."""

    attempts: int = 5
    base_delay: float = 0.5
    max_delay: float = 15.0
    max_retry_after: float = 60.0
    timeout: float = 20.0

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


def classify(status: int) -> Verdict:
    if 200 <= status < 300:
        return "ok"
    if status in (401, 403):
        return "auth"
    if status >= 500 or status in (408, 429):
        return "retry"
    return "fail"


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header; None when absent or unreadable."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    seconds = (when - (now or datetime.now(UTC))).total_seconds()
    return max(0.0, seconds)
