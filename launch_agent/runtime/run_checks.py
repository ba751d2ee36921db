"""W&B's run checks after a workload ended, and the sweep a failed scheduler leaves behind.

- A workload that succeeded while its W&B run never left `pending` (or never existed) did not
  call `wandb.init`: W&B's agent fails its item with "The submitted job exited successfully but
  failed to call wandb.init" once the run stayed so through `RUN_INFO_GRACE_PERIOD` (wandb
  0.31.0 `agent.py` `finish_thread_id` and `_check_run_exists_and_inited`: the state is read at
  once, then after 1, 2, 4, ... s while the interval is within the grace period). A run on
  another entity than the agent's is not checked (W&B skips it too).
- A sweep scheduler that failed: W&B's agent sets its sweep to `CANCELED` (`_check_run_finished`,
  `_set_sweep_state`; "scheduler run_id should == sweep_id").

Each check runs in its own task, so a 60 s grace period never holds a finisher worker.
"""

from __future__ import annotations

import asyncio
import logging
from typing import assert_never

from launch_agent.adapters.wandb_client import RunRef, WandbClient
from launch_agent.adapters.wandb_errors import WandbError
from launch_agent.model.config import SweepsConfig
from launch_agent.model.sweeps import NO_WANDB_INIT
from launch_agent.runtime.reporter import Declined, ItemRef, NotSent, Reporter, Sent
from launch_agent.runtime.runs import RunRecord

log = logging.getLogger(__name__)


def check_times(grace: float) -> list[float]:
    """Seconds after the end at which W&B's agent reads the run's state: 0, then 1, 3, 7, ...
    (sleeping 1, 2, 4, ... s) while the next interval is within `grace`."""
    times, at, interval = [0.0], 0.0, 1.0
    while interval <= grace:
        at += interval
        times.append(at)
        interval *= 2
    return times


class RunChecks:
    def __init__(
        self, wandb: WandbClient, reporter: Reporter, sweeps: SweepsConfig, *, entity: str
    ) -> None:
        self.wandb = wandb
        self.reporter = reporter
        self.sweeps = sweeps
        self.entity = entity
        self.checked = 0  # init checks that reached a verdict (tests wait on it)
        self.done = asyncio.Event()  # set after each verdict
        self._tasks: set[asyncio.Task[None]] = set()

    async def stopped_in_wandb(self, record: RunRecord) -> bool | None:
        """Whether W&B says the run was stopped from its UI. A replica that did not see the stop
        itself (a standby that took over, a start after the leader deleted the workload) must
        not report that deletion as a failure (found by `launch-agent bench chaos`). Asked
        through a W&B outage with the reporter's retries; None when the agent stops first (the
        next start asks again), False when W&B refuses the question (the deletion is reported)."""
        if not (record.run_id and record.entity and record.project):
            return False
        ref = RunRef(record.entity, record.project, record.run_id)
        asked = await self.reporter.retrying(
            f"the stop check of run {record.run_id}", lambda: self.wandb.run_stopped([ref])
        )
        match asked:
            case Sent(value=stopped):
                return bool(stopped.get(ref))
            case NotSent():
                return None
            case Declined():
                return False
            case _:
                assert_never(asked)

    async def state_in_wandb(self, record: RunRecord) -> str | None:
        """The W&B run's state (`finished`, `failed`, `crashed`, ...; "" when W&B has no such run
        or refuses the question), asked through an outage with the reporter's retries; None when
        the agent stops first (the next start asks again)."""
        if not (record.run_id and record.entity and record.project):
            return ""
        asked = await self.reporter.retrying(
            f"the state of run {record.run_id}",
            lambda: self.wandb.run_state(record.entity, record.project, record.run_id),
        )
        match asked:
            case Sent(value=state):
                return (state or "").lower()
            case NotSent():
                return None
            case Declined():
                return ""
            case _:
                assert_never(asked)

    def succeeded(self, record: RunRecord) -> None:
        """Check, in its own task, that a succeeded run called wandb.init."""
        if not self.sweeps.check_wandb_init or record.scheduler or record.entity != self.entity:
            return
        task = asyncio.create_task(self._checked(record), name=f"init check {record.rqi_id}")
        self._tasks.add(task)

    async def _checked(self, record: RunRecord) -> None:
        # Each task leaves the set as it ends: sweeping the set at every success instead
        # cost a scan of every check still waiting (thousands when thousands succeed at once).
        try:
            await self._check_init(record)
        finally:
            task = asyncio.current_task()
            if task is not None:
                self._tasks.discard(task)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _check_init(self, record: RunRecord) -> None:
        last = 0.0
        for at in check_times(self.sweeps.run_init_grace_seconds):
            await asyncio.sleep(at - last)
            last = at
            try:
                state = await self.wandb.run_state(record.entity, record.project, record.run_id)
            except WandbError as exc:
                log.info("run state of %s not read: %s", record.run_id, exc)
                continue
            if state is not None and state.lower() != "pending":
                self._verdict()
                return
        log.info("run %s succeeded without calling wandb.init", record.run_id)
        # An adopted run may have been checked and failed by the process before this one.
        verify = ItemRef(self.entity, record.queue, record.rqi_id) if record.adopted else None
        await self.reporter.fail(
            record.rqi_id, NO_WANDB_INIT, stage="run", reason="no_wandb_init", verify=verify
        )
        self._verdict()

    def _verdict(self) -> None:
        self.checked += 1
        self.done.set()
        self.done.clear()

    async def scheduler_failed(self, record: RunRecord) -> None:
        """Cancel the sweep of a failed scheduler, as W&B's agent does."""
        try:
            changed = await self.wandb.set_sweep_state(
                record.entity, record.project, record.run_id, "CANCELED"
            )
        except WandbError as exc:
            log.error("sweep %s of a failed scheduler not cancelled: %s", record.run_id, exc)
            return
        if changed:
            log.info("sweep %s cancelled: its scheduler %s failed", record.run_id, record.workload)
