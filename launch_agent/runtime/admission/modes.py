"""`quota.mode` read once: the admission stage of the mode and what the agent wires around it.

`admission_mode(config, ...)` is the one place that branches on `quota.mode`; the agent's start-up
(`runtime/agent.py`) asks the mode it returns, in its phases, for what it needs:

- specs (`admission_mode`): `off` (`SlotsMode`) builds nothing; `agent` (`QuotaMode`) checks the
  tree and builds `QuotaAdmission` (an invalid tree fails the start before the agent
  registers); `kueue` (`KueueMode`) makes the store of Kueue Workloads;
- adoption (`observe`, `kueue_workload`: the tracker's hooks): `QuotaAdmission.observe`,
  `KueueWorkloads.of`, or none;
- registration (`open`, which returns the stage): `slots.MaxJobs`; the quota engine rebuilt
  from the adopted runs; the Kueue watch started (a cluster without Kueue stops the start
  here) and `kueue.KueueAdmission`;
- loops (`loops`): the quota driver with `agent`, none otherwise.

Under `agent` and `off` the mode is wrapped in `multikueue.MultiKueueMode`: queue specs with
`spec.kueue.multiKueue` are admitted by Kueue (the manager's), never by the agent.

The stage comes last because the Kueue watch is built on the tracker (`on_workload`), which is
built on the mode's hooks; every object is still given its collaborators in its constructor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from launch_agent.adapters.kube import InformerSettings, KubeClient
from launch_agent.model.config import AgentConfig
from launch_agent.runtime.admission.kueue import KueueAdmission
from launch_agent.runtime.admission.multikueue import MultiKueueMode
from launch_agent.runtime.admission.quota import QuotaAdmission
from launch_agent.runtime.admission.quota_driver import QuotaDriver
from launch_agent.runtime.admission.slots import MaxJobs
from launch_agent.runtime.admission.stage import AdmissionStage
from launch_agent.runtime.clock import Clock
from launch_agent.runtime.kueue_watch import KueueWatch, KueueWorkloads
from launch_agent.runtime.reporter import Reporter
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore

Loop = Callable[[asyncio.Event], Coroutine[Any, Any, None]]  # a root task (`Supervisor.add`)


@dataclass(frozen=True, slots=True)
class StageParts:
    """The collaborators a mode's stage and loops are built from, once the agent registered."""

    config: AgentConfig
    kube: KubeClient
    runs: RunTable
    specs: SpecStore
    reporter: Reporter
    evaluate: Callable[[RunRecord], None]  # the tracker's: judge a run again
    informer_settings: InformerSettings | None
    clock: Clock

    def kueue_watch(self, workloads: KueueWorkloads, **options: Any) -> KueueWatch:
        """The Kueue watch over these parts' runs, reports and specs (`options`: KueueWatch's
        own, such as `needed_by`)."""
        return KueueWatch(
            self.kube,
            self.runs,
            self.reporter,
            self.specs,
            self.config,
            workloads=workloads,
            on_workload=self.evaluate,
            informer_settings=self.informer_settings,
            **options,
        )


class AdmissionMode(Protocol):
    quota: QuotaAdmission | None  # quota.mode agent: for the status page and the tests
    kueue: KueueWatch | None  # quota.mode kueue, once `open` started it

    @property
    def observe(self) -> Callable[[RunRecord], None] | None:
        """The tracker's hook: every assessed run (quota.mode agent)."""

    @property
    def kueue_workload(self) -> Callable[[RunRecord], Mapping[str, Any] | None] | None:
        """The run's Kueue Workload, for the judgement (quota.mode kueue)."""

    async def open(
        self, parts: StageParts, stack: AsyncExitStack, stopping: asyncio.Event
    ) -> AdmissionStage: ...

    def loops(self, parts: StageParts) -> list[tuple[str, Loop]]: ...


class SlotsMode:
    """`quota.mode: off`: W&B's `max_jobs` slots."""

    quota: QuotaAdmission | None = None
    kueue: KueueWatch | None = None
    observe = None
    kueue_workload = None

    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max_jobs

    async def open(
        self, parts: StageParts, stack: AsyncExitStack, stopping: asyncio.Event
    ) -> AdmissionStage:
        return MaxJobs(self.max_jobs)

    def loops(self, parts: StageParts) -> list[tuple[str, Loop]]:
        return []


class QuotaMode:
    """`quota.mode: agent`: the agent's quota tree (`quota.py`), driven by `quota_driver.py`."""

    kueue: KueueWatch | None = None
    kueue_workload = None

    def __init__(self, quota: QuotaAdmission, wake: asyncio.Event) -> None:
        self.quota: QuotaAdmission | None = quota
        self._quota = quota
        self.wake = wake  # the driver's; `quota` sets it (`on_change`)

    @property
    def observe(self) -> Callable[[RunRecord], None]:
        # Inactive until `open` rebuilt the engine: the rebuild reads every adopted run at once.
        return self._quota.observe

    async def open(
        self, parts: StageParts, stack: AsyncExitStack, stopping: asyncio.Event
    ) -> AdmissionStage:
        await self._quota.rebuild()  # same usage and order as before the restart
        return self._quota

    def loops(self, parts: StageParts) -> list[tuple[str, Loop]]:
        driver = QuotaDriver(
            self._quota,
            kube=parts.kube,
            runs=parts.runs,
            specs=parts.specs,
            reporter=parts.reporter,
            wake=self.wake,
            clock=parts.clock,
        )
        return [("quota", driver.run)]


class KueueMode:
    """`quota.mode: kueue`: Kueue admits; the agent reports its decisions and caps the runs
    waiting in it (`kueue.py`, `runtime/kueue_watch.py`)."""

    quota: QuotaAdmission | None = None
    observe = None

    def __init__(self) -> None:
        # The watch writes each run's Workload, the tracker reads it.
        self.workloads = KueueWorkloads()
        self.kueue: KueueWatch | None = None

    @property
    def kueue_workload(self) -> Callable[[RunRecord], Mapping[str, Any] | None]:
        return self.workloads.of

    async def open(
        self, parts: StageParts, stack: AsyncExitStack, stopping: asyncio.Event
    ) -> AdmissionStage:
        watch = parts.kueue_watch(self.workloads)
        await watch.start(stack, stopping)
        self.kueue = watch
        return KueueAdmission(watch, parts.runs, parts.specs, parts.config)

    def loops(self, parts: StageParts) -> list[tuple[str, Loop]]:
        return []


def admission_mode(
    config: AgentConfig,
    specs: SpecStore,
    runs: RunTable,
    *,
    now: Callable[[], datetime],
    poll_wake: asyncio.Event,
) -> AdmissionMode:
    """The mode `quota.mode` names; with `agent`, `StartupError` for an invalid tree. Under
    `agent` and `off` the queue specs with `spec.kueue.multiKueue` are Kueue's
    (`multikueue.MultiKueueMode`)."""
    if config.quota.mode == "kueue":
        return KueueMode()
    inner: AdmissionMode
    if config.quota.mode == "agent":
        wake = asyncio.Event()
        quota = QuotaAdmission.from_config(
            config, specs, runs, now=now, on_change=wake.set, on_room=poll_wake.set
        )
        inner = QuotaMode(quota, wake)
    else:
        inner = SlotsMode(config.max_jobs)
    return MultiKueueMode(inner, specs)
