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

from launch_agent.adapters.retry import RetryPolicy, parse_retry_after

__all__ = ["RETRY_STATUSES", "Backoff", "RetryPolicy", "parse_retry_after"]

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})


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
