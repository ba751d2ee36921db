"""Stop from the W&B UI: batched `RunStoppedStatus` checks, within a request budget.

The reference agent sends one `RunStoppedStatus` per running job every 10 s. Here every
`tracking.stop_check_seconds` the schedule (`tracking/stop_schedule.py`) picks the runs to ask
about: every run younger than `stop_check_young_seconds`, and an even share of the older ones
(each once every `stop_check_old_seconds`), in requests of `stop_check_batch` runs, never more
than `stop_check_max_requests_per_minute`. A run's age is its workload's `creationTimestamp`
(so a restarted or newly elected agent does not take every adopted run for a young one); idle
agents send nothing.

A stop is not immediate, as in W&B's agent: the run's own `wandb` process sees the stop and
may exit cleanly. If the workload still exists `stopped_run_timeout` seconds after the stop
was first seen, it is deleted with `propagationPolicy: Background`, so its pods go too. The
tracker then sees the deletion and, because the stop was requested, reports no failure.

A sweep scheduler is stopped the same way when its sweep is over: finished, cancelled or
stopped from the UI (`GetSweepState` answers neither RUNNING, PAUSED nor PENDING). The
scheduler's own process usually exits first (wandb's `Scheduler` polls the sweep too); the
deletion covers one that does not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from launch_agent.adapters.kube import KubeClient, KubeError
from launch_agent.adapters.wandb_client import RunRef, WandbClient
from launch_agent.adapters.wandb_errors import WandbError
from launch_agent.aio import wait_event
from launch_agent.model.config import AgentConfig
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.tracking.fields import timestamp
from launch_agent.tracking.stop_schedule import StopCheckPolicy, StopSchedule
from launch_agent.tracking.views import Meta

log = logging.getLogger(__name__)

# Sweep states in which its scheduler keeps running (`PENDING`: launch-sweep's state until the
# scheduler starts it).
SWEEP_LIVE_STATES = frozenset({"RUNNING", "PAUSED", "PENDING"})


def stop_check_policy(config: AgentConfig) -> StopCheckPolicy:
    t = config.tracking
    return StopCheckPolicy(
        interval=t.stop_check_seconds,
        young_seconds=t.stop_check_young_seconds,
        old_interval=t.stop_check_old_seconds,
        batch=t.stop_check_batch,
        max_requests_per_minute=t.stop_check_max_requests_per_minute,
    )


class Stopper:
    def __init__(
        self,
        wandb: WandbClient,
        kube: KubeClient,
        runs: RunTable,
        *,
        policy: StopCheckPolicy,
        timeout: float,
        clock: Clock = monotonic,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.wandb = wandb
        self.kube = kube
        self.runs = runs
        self.interval = policy.interval
        self.schedule = StopSchedule(policy)
        self.timeout = timeout
        self.clock = clock
        self.now = now or (lambda: datetime.now(UTC))
        self.checks = 0

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await wait_event(stopping, self.interval)
            if stopping.is_set():
                return
            await self.check()

    async def _check_sweep(self, record: RunRecord) -> None:
        try:
            state = await self.wandb.sweep_state(record.entity, record.project, record.run_id)
        except WandbError as exc:
            log.warning("sweep check of %s skipped: %s", record.run_id, exc)
            return
        if state is None or state in SWEEP_LIVE_STATES:
            return
        record.stop_requested_at = self.clock()
        log.info(
            "sweep %s is %s; its scheduler %s is deleted in %ss unless it ends first",
            record.run_id,
            state,
            record.workload,
            self.timeout,
        )

    async def check(self) -> None:
        # Every run whose workload exists, acked or not: an adopted run's ack is not known
        # (`RunRecord.acked`), and W&B answers "not stopped" for a run it does not have.
        candidates = [
            r
            for r in self.runs
            if r.last is not None and not r.finishing and r.run_id and r.entity and r.project
        ]
        if candidates:
            wall, mono = self.now(), self.clock()
            ages = [(r.rqi_id, self._age(r, wall, mono)) for r in candidates]
            chosen = set(self.schedule.select(ages))
            candidates = [r for r in candidates if r.rqi_id in chosen]
            refs = [RunRef(r.entity, r.project, r.run_id) for r in candidates]
            try:
                stopped = await self.wandb.run_stopped(refs)
            except WandbError as exc:
                log.warning("stop check skipped: %s", exc)
                stopped = {}
            self.checks += 1
            now = self.clock()
            for record, ref in zip(candidates, refs, strict=True):
                if stopped.get(ref) and record.stop_requested_at is None:
                    record.stop_requested_at = now
                    log.info(
                        "run %s was stopped in W&B; %s is deleted in %ss unless it ends first",
                        record.run_id,
                        record.workload,
                        self.timeout,
                    )
            for record in candidates:
                if record.scheduler and record.stop_requested_at is None:
                    await self._check_sweep(record)
        await self._delete_due()

    @staticmethod
    def _age(record: RunRecord, wall: datetime, mono: float) -> float:
        """Seconds since the workload was created; since first seen when it carries no time."""
        created = None if record.last is None else timestamp(Meta(record.last).creation_timestamp)
        if created is not None:
            return max(0.0, (wall - created).total_seconds())
        return max(0.0, mono - record.started)

    async def _delete_due(self) -> None:
        now = self.clock()
        for record in self.runs:
            at = record.stop_requested_at
            if at is None or record.deleting or record.finishing or now - at < self.timeout:
                continue
            try:
                resource = await self.kube.resolve(record.api_version, record.kind)
                await self.kube.delete(resource, record.namespace, record.name)
            except KubeError as exc:
                log.warning("deleting stopped run %s failed (retried): %s", record.workload, exc)
                continue
            record.deleting = True
            log.info("deleted %s (stopped in W&B)", record.workload)
