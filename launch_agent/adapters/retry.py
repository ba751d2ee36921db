"""The one retry engine: the Kubernetes client, the W&B client and the reporter all use it.

`call_with_retries(attempt, policy)` runs `attempt` until it returns, raises something other
than `Retryable`, or the policy says stop; then it raises `GaveUp`, which each caller turns into
its own "unavailable" error (`KubeUnavailable`, `WandbUnavailable`) or, for the reporter, into
"not sent, the agent is stopping". Nothing here ends the process: the caller pauses that work.

Timing (`RetryPolicy`):

- jittered exponential backoff: the step doubles from `base_delay` up to `max_delay`; with the
  default "equal jitter" half of each step is fixed and half random, so agents (or informers)
  that lost the same server together spread their retries, and none retries at once;
- `Retry-After` (seconds or an HTTP date) is a lower bound on the wait; one longer than
  `max_retry_after` ends the retries at once, since waiting that long inside one call would
  stall the caller: the caller's own pause is the better place (a client that holds every
  call until a rate-limit window resets, as the W&B client does on `RateLimit-Remaining: 0`,
  raises `Retryable` with that wait as its `retry_after`, so the same bound applies);
- `attempts` bounds the attempts per call (None: until it succeeds or `stop` is set), and
  `deadline` bounds the whole call, waits included: a retry whose wait would end past it is not
  made.

Classification, in one place: `NETWORK_ERRORS` (refused, reset, timed out) are retried by both
clients; statuses by `kube_retryable` (429 and 5xx that a retry can cure, as
kube-apiserver's priority-and-fairness sends them) and `wandb_verdict` (5xx, 408 and 429; 401/403
is the key; other 4xx and GraphQL `errors` are the same answer on every attempt). A create that
timed out may have reached the server: the Kubernetes client retries it anyway because objects
have deterministic names (the retry answers 409 and the caller adopts the object); the W&B
client tracks whether an attempt may have been applied (`wandb_client.py`).

`Backoff` is the same formula for a loop that never gives up (an informer's reconnects): it
grows on each failure and resets once a connection delivered events again.

Clock, sleep and random source are parameters, so tests drive the timing without sleeping.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Literal, TypeVar

import aiohttp

from launch_agent.aio import wait_event

T = TypeVar("T")

# Errors of the transport, not answers: both clients retry them.
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    aiohttp.ClientError,
    TimeoutError,
    ConnectionError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """Attempts per call and the timing between them. `timeout` is per attempt, `deadline`
    for the whole call (waits included), both in seconds; `attempts=None` retries until the
    call succeeds or the caller's stop event is set. `jitter` is the random share of each step
    (0.5: equal jitter; 0: plain doubling)."""

    attempts: int | None = 6
    base_delay: float = 0.2
    max_delay: float = 10.0
    max_retry_after: float = 60.0
    timeout: float = 30.0
    deadline: float | None = None
    jitter: float = 0.5

    def __post_init__(self) -> None:
        if self.attempts is not None and self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < self.base_delay:
            raise ValueError("need 0 <= base_delay <= max_delay")
        if self.timeout <= 0:
            raise ValueError("timeout must be positive")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError("deadline must be positive")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")

    def backoff(self, retry: int, rand: float) -> float:
        """The wait before retry number `retry` (0 for the first retry); `rand` in [0, 1)."""
        return backoff_delay(self.base_delay, self.max_delay, retry, rand, self.jitter)

    def delay(self, retry: int, rand: float, retry_after: float | None) -> float | None:
        """The wait before the next attempt, or None when `Retry-After` asks for too long."""
        wait = self.backoff(retry, rand)
        if retry_after is None:
            return wait
        if retry_after > self.max_retry_after:
            return None
        return max(wait, retry_after)


def backoff_delay(base: float, cap: float, retry: int, rand: float, jitter: float = 0.5) -> float:
    """The backoff formula, the only copy: step `base * 2**retry` capped at `cap`, of which the
    share `jitter` is random (`rand` in [0, 1))."""
    step = min(cap, base * (2.0 ** min(retry, 30)))
    return step * (1 - jitter) + rand * step * jitter


# The W&B client's own timing: W&B answers slower than an API server and an outage is
# longer-lived, so fewer, longer-spaced attempts.
WANDB_RETRY = RetryPolicy(attempts=5, base_delay=0.5, max_delay=15.0, timeout=20.0)


# --- classification --------------------------------------------------------------------------

KUBE_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})

Verdict = Literal["ok", "retry", "auth", "fail"]


def kube_retryable(status: int) -> bool:
    """An API server answer worth another attempt; every other status is an answer."""
    return status in KUBE_RETRY_STATUSES


def wandb_verdict(status: int) -> Verdict:
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


def rate_limit_wait(remaining: str | None, reset: str | None) -> float | None:
    """Seconds until the server's rate-limit window resets when it says none is left in it
    (`RateLimit-Remaining: 0`, `RateLimit-Reset: SECONDS`, the IETF draft's headers, which
    W&B sends); None when some is left, or the headers are absent or unreadable."""
    if remaining is None or reset is None:
        return None
    try:
        left, seconds = int(remaining.strip()), float(reset.strip())
    except ValueError:
        return None
    if left > 0 or not 0 <= seconds < float("inf"):
        return None
    return seconds


# --- the engine --------------------------------------------------------------------------------


class Retryable(Exception):
    """Raised by an attempt that failed in a way another attempt may cure.

    `cause` is what failed (an exception, or a short text such as "HTTP 503"); `retry_after`
    is the server's `Retry-After`, in seconds, if it sent one."""

    def __init__(self, cause: BaseException | str, retry_after: float | None = None) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.retry_after = retry_after


StopReason = Literal["attempts", "retry-after", "deadline", "stopped"]


class GaveUp(Exception):
    """No more attempts: `attempts` were made, `last` is the last failure, `reason` says why
    the engine stopped there."""

    def __init__(self, attempts: int, last: Retryable, reason: StopReason) -> None:
        super().__init__(f"gave up after {attempts} attempt(s) ({reason}): {last}")
        self.attempts = attempts
        self.last = last
        self.reason = reason


# Called before each wait: (attempt number from 0, the failure, the wait in seconds).
OnRetry = Callable[[int, Retryable, float], None]
Sleep = Callable[[float], Awaitable[object]]


async def call_with_retries(
    attempt: Callable[[], Awaitable[T]],
    policy: RetryPolicy,
    *,
    rng: random.Random | None = None,
    sleep: Sleep | None = None,
    clock: Callable[[], float] = time.monotonic,
    stop: asyncio.Event | None = None,
    on_retry: OnRetry | None = None,
) -> T:
    """`await attempt()` until it returns or raises anything but `Retryable`; `GaveUp` when
    the policy's attempts, `Retry-After` bound or deadline end the retries, or `stop` is set.

    The wait between attempts is `sleep` (default: `asyncio.sleep`, or a sleep `stop` wakes
    early); an attempt after a wait `stop` cut short is still made, so a call in flight gets
    its last chance before the caller stops."""
    rand = rng or random.Random()
    if sleep is None:
        sleep = asyncio.sleep if stop is None else _stoppable(stop)
    started = clock()
    number = 0
    while True:
        try:
            return await attempt()
        except Retryable as failure:
            last = failure
        made = number + 1
        if policy.attempts is not None and made >= policy.attempts:
            raise GaveUp(made, last, "attempts") from _chained(last)
        if stop is not None and stop.is_set():
            raise GaveUp(made, last, "stopped") from _chained(last)
        wait = policy.delay(number, rand.random(), last.retry_after)
        if wait is None:
            raise GaveUp(made, last, "retry-after") from _chained(last)
        if policy.deadline is not None and clock() + wait - started > policy.deadline:
            raise GaveUp(made, last, "deadline") from _chained(last)
        if on_retry is not None:
            on_retry(number, last, wait)
        await sleep(wait)
        number += 1


def _chained(failure: Retryable) -> BaseException:
    return failure.cause if isinstance(failure.cause, BaseException) else failure


def _stoppable(stop: asyncio.Event) -> Sleep:
    async def sleep(seconds: float) -> bool:
        return await wait_event(stop, seconds)

    return sleep


@dataclass
class Backoff:
    """The reconnect delay of a loop that never gives up: grows on each failure, resets on
    success. The same formula as `RetryPolicy.backoff` (`backoff_delay`), with equal jitter."""

    base: float = 0.2
    cap: float = 30.0
    rng: random.Random = field(default_factory=random.Random)
    failures: int = 0

    def next_delay(self) -> float:
        delay = backoff_delay(self.base, self.cap, self.failures, self.rng.random())
        self.failures += 1
        return delay

    def reset(self) -> None:
        self.failures = 0
