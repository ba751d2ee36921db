"""The quota engine rebuilt from the adopted workloads after a restart, before anything is
popped: unsuspended runs are adopted with their annotated admission time, suspended ones
submitted again in their annotated enqueue order, so usage and order are what they were.

Both steps yield to the event loop every `REBUILD_BATCH` runs (10,000 adopted runs are one
start-up)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction

from launch_agent.quota import AdmissionEngine, Decision
from launch_agent.quota.requests import QuotaStamp
from launch_agent.runtime.runs import RunRecord

# Runs entered into the engine between two yields to the event loop during a rebuild.
REBUILD_BATCH = 200
# Enqueue times of waiting runs are restored to within this many seconds after a restart (the
# Strict guard, R9, counts from them; its thresholds are minutes).
REBUILD_STEP = 60

Entry = tuple[Fraction, RunRecord, QuotaStamp]
# The run's stamp and admission time (None: suspended), or why it has none.
Read = Callable[[RunRecord], tuple[QuotaStamp, Fraction | None] | str]
Enter = Callable[[RunRecord, QuotaStamp, Fraction | None], None]


@dataclass
class Adopted:
    running: list[Entry] = field(default_factory=list)  # by admission time
    waiting: list[Entry] = field(default_factory=list)  # by enqueue time (stamp order)

    def start(self, now: Fraction) -> Fraction:
        """The rebuilt engine's clock starts at the oldest wait, so the Strict guard counts
        waits from when they began."""
        return min([t for t, _, _ in self.waiting] + [now])


async def sort_adopted(
    records: Iterable[RunRecord], read: Read, unstamped: Callable[[str, str], None]
) -> Adopted:
    adopted = Adopted()
    for i, record in enumerate(records):
        if i % REBUILD_BATCH == REBUILD_BATCH - 1:
            await asyncio.sleep(0)
        if record.finishing or (record.state is not None and record.state.terminal):
            continue
        found = read(record)
        if isinstance(found, str):
            unstamped(record.rqi_id, found)
            continue
        stamp, admitted = found
        if admitted is None:
            adopted.waiting.append((stamp.enqueued, record, stamp))
        else:
            adopted.running.append((admitted, record, stamp))
    adopted.running.sort(key=lambda e: (e[0], e[1].rqi_id))
    adopted.waiting.sort(key=lambda e: (e[2].enqueued, e[1].rqi_id))
    return adopted


async def replay(
    engine: AdmissionEngine, adopted: Adopted, enter: Enter, engine_now: Callable[[], Fraction]
) -> list[Decision]:
    """Enter the adopted runs into `engine`; the decisions its cycles made on the way, which
    the driver applies first."""
    backlog: list[Decision] = []
    for i, (admitted, record, stamp) in enumerate(adopted.running):
        enter(record, stamp, admitted)
        if i % REBUILD_BATCH == REBUILD_BATCH - 1:
            await asyncio.sleep(0)
    for i, (enqueued, record, stamp) in enumerate(adopted.waiting):
        if i % REBUILD_BATCH == REBUILD_BATCH - 1:
            await asyncio.sleep(0)
        # Runs are submitted in stamp order (their place in the queue); the clock follows
        # their enqueue times in steps of `REBUILD_STEP`, because each `advance` is a whole
        # admission cycle (one per run would make a large rebuild quadratic).
        if enqueued >= engine.now + REBUILD_STEP:
            backlog += engine.advance(enqueued)
            await asyncio.sleep(0)
        enter(record, stamp, None)
    backlog += engine.advance(engine_now())
    return backlog
