"""W&B's `max_schedulers` as part of the admission stage: how many sweep schedulers run at once.

W&B's agent (wandb 0.31.0 `agent.py` `loop`) pops an item, and when it is a scheduler
(`_is_scheduler_job`) while `num_running_schedulers >= max_schedulers` it warns and leaves the
item un-acked: "it will be pushed back onto the queue in 1 min" (its lease lapses and W&B offers
it again). Schedulers are not counted against `max_jobs` (`num_running_jobs` leaves them out;
`RunTable.inflight` does too). With `quota.mode: agent` a scheduler is also charged to its
leaf's `sweep_schedulers` count instead of `runs` (the quota stamp says it is one).

A scheduler holds its place from the pop until its record exists (then the run table counts
it) or its dispatch ends without one.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from launch_agent.runtime.poll_policy import capacity
from launch_agent.runtime.runs import RunTable


class SchedulerCap:
    """`max_schedulers` sweep schedulers at once; -1 is unlimited."""

    def __init__(self, max_schedulers: int, runs: RunTable) -> None:
        self.max_schedulers = max_schedulers
        self.runs = runs
        self._dispatching: set[str] = set()  # scheduler items popped without a record yet

    def running(self) -> int:
        without_record = sum(1 for rqi in self._dispatching if self.runs.get(rqi) is None)
        return self.runs.schedulers + without_record

    @contextmanager
    def place(self, rqi_id: str) -> Iterator[bool]:
        """Whether this scheduler may be dispatched now; its place is held for the block.

        An item W&B offers again while its first dispatch still runs, or whose workload this
        agent already tracks, is not a second scheduler: it takes no second place."""
        if rqi_id in self._dispatching or self.runs.get(rqi_id) is not None:
            yield True
            return
        room = capacity(self.max_schedulers, self.running())
        if room is not None and room <= 0:
            yield False
            return
        self._dispatching.add(rqi_id)
        try:
            yield True
        finally:
            self._dispatching.discard(rqi_id)

    def over_cap_message(self) -> str:
        # W&B's warning, with its advice.
        return (
            "Agent already running the maximum number of sweep schedulers:"
            f" {self.max_schedulers}. To set this value use `max_schedulers` key in the agent"
            " config; the item is left for W&B to offer again"
        )
