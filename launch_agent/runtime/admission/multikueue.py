"""Queue specs with `spec.kueue.multiKueue` under `quota.mode` agent or off: Kueue's runs.

A MultiKueue run is admitted by the manager's Kueue and placed on a worker cluster by
MultiKueue (docs/multicluster.md); the agent admits nothing for it. So under `quota.mode:
agent` the quota tree never holds such a run (it is not stamped, not suspended by the agent, and
the engine skips it: `QuotaAdmission.outside`), and under `off` it is created as the spec
renders it. For those queues the stage is `kueue.KueueAdmission`, with its pending cap per
LocalQueue; every other queue keeps the mode's own stage (`SplitStage`). With `quota.mode:
kueue` nothing changes: every run is Kueue's already.

`MultiKueueMode` wraps the mode of `quota.mode` (`modes.admission_mode`): it starts the Kueue
watch (the run's Workload names its worker, `status.clusterName`) when a spec loaded at start
asks for MultiKueue. A spec that asks for it only after a reload is refused with the reason
(restart the agent), rather than dispatched with nothing watching where it runs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack, contextmanager
from typing import TYPE_CHECKING, Any

from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render.decisions import Admission, NotAdmitted
from launch_agent.runtime.admission.kueue import KueueAdmission
from launch_agent.runtime.admission.quota import QuotaAdmission
from launch_agent.runtime.admission.stage import AdmissionStage
from launch_agent.runtime.kueue_watch import KueueWatch, KueueWorkloads
from launch_agent.runtime.runs import RunRecord
from launch_agent.runtime.specs import SpecStore

if TYPE_CHECKING:
    from launch_agent.runtime.admission.modes import AdmissionMode, Loop, StageParts


def multikueue_queue(specs: SpecStore, queue: str) -> bool:
    spec = specs.for_queue(queue)
    return spec is not None and spec.multi_kueue


class SplitStage:
    """The mode's stage for its own queues, Kueue's for the MultiKueue ones (module docstring);
    `kueue` is None when no spec asked for MultiKueue at start (its runs are refused)."""

    def __init__(self, own: AdmissionStage, kueue: KueueAdmission | None, specs: SpecStore) -> None:
        self.own = own
        self.kueue = kueue
        self.specs = specs

    def _stage(self, queue: str) -> AdmissionStage | None:
        """The stage of a queue; None: a MultiKueue queue without the Kueue watch."""
        if not multikueue_queue(self.specs, queue):
            return self.own
        return self.kueue

    def room(self, inflight: int) -> int | None:
        return self.own.room(inflight)

    def queue_caps(self, queues: Sequence[str]) -> Mapping[str, int]:
        theirs = [q for q in queues if multikueue_queue(self.specs, q)]
        mine = [q for q in queues if q not in theirs]
        caps = dict(self.own.queue_caps(mine)) if mine else {}
        if theirs:
            # Without the watch its items are refused at once: one per round, like a queue
            # the quota tree cannot place.
            caps.update(self.kueue.queue_caps(theirs) if self.kueue else dict.fromkeys(theirs, 1))
        return caps

    @contextmanager
    def holding(self, queue: str, rqi_id: str) -> Iterator[None]:
        stage = self._stage(queue)
        if stage is None:
            yield
            return
        with stage.holding(queue, rqi_id):
            yield

    def admit(
        self, rqi_id: str, queue: str, spec: QueueSpec, run_spec: Mapping[str, Any]
    ) -> Admission:
        if not spec.multi_kueue:
            return self.own.admit(rqi_id, queue, spec, run_spec)
        if self.kueue is None:
            raise NotAdmitted(
                f"queue spec {spec.name!r} asks for MultiKueue (spec.kueue.multiKueue), which"
                " no queue spec did when the agent started, so it does not watch Kueue's"
                " Workloads (where a run's worker cluster is read): restart the agent",
                reason="multikueue",
            )
        return self.kueue.admit(rqi_id, queue, spec, run_spec)

    def created(self, record: RunRecord) -> None:
        stage = self._stage(record.queue)
        if stage is not None:
            stage.created(record)


class MultiKueueMode:
    """`quota.mode` agent or off, with the Kueue watch for its MultiKueue specs."""

    def __init__(self, inner: AdmissionMode, specs: SpecStore) -> None:
        self.inner = inner
        self.quota: QuotaAdmission | None = inner.quota
        self.kueue: KueueWatch | None = None
        self.workloads = KueueWorkloads()
        self.watched = sorted(s.name for s in specs.specs if s.multi_kueue)

    @property
    def observe(self) -> Callable[[RunRecord], None] | None:
        return self.inner.observe  # the quota tree skips MultiKueue runs itself

    @property
    def kueue_workload(self) -> Callable[[RunRecord], Mapping[str, Any] | None]:
        return self.workloads.of

    async def open(
        self, parts: StageParts, stack: AsyncExitStack, stopping: asyncio.Event
    ) -> AdmissionStage:
        own = await self.inner.open(parts, stack, stopping)
        if not self.watched:
            return SplitStage(own, None, parts.specs)
        names = ", ".join(self.watched)
        watch = parts.kueue_watch(
            self.workloads,
            needed_by=(
                f"queue spec(s) {names} use spec.kueue.multiKueue",
                f"remove spec.kueue.multiKueue from {names}",
            ),
        )
        await watch.start(stack, stopping)
        self.kueue = watch
        return SplitStage(
            own, KueueAdmission(watch, parts.runs, parts.specs, parts.config), parts.specs
        )

    def loops(self, parts: StageParts) -> list[tuple[str, Loop]]:
        return self.inner.loops(parts)
