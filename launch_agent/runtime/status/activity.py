"""Recent events the status page shows and cumulative counters cannot: what happened in the
last hour per queue, the last failures with their reasons, the last builds.

Bounded: timestamps older than the window are dropped on every record and read, each queue's
window holds at most `MAX_PER_WINDOW` events, the failure and build lists keep the newest
`MAX_FAILURES` / `MAX_BUILDS`, and the item → queue map is an LRU of `MAX_ITEMS`. Item ids are
W&B's and may be anything: each is kept as `shown_item_id` shows it (a refused 200,000-character
id as its first 256 characters and its length), failure messages at most `MAX_MESSAGE`.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from launch_agent.model.run_item import shown_item_id

WINDOW = timedelta(hours=1)
MAX_PER_WINDOW = 100_000
MAX_FAILURES = 50
MAX_BUILDS = 50
MAX_ITEMS = 10_000
MAX_MESSAGE = 2_000


def _utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Failure:
    at: datetime
    item: str
    queue: str
    stage: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Build:
    at: datetime
    result: str  # built, cached, failed
    seconds: float
    image: str


@dataclass(frozen=True, slots=True)
class ApiHealth:
    last_ok: datetime | None
    last_error: datetime | None
    last_status: str  # "200", "503", "network"


@dataclass(frozen=True, slots=True)
class ActivityView:
    """A copy of the recorder's state at one moment (plain data for the snapshot)."""

    now: datetime
    popped_hour: dict[str, int]
    failed_hour: dict[str, int]
    last_pop: dict[str, datetime]
    last_poll: datetime | None
    failures: list[Failure]
    builds: list[Build]
    apis: dict[str, ApiHealth]


class _Window:
    def __init__(self) -> None:
        self.times: deque[datetime] = deque(maxlen=MAX_PER_WINDOW)

    def add(self, at: datetime) -> None:
        self.times.append(at)

    def count(self, since: datetime) -> int:
        while self.times and self.times[0] < since:
            self.times.popleft()
        return len(self.times)


class Activity:
    def __init__(self, now: Callable[[], datetime] = _utcnow, window: timedelta = WINDOW) -> None:
        self.now = now
        self.window = window
        self._pops: dict[str, _Window] = {}
        self._fails: dict[str, _Window] = {}
        self._last_pop: dict[str, datetime] = {}
        self._items: OrderedDict[str, str] = OrderedDict()
        self._failures: deque[Failure] = deque(maxlen=MAX_FAILURES)
        self._builds: deque[Build] = deque(maxlen=MAX_BUILDS)
        self._last_poll: datetime | None = None
        self._apis: dict[str, ApiHealth] = {}

    def polled(self) -> None:
        self._last_poll = self.now()

    def popped(self, queue: str, item: str) -> None:
        at = self.now()
        self._pops.setdefault(queue, _Window()).add(at)
        self._last_pop[queue] = at
        self.remember(item, queue)

    def remember(self, item: str, queue: str) -> None:
        """Which queue an item came from, so its failure is counted against that queue."""
        item = shown_item_id(item)
        self._items[item] = queue
        self._items.move_to_end(item)
        while len(self._items) > MAX_ITEMS:
            self._items.popitem(last=False)

    def failed(self, item: str, stage: str, reason: str, message: str) -> None:
        at = self.now()
        item = shown_item_id(item)
        queue = self._items.get(item, "")
        self._fails.setdefault(queue, _Window()).add(at)
        self._failures.append(Failure(at, item, queue, stage, reason, message[:MAX_MESSAGE]))

    def built(self, result: str, seconds: float, image: str) -> None:
        self._builds.append(Build(self.now(), result, seconds, image))

    def api_call(self, api: str, status: int | None) -> None:
        at = self.now()
        old = self._apis.get(api, ApiHealth(None, None, ""))
        code = "network" if status is None else str(status)
        if status is not None and status < 400:
            self._apis[api] = ApiHealth(at, old.last_error, code)
        else:
            self._apis[api] = ApiHealth(old.last_ok, at, code)

    def view(self) -> ActivityView:
        now = self.now()
        since = now - self.window
        return ActivityView(
            now=now,
            popped_hour={q: w.count(since) for q, w in self._pops.items()},
            failed_hour={q: w.count(since) for q, w in self._fails.items()},
            last_pop=dict(self._last_pop),
            last_poll=self._last_poll,
            failures=list(self._failures),
            builds=list(self._builds),
            apis=dict(self._apis),
        )
