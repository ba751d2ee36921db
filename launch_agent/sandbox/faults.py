"""Fault injection and accounting shared by the sandbox's servers.

A test (or a benchmark) scripts failures per route: an HTTP status at some rate, a delay, a
dropped connection, an outage window, refused connections. Every request is counted per route
key and kept in a bounded log, so tests assert on traffic ("at most 4 W&B requests per run")
without the log growing with the run.

The route key is server-specific: the Kubernetes API server uses "VERB resource" (for example
"POST jobs", "WATCH pods", "PATCH jobs/status"), the W&B server the GraphQL operation name
(for example "popFromRunQueue") or "REST /files". A rule matches by exact key, by `*`
(everything) or by a key ending in `*` (prefix).

`Faults.observers` are called with the route key and path of every request as it arrives, and
the fault rule picked for it (None: the request goes to its handler), before the handler runs:
a harness in the same process (the chaos bench) acts at the moment a given request reaches the
server, e.g. kills the process that sent it while the request is in flight.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field


@dataclass
class FaultRule:
    """One scripted failure. `times=None` means for as long as the rule is installed."""

    match: str
    status: int | None = None
    rate: float = 1.0
    delay: float = 0.0
    times: int | None = None
    drop: bool = False
    message: str = "injected fault"
    # W&B only: answer HTTP 200 with a GraphQL `errors` entry instead of an HTTP status.
    graphql_error: bool = False
    fired: int = 0
    # Kubernetes watches only: `drop` cuts the stream, `stall` keeps it open but silent, in
    # both cases after `after_events` events were delivered. A `status=410` rule on a watch
    # key answers with an ERROR event carrying 410 Expired, as a compacted etcd would.
    stall: bool = False
    after_events: int = 0
    # W&B only, a flood: the operation runs (a pop leases its items), then its answer is
    # replaced by `body_bytes` bytes of filler, sent with a Content-Length, or chunked without
    # one (`chunked`), or chunked and never ending (`endless`) until the client hangs up.
    # `sent` counts what was written to the socket: a client that stops reading at its limit
    # keeps it near that limit plus the kernel's buffers.
    body_bytes: int | None = None
    chunked: bool = False
    endless: bool = False
    sent: int = 0

    @property
    def floods(self) -> bool:
        return self.endless or self.body_bytes is not None

    def matches(self, key: str) -> bool:
        if self.match in ("*", key):
            return True
        return self.match.endswith("*") and key.startswith(self.match[:-1])


@dataclass(frozen=True)
class LoggedRequest:
    at: float
    method: str
    path: str
    key: str
    status: int
    seconds: float


@dataclass
class Faults:
    """The fault script of one server. Deterministic for a given seed."""

    seed: int = 0
    rules: list[FaultRule] = field(default_factory=list)
    refuse: bool = False
    observers: list[Callable[[str, str, FaultRule | None], None]] = field(default_factory=list)
    _outage_until: float = 0.0
    _outage_status: int = 503
    _rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed)

    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def remove(self, rule: FaultRule) -> None:
        if rule in self.rules:
            self.rules.remove(rule)

    def clear(self) -> None:
        self.rules.clear()
        self.refuse = False
        self._outage_until = 0.0

    def outage(self, seconds: float, status: int = 503) -> None:
        """Every request fails with `status` for the next `seconds` (wall clock)."""
        self._outage_until = time.monotonic() + seconds
        self._outage_status = status

    def end_outage(self) -> None:
        self._outage_until = 0.0

    @property
    def in_outage(self) -> bool:
        return time.monotonic() < self._outage_until

    def pick(self, key: str, path: str = "") -> FaultRule | None:
        """The rule that fires for this request, if any; counts it as fired."""
        rule = self._pick(key)
        for observer in list(self.observers):
            observer(key, path, rule)
        return rule

    def _pick(self, key: str) -> FaultRule | None:
        if self.in_outage:
            return FaultRule("*", status=self._outage_status, message="injected outage")
        for rule in self.rules:
            if not rule.matches(key):
                continue
            if rule.times is not None and rule.fired >= rule.times:
                continue
            if rule.rate < 1.0 and self._rng.random() >= rule.rate:
                continue
            rule.fired += 1
            return rule
        return None

    async def delay_for(self, rule: FaultRule | None) -> None:
        if rule is not None and rule.delay > 0:
            await asyncio.sleep(rule.delay)


class RequestLog:
    """A bounded log of requests and unbounded per-key counters (a counter is one int)."""

    def __init__(self, maxlen: int = 10_000) -> None:
        self._entries: deque[LoggedRequest] = deque(maxlen=maxlen)
        self.counts: Counter[str] = Counter()

    def record(self, method: str, path: str, key: str, status: int, seconds: float) -> None:
        self._entries.append(LoggedRequest(time.monotonic(), method, path, key, status, seconds))
        self.counts[key] += 1

    def __iter__(self) -> Iterator[LoggedRequest]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def count(self, key: str | None = None) -> int:
        if key is None:
            return sum(self.counts.values())
        return self.counts[key]

    def reset(self) -> None:
        self._entries.clear()
        self.counts.clear()
