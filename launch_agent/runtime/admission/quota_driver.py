"""Drives the quota engine: one `step()` at a time, each decision applied to the cluster.

The loop (a supervised root task, `run`) takes one engine iteration per turn and yields to the
event loop between turns, so a large tree never holds the loop for a whole admission cycle.
At the fixpoint it explains the runs that became pending (a W&B warning each: "waiting for
quota: a.1 uses 20/20 cpu"), moves the engine's clock (readiness timeouts, backoff ends, the
Strict guard) every `tick_seconds`, and sleeps until an event wakes it. The clock moves one
timer at a time too (`advance_once`), each followed by its cycle, one `step()` per turn.

Decisions, applied in the order the engine made them (victims are suspended before their
preemptor is released):

- `admit`: JSON merge patch `suspend: false` plus the admission time (annotation
  `launch-agent.io/quota-admitted`), so a restart charges the run from the same moment;
- `evict`: the workload is suspended again (its controller deletes the pods) and the admission
  time removed; the run is back to pending with its original enqueue time, and W&B hears who
  reclaimed it. Kinds without a suspend field never get here: they are refused at dispatch;
- a run the engine gave up on (readiness timeouts past `backoffLimit`: FAILED once its
  eviction completed), and runs the tree can never admit: the item is failed in W&B with the
  reason and the workload deleted.

A patch that fails for a reason that may pass (API server unavailable, throttled) is retried
every `tick_seconds` with the state the engine wants *now*; a workload that is gone ends the
run in the engine (the tracker reports it as usual).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, assert_never

from launch_agent.adapters.kube import KubeClient, KubeError, KubeNotFound
from launch_agent.aio import wait_event
from launch_agent.quota import AdmissionEngine, Decision
from launch_agent.quota import RunState as QState
from launch_agent.quota.requests import ADMITTED
from launch_agent.render.pipeline import suspend, unsuspend
from launch_agent.runtime.admission.quota import QuotaAdmission
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.reporter import Declined, NotSent, Reporter, Sent
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore

log = logging.getLogger(__name__)


class QuotaDriver:
    def __init__(
        self,
        admission: QuotaAdmission,
        *,
        kube: KubeClient,
        runs: RunTable,
        specs: SpecStore,
        reporter: Reporter,
        wake: asyncio.Event,
        tick_seconds: float = 1.0,
        clock: Clock = monotonic,
    ) -> None:
        self.admission = admission
        self.kube = kube
        self.runs = runs
        self.specs = specs
        self.reporter = reporter
        self.tick_seconds = tick_seconds
        self.clock = clock
        # Set by the admission's `on_change` (built with `wake.set`): the engine has work.
        self.wake = wake
        # Item id → last warning sent (W&B hears each explanation once).
        self.warned: dict[str, str] = {}
        # Item id → the suspend flag a failed patch still has to set.
        self.retry: dict[str, bool] = {}
        self.decisions = 0
        self.patches = 0

    @property
    def engine(self) -> AdmissionEngine:
        return self.admission.engine

    async def run(self, stopping: asyncio.Event) -> None:
        next_tick = self.clock() + self.tick_seconds
        backlog, self.admission.backlog = self.admission.backlog, []
        for decision in backlog:
            await self._apply(decision)
        target = None  # the clock value the engine is being moved to, timer by timer
        while not stopping.is_set():
            await self._fail_refused()
            decisions = self.engine.step()
            if not decisions and (target is not None or self.clock() >= next_tick):
                if target is None:
                    next_tick = self.clock() + self.tick_seconds
                    await self._retry_patches()
                    target = self.admission.engine_now()
                # One timer stop per turn; the cycle after it runs one step() per turn too.
                fired, done = self.engine.advance_once(target)
                if done:
                    target = None
                for decision in fired:
                    await self._apply(decision)
                await asyncio.sleep(0)
                continue
            if not decisions:
                self._explain()
                self.wake.clear()
                if not self.admission.failures:
                    await wait_event(self.wake, max(0.0, next_tick - self.clock()))
                continue
            for decision in decisions:
                await self._apply(decision)
            await asyncio.sleep(0)  # one engine iteration per turn of the event loop

    # --- decisions ---------------------------------------------------------------------------

    async def _apply(self, decision: Decision) -> None:
        self.decisions += 1
        record = self.runs.get(decision.run)
        if decision.action == "admit":
            log.info("quota: admitted %s (%s)", decision.run, decision.reason)
            self.admission.on_room()
            if record is not None:
                await self._set_suspended(record, False)
        elif decision.action == "evict":
            log.info("quota: evicted %s (%s)", decision.run, decision.reason)
            self.admission.explain_due.add(decision.run)
            if record is not None:
                self._warn(record.rqi_id, self._evicted_message(decision))
                await self._set_suspended(record, True)
            self.admission.check_failed(decision.run)  # instant termination: already ended
        elif decision.action == "fail":
            self.admission.failures.append(
                (decision.run, f"the quota tree gave up on the run: {decision.reason}")
            )

    def _evicted_message(self, decision: Decision) -> str:
        by = self.runs.get(decision.by) if decision.by else None
        who = f"run {by.run_id} of queue {by.queue!r}" if by is not None else decision.by
        if decision.reason.startswith("reclaimed by"):
            why = f"reclaimed by {who}, which takes back its leaf's guaranteed quota"
        elif decision.reason.startswith("preempted by"):
            why = f"preempted by {who} (higher priority, same queue)"
        else:
            why = decision.reason
        return f"evicted by the quota tree: {why}; suspended until admitted again"

    async def _set_suspended(self, record: RunRecord, value: bool) -> None:
        spec = self.specs.for_queue(record.queue)
        body: dict[str, Any] = {"apiVersion": record.api_version, "kind": record.kind}
        try:
            (suspend if value else unsuspend)(body, spec.custom_kind if spec else None)
        except Exception as exc:  # no suspend field: refused at dispatch, so only a spec edit
            log.error("quota: cannot %s %s: %s", "suspend" if value else "admit", record, exc)
            return
        patch = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
        stamp = None if value else str(self.admission.engine_now())
        patch["metadata"] = {"annotations": {ADMITTED: stamp}}
        try:
            resource = await self.kube.resolve(record.api_version, record.kind)
            await self.kube.patch(resource, record.namespace, record.name, patch)
            self.patches += 1
            self.retry.pop(record.rqi_id, None)
        except KubeNotFound:
            log.info("quota: %s is gone; its run ends", record.workload)
            self.admission.forget(record.rqi_id)
        except KubeError as exc:
            log.warning("quota: patching %s failed, retrying: %s", record.workload, exc)
            self.retry[record.rqi_id] = value

    async def _retry_patches(self) -> None:
        for rqi_id in list(self.retry):
            run = self.engine.runs.get(rqi_id)
            record = self.runs.get(rqi_id)
            if run is None or record is None:
                self.retry.pop(rqi_id, None)
                continue
            # What the engine wants now, not what it wanted when the patch failed.
            await self._set_suspended(record, run.state not in (QState.ADMITTED, QState.READY))

    async def _fail_refused(self) -> None:
        """Runs the tree refuses for good: fail the item, delete the workload."""
        while self.admission.failures:
            rqi_id, message = self.admission.failures.pop(0)
            self.admission.forget(rqi_id)
            record = self.runs.get(rqi_id)
            if record is None or record.finishing:
                continue
            self.runs.mark_finishing(record)
            sent = await self.reporter.fail(rqi_id, message, stage="agent", reason="quota")
            match sent:
                case NotSent():
                    continue  # the next start adopts the run and refuses it again
                case Sent() | Declined():
                    pass
                case _:
                    assert_never(sent)
            try:
                resource = await self.kube.resolve(record.api_version, record.kind)
                await self.kube.delete(resource, record.namespace, record.name)
            except KubeError as exc:
                log.warning("quota: deleting %s failed: %s", record.workload, exc)
            self.runs.remove(record)

    # --- W&B warnings --------------------------------------------------------------------------

    def _explain(self) -> None:
        due, self.admission.explain_due = self.admission.explain_due, set()
        for rqi_id in sorted(due):
            run = self.engine.runs.get(rqi_id)
            if run is None or run.state is not QState.PENDING:
                continue
            self._warn(rqi_id, self.engine.explain(rqi_id))

    def _warn(self, rqi_id: str, message: str) -> None:
        if self.warned.get(rqi_id) == message:
            return
        self.warned[rqi_id] = message
        if len(self.warned) > 4 * max(len(self.engine.runs), 1000):
            live = self.engine.runs
            self.warned = {k: v for k, v in self.warned.items() if k in live}
        self.reporter.warn(rqi_id, message, "agent")
