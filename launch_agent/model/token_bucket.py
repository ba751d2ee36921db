"""A token bucket, as client-go's `flowcontrol.NewTokenBucketRateLimiter` keeps one.

client-go (`util/flowcontrol/throttle.go`) wraps golang.org/x/time/rate: a bucket of `burst`
tokens refilled at `rate` per second, where a caller *reserves* a token and is told how long
to wait for it. Reserving may take the bucket below zero: the callers that arrive while it is
empty queue behind each other in arrival order, each told a later time, instead of all
waking at the same instant and racing for the next token.

Pure: the caller passes the time in (`runtime`/`adapters` sleep; tests give any clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TokenBucket:
    """`rate` tokens per second, at most `burst` saved up; starts full."""

    rate: float
    burst: int
    tokens: float = field(init=False)
    updated: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.rate <= 0:
            raise ValueError("rate must be positive")
        if self.burst < 1:
            raise ValueError("burst must be at least 1")
        self.tokens = float(self.burst)

    def _refill(self, now: float) -> None:
        if self.updated is not None and now > self.updated:
            self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
        if self.updated is None or now > self.updated:
            self.updated = now

    def reserve(self, now: float) -> float:
        """Take one token; the seconds to wait before using it (0: at once)."""
        self._refill(now)
        self.tokens -= 1.0
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate

    def cancel(self, now: float) -> None:
        """Give back a reserved token that was not used (its wait was cut short)."""
        self._refill(now)
        self.tokens = min(float(self.burst), self.tokens + 1.0)

    def full(self, now: float) -> bool:
        """Whether the bucket has refilled to its burst: it holds nothing a later caller needs."""
        self._refill(now)
        return self.tokens >= self.burst
