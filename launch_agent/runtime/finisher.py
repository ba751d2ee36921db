"""What happens once a run is over: report it, requeue it, clean up, free its slot.

The tracker hands terminal runs over with `submit` (no I/O in the informer handler); a few
worker tasks take them in order:

- failed: `failRunQueueItem(stage="run")` with the diagnosis (OOMKilled in container main,
  exit code N, ImagePullBackOff for image X, the scheduler's message, ...) and the tail of the
  failing container's log when it ran at all;
- preempted: pushed back onto its queue with `_resume_count + 1` and the same run id (so the
  W&B run resumes), at most `tracking.max_requeues` times; then failed;
- stopped: nothing to report when W&B asked for the stop; a workload someone else deleted
  before it finished is a failure (when only a relist saw it gone, W&B's run state decides:
  `_unseen_deletion`);
- succeeded: nothing to report (W&B learns success from the run itself), unless its W&B run
  never left `pending`: W&B's "failed to call wandb.init" check (`runtime/run_checks.py`);
- a sweep scheduler that failed is reported like any run and its sweep set to `CANCELED`; a
  scheduler's Job is deleted once it ended, whatever the outcome (its sweep is over).

Clean-up: a Job that Kubernetes finished stays for its `ttlSecondsAfterFinished` (its pods and
logs help a person diagnose) and, if it failed or was preempted, is annotated
`launch-agent.io/reported` so a restarted agent does not report it again. Where RBAC grants no
`patch` on Jobs (the Helm chart's least-privilege Role) such a Job is deleted instead, once its
report and log tail reached W&B. Every other workload (custom resources, and Jobs the agent gives up
on: stuck pulls, unschedulable) is deleted with `propagationPolicy: Background`, so no pod is
left behind. The record is removed last; if the agent stops before W&B confirmed a report, the
record stays and the next start adopts the run and reports it then. When the annotation (or the
delete) fails for good the record stays too and only the clean-up is tried again, with a
growing delay: the report is not sent twice by the process that sent it. A finished Job or
JobSet whose item W&B may still offer again (`runtime/settlement.py`) has its TTL held meanwhile
(`runtime/ttl_hold.py`): it is the proof the item ran, and a kill after its TTL would otherwise
leave none.

Reported exactly once: a run this process did not see end while leading (`RunRecord.adopted`:
adopted on start, or tracked while standing by) may have been reported by the replica that led
before, which could be killed after W&B accepted the report and before its annotation (or whose
annotation failed). Before reporting such a run the finisher asks W&B (`_reported_before`): an
item already `FAILED` is not failed again, an item already requeued (a workload here, or an
item of its queue, with its run id and the next resume count) is neither requeued nor failed.
W&B's record is the only one a kill cannot split from the report itself.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from dataclasses import dataclass, field
from typing import Any, NamedTuple, assert_never

from launch_agent.adapters.kube import KubeClient, KubeError, KubeForbidden, KubeNotFound
from launch_agent.adapters.retry import backoff_delay
from launch_agent.aio import wait_event
from launch_agent.model.config import TrackingConfig
from launch_agent.model.run_state import Diagnosis, Reason, RunState, Severity
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.recorded_spec import recorded_run_spec, resume_count
from launch_agent.runtime.reporter import Declined, Delivery, ItemRef, NotSent, Reporter, Sent
from launch_agent.runtime.run_checks import RunChecks
from launch_agent.runtime.runs import REPORTED, RunRecord, RunTable
from launch_agent.runtime.settlement import Settlement
from launch_agent.runtime.ttl_hold import (
    HELD_KINDS,
    hold_patch,
    merged,
    release_patch,
    ttl_held_on,
    ttl_of,
)
from launch_agent.runtime.workers import Workers
from launch_agent.tracking import Assessment
from launch_agent.tracking.workloads import Phase, workload_status

log = logging.getLogger(__name__)

# W&B run states that say a run ended badly (`crashed`: W&B lost its process's heartbeat).
WANDB_FAILED_STATES = frozenset({"failed", "crashed"})

# Reasons whose container ran, so its log may say why.
_HAS_LOG = frozenset(
    {
        Reason.OOM_KILLED,
        Reason.EXIT_CODE,
        Reason.CRASH_LOOP_BACK_OFF,
        Reason.BACKOFF_LIMIT_EXCEEDED,
        Reason.POD_FAILURE_POLICY,
        Reason.WORKLOAD_FAILED,
    }
)


class Ended(NamedTuple):
    """A run the tracker saw end (or whose finish is due again), as `handle` takes it."""

    record: RunRecord
    assessment: Assessment


@dataclass(frozen=True, slots=True)
class Reported:
    """A run whose end W&B has: only its finish (settling, clean-up) is left, tried `tries`
    times so far."""

    state: RunState
    tries: int


@dataclass(order=True, frozen=True, slots=True)
class Later:
    """A finish tried again once `due` (on the finisher's clock); `seq` keeps the heap's
    order total."""

    due: float
    seq: int
    record: RunRecord = field(compare=False)
    assessment: Assessment = field(compare=False)


class Finisher:
    def __init__(
        self,
        kube: KubeClient,
        runs: RunTable,
        reporter: Reporter,
        metrics: Metrics,
        tracking: TrackingConfig,
        *,
        checks: RunChecks,
        settlement: Settlement,
        queue_entity: str,
        workers: int = 4,
        clock: Clock = monotonic,
        clean_up_retry_base: float = 1.0,
        clean_up_retry_cap: float = 60.0,
        worker_clusters: Workers | None = None,
    ) -> None:
        self.kube = kube
        # MultiKueue: a run's pods (and so its log) are on the worker it ran on.
        self.worker_clusters = worker_clusters
        self.runs = runs
        self.reporter = reporter
        self.metrics = metrics
        self.tracking = tracking
        self.checks = checks
        self.settlement = settlement
        self.queue_entity = queue_entity
        self.workers = workers
        self._queue: asyncio.Queue[Ended] = asyncio.Queue()
        self.handled = 0
        # False once the API server refused a patch (RBAC): reported Jobs are deleted instead.
        self.may_patch = True
        self.clock = clock
        self.clean_up_retry_base = clean_up_retry_base
        self.clean_up_retry_cap = clean_up_retry_cap
        # Runs reported whose clean-up (annotation or delete) failed, or whose item is not
        # settled yet, by item id: their next `handle` only finishes them.
        self._reported: dict[str, Reported] = {}
        # Those finishes, in the order they are due (a heap).
        self._later: list[Later] = []
        self._seq = itertools.count()

    def submit(self, record: RunRecord, assessment: Assessment) -> None:
        self._queue.put_nowait(Ended(record, assessment))

    @property
    def pending(self) -> int:
        return self._queue.qsize()

    async def run(self, stopping: asyncio.Event) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for i in range(self.workers):
                    group.create_task(self._worker(stopping), name=f"finisher-{i}")
        finally:
            await self.checks.close()

    def _due(self) -> None:
        for unsettled in self.settlement.settled():
            self.submit(unsettled.record, Assessment(unsettled.state, None))
        now = self.clock()
        while self._later and self._later[0].due <= now:
            later = heapq.heappop(self._later)
            self.submit(later.record, later.assessment)

    async def _worker(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            self._due()
            try:
                record, assessment = self._queue.get_nowait()  # an `Ended`
            except asyncio.QueueEmpty:
                await wait_event(stopping, 0.05)
                continue
            if self.runs.get(record.rqi_id) is not record:
                # Handled meanwhile (by the replica that led when it ended, or marked by
                # another replica while its clean-up waited to be tried again).
                if self.runs.get(record.rqi_id) is None:
                    self._reported.pop(record.rqi_id, None)
                    self.settlement.forget(record.rqi_id)
                continue
            try:
                await self.handle(record, assessment)
            except Exception:
                log.exception(
                    "finishing %s failed; it is retried on the next start", record.workload
                )

    async def _reported_before(self, record: RunRecord) -> Delivery[str | None]:
        """What W&B already has of this run's outcome, for a run another process may have
        reported (`RunRecord.adopted`: adopted on start, or tracked while standing by): the
        replica that led before could be killed after W&B accepted its report and before its
        annotation, or its annotation failed. `Sent(what)` when W&B has an outcome (the item
        `FAILED`, or the requeue's item pushed), `Sent(None)` when it has none; `NotSent` when
        the agent stops during an outage (the next start asks again).

        Both are asked whatever this process now reads the run as: an adopted Job whose
        preempted pod is gone reads as a plain failure, and failing the item the previous
        leader requeued would end it twice.
        """
        ref = ItemRef(self.queue_entity, record.queue, record.rqi_id)
        failed = await self.reporter.already_failed(ref)
        match failed:
            case Sent(value=True):
                return Sent("the item is FAILED")
            case Sent() | Declined():
                pass  # a refusal cannot tell: the report must not be lost, W&B judges it
            case NotSent():
                return failed
            case _:
                assert_never(failed)
        spec = recorded_run_spec(record.last)
        if spec is None or not record.run_id:
            return Sent(None)  # nothing to requeue from: nothing else W&B could have
        resumes = resume_count(spec)
        running = self._requeue_in_cluster(record, resumes + 1)
        if running is not None:
            return Sent(f"it was requeued as item {running}, whose workload exists")
        pushed = await self.reporter.requeued_as(
            ref, {"run_id": record.run_id, "_resume_count": resumes + 1}
        )
        match pushed:
            case Sent(value=str(new_id)):
                return Sent(f"it was requeued as item {new_id}")
            case Sent() | Declined():
                return Sent(None)
            case NotSent():
                return pushed
            case _:
                assert_never(pushed)

    def _requeue_in_cluster(self, record: RunRecord, resume: int) -> str | None:
        """The item of another workload of this agent that runs resume `resume` of the run.

        Local (the informers' cache, no request), and asked before W&B: once the requeue's item
        was popped and claimed, its workload proves the push, and it does so however W&B pages
        or filters its listing (`Reporter.requeued_as` reads one page of 100 items).
        """
        for other in self.runs:
            if other.rqi_id == record.rqi_id or other.run_id != record.run_id:
                continue
            spec = recorded_run_spec(other.last)
            if spec is not None and spec.get("_resume_count") == resume:
                return other.rqi_id
        return None

    async def _already_there(self, record: RunRecord, state: RunState) -> bool | None:
        """True when W&B has the outcome of an adopted run already; None: stopping first."""
        if not record.adopted or state is RunState.SUCCEEDED:
            return False
        if state is RunState.STOPPED and record.stop_requested_at is not None:
            return False
        known = await self._reported_before(record)
        match known:
            case Sent(value=str(what)):
                log.info(
                    "run %s (%s) was reported already: %s", record.run_id, record.workload, what
                )
                if state is RunState.FAILED and record.scheduler:
                    # The kill may have fallen between the failure and the sweep's cancel.
                    await self.checks.scheduler_failed(record)
                return True
            case Sent():
                return False
            case NotSent():
                return None
            case Declined():
                return False
            case _:
                assert_never(known)

    async def handle(self, record: RunRecord, assessment: Assessment) -> None:
        state, diagnosis = assessment
        done = self._reported.get(record.rqi_id)
        if done is not None:
            # Reported already; only the clean-up failed (or the item was not settled).
            await self._finish(record, done.state)
            return
        there = await self._already_there(record, state)
        if there is None:
            return  # stopping during a W&B outage: the next start asks again
        if there:
            await self._finish(record, state)
            return
        self.metrics.outcomes.labels(state=state.value).inc()
        # An adopted run was never popped by this process: its failure still counts for its queue.
        self.metrics.activity.remember(record.rqi_id, record.queue)
        sent = await self._report(record, state, diagnosis)
        match sent:
            case NotSent():
                # Stopping during a W&B outage: the workload and its record stay, unmarked, so
                # the next start adopts the run and reports it then.
                return
            case Sent() | Declined():
                pass  # W&B answered; a refusal is final, asking again gets the same answer
            case _:
                assert_never(sent)
        # A failure W&B accepted is final: W&B never offers a FAILED item again.
        failed = state is RunState.FAILED and isinstance(sent, Sent)
        await self._finish(record, state, settled=failed)

    async def _report(
        self, record: RunRecord, state: RunState, diagnosis: Diagnosis | None
    ) -> Delivery[object]:
        """What W&B is told of the run's end, by state (the module docstring's list)."""
        if state is RunState.FAILED:
            diag = diagnosis or Diagnosis(
                Reason.WORKLOAD_FAILED, "the workload failed", Severity.TERMINAL
            )
            message = await self._failure_message(record, diag)
            sent = await self.reporter.fail(
                record.rqi_id, message, stage="run", reason=diag.reason.value
            )
            if isinstance(sent, Sent) and record.scheduler:
                await self.checks.scheduler_failed(record)
            return sent
        if record.stop_requested_at is not None and state is not RunState.PREEMPTED:
            return Sent(None)  # W&B asked for the stop: nothing to report
        if state is RunState.SUCCEEDED:
            self.checks.succeeded(record)
        elif state is RunState.PREEMPTED:
            return await self._requeue(record, diagnosis)
        elif state is RunState.STOPPED:
            return await self._stopped(record, diagnosis)
        return Sent(None)

    async def _stopped(self, record: RunRecord, diagnosis: Diagnosis | None) -> Delivery[object]:
        """A workload deleted before it finished, by someone other than W&B's stop."""
        stopped = await self.checks.stopped_in_wandb(record)
        if stopped is None:
            return NotSent("stopping before W&B said whether the run was stopped")
        if stopped:
            # Stopped from the UI and deleted by the replica (or process) that saw it.
            log.info("run %s was stopped in W&B: nothing to report", record.run_id)
            return Sent(None)
        if record.end_unseen and not record.deleting:
            return await self._unseen_deletion(record, diagnosis)
        diag = diagnosis or Diagnosis(Reason.DELETED, "the workload was deleted", Severity.TERMINAL)
        return await self.reporter.fail(
            record.rqi_id, diag.message, stage="run", reason=diag.reason.value
        )

    async def _unseen_deletion(
        self, record: RunRecord, diagnosis: Diagnosis | None
    ) -> Delivery[object]:
        """A workload found gone by a relist, which this process did not delete: its final
        status is unknown (`RunRecord.end_unseen`), so "deleted before it finished" is a guess.

        The usual cause is the leader's own clean-up: a custom resource is deleted as soon as it
        ended (`_clean_up`), and a standby whose watch was down then never sees its final status
        (found by `launch-agent bench chaos`: succeeded runs failed by the replica that took
        over). Nothing the leader could write on the workload survives its deletion, so the
        evidence left is W&B's: the item (already `FAILED`: `_already_there` asked) and the
        run's own state, which the run's process reports (`finished` on success) and which W&B
        sets to `crashed` when the process vanished. Only a W&B state that says the run failed
        fails the item; any other (`finished`, still `running`, no run) is not reported, since
        failing a run that succeeded is the worse error and W&B shows a vanished run as crashed
        by itself. A deletion seen on a watch carries the final object (client-go's informers
        and kube-apiserver: the object as it was at deletion) and is judged from it instead.
        """
        state = await self.checks.state_in_wandb(record)
        if state is None:
            return NotSent("stopping before W&B said how the run ended")
        if state in WANDB_FAILED_STATES:
            message = diagnosis.message if diagnosis else "the workload was deleted"
            return await self.reporter.fail(
                record.rqi_id,
                f"{message}; W&B says the run {state}",
                stage="run",
                reason=Reason.DELETED.value,
            )
        log.warning(
            "%s was found deleted by a relist (its final status unseen, not deleted by this"
            " process); W&B's run state is %r: nothing reported",
            record.workload,
            state or "unknown",
        )
        return Sent(None)

    async def _finish(self, record: RunRecord, state: RunState, *, settled: bool = False) -> None:
        """Clean up and remove the record once W&B will not offer its item again; if the
        clean-up failed, or the item may be offered again, try it again later."""
        if not settled:
            done = await self.settlement.settle(record)
            if done is None:
                return  # stopping during a W&B outage: the next start adopts and settles it
            if not done:
                self.settlement.wait(record, state)
                await self._hold(record)
                self._later_again(record, state, "settling the item")
                return
        if not await self._clean_up(record, state):
            self._later_again(record, state, "clean-up")
            return
        self.settlement.forget(record.rqi_id)
        self._reported.pop(record.rqi_id, None)
        self.runs.remove(record)
        self.handled += 1

    def _later_again(self, record: RunRecord, state: RunState, what: str) -> None:
        """Handle the run again later (only its clean-up: it was reported), with a growing delay."""
        before = self._reported.get(record.rqi_id)
        tries = before.tries if before is not None else 0
        self._reported[record.rqi_id] = Reported(state, tries + 1)
        delay = backoff_delay(
            self.clean_up_retry_base, self.clean_up_retry_cap, tries, 0.0, jitter=0.0
        )
        log.info("%s of %s is tried again in %.1fs", what, record.workload, delay)
        due = Later(self.clock() + delay, next(self._seq), record, Assessment(state, None))
        heapq.heappush(self._later, due)

    async def _hold(self, record: RunRecord) -> None:
        """Take the TTL off a finished Job or JobSet whose item W&B may still offer again, so
        the workload outlives the wait as its proof (`runtime/ttl_hold.py`). Once per record;
        a hold that fails is tried at the next settle attempt, one RBAC refuses is not."""
        if record.deleted or record.deleting or not self.may_patch:
            return
        if record.held_ttl is not None or ttl_held_on(record.last) is not None:
            return
        try:
            resource = await self.kube.resolve(record.api_version, record.kind)
            if (resource.group, record.kind) not in HELD_KINDS:
                return
            # The tracking cache keeps no TTL (`tracking_view`): read it from the object.
            ttl = ttl_of(await self.kube.get(resource, record.namespace, record.name))
            if ttl is None:
                return  # no TTL: nothing deletes it while the item waits
            await self.kube.patch(resource, record.namespace, record.name, hold_patch(ttl))
        except KubeNotFound:
            return  # gone already (its TTL was shorter than the wait so far)
        except KubeForbidden:
            log.info("no RBAC to patch: %s keeps its TTL while its item waits", record.workload)
            self.may_patch = False
            return
        except KubeError as exc:
            log.warning("taking the TTL off %s failed: %s", record.workload, exc)
            return
        record.held_ttl = ttl
        log.info(
            "TTL of %s (%ds) held until W&B offers item %s again",
            record.workload,
            ttl,
            record.rqi_id,
        )

    async def _failure_message(self, record: RunRecord, diag: Diagnosis) -> str:
        # The reason word first: people search for "OOMKilled", dashboards group by it.
        on = f" on worker cluster {record.worker}" if record.worker else ""
        message = f"{record.workload} failed{on} ({diag.reason.value}): {diag.message}"
        lines = self.tracking.log_tail_lines
        if lines <= 0 or diag.pod is None or diag.reason not in _HAS_LOG:
            return message
        kube: KubeClient | None = self.kube
        if record.worker is not None:
            clusters = self.worker_clusters
            kube = clusters.client(record.worker) if clusters is not None else None
        if kube is None:
            return message  # an unreadable worker has no pods here to name (`Tracker`)
        try:
            tail = await kube.pod_log_tail(record.namespace, diag.pod, diag.container, lines=lines)
        except KubeError as exc:
            log.info("no log tail for %s/%s: %s", record.namespace, diag.pod, exc)
            return message
        tail = tail.rstrip()
        if not tail:
            return message
        where = f"container {diag.container} of pod {diag.pod}" if diag.container else diag.pod
        return f"{message}\n\nlast {len(tail.splitlines())} log lines of {where}:\n{tail}"

    async def _requeue(self, record: RunRecord, diag: Diagnosis | None) -> Delivery[object]:
        reason = diag.message if diag else "the run was preempted"
        spec = recorded_run_spec(record.last)
        if spec is None:
            return await self.reporter.fail(
                record.rqi_id,
                f"{record.workload}: {reason}; it cannot be requeued because its run spec is not"
                " recorded on the workload: resubmit it",
                stage="run",
                reason=Reason.PREEMPTED.value,
            )
        resumes = resume_count(spec)
        if resumes >= self.tracking.max_requeues:
            return await self.reporter.fail(
                record.rqi_id,
                f"{record.workload}: {reason}; it was already requeued {resumes} time(s), the"
                f" limit (tracking.max_requeues) is {self.tracking.max_requeues}",
                stage="run",
                reason=Reason.PREEMPTED.value,
            )
        again = {**spec, "_resume_count": resumes + 1, "run_id": record.run_id}
        again.pop("sweep_id", None)  # as W&B's agent: the sweep does not own the resumed run
        pushed = await self.reporter.requeue(self.queue_entity, record.queue, again, record.rqi_id)
        match pushed:
            case Sent(value=new_id):
                pass
            case Declined() | NotSent():
                return pushed
            case _:
                assert_never(pushed)
        log.info(
            "run %s was preempted (%s); requeued on %r as item %s (resume %d of %d)",
            record.run_id,
            reason,
            record.queue,
            new_id,
            resumes + 1,
            self.tracking.max_requeues,
        )
        return pushed

    async def _clean_up(self, record: RunRecord, state: RunState) -> bool:
        """False when the workload could not be marked or deleted (a restart would report it
        again without the W&B check; this process retries)."""
        if record.deleted:
            return True
        obj = record.last or {}
        try:
            resource = await self.kube.resolve(record.api_version, record.kind)
            finished = workload_status(obj).phase in (Phase.SUCCEEDED, Phase.FAILED)
            if (
                record.kind == "Job"
                and resource.group == "batch"
                and finished
                and not record.scheduler
            ):
                held = record.held_ttl if record.held_ttl is not None else ttl_held_on(obj)
                if state is RunState.SUCCEEDED and held is None:
                    return True  # kept for its TTL; adopting it again reports nothing
                if self.may_patch:
                    # Kept for its TTL (its pods help a person); marked so a restart does not
                    # report it again. A held TTL goes back in the same patch: the item is
                    # settled now.
                    patch: dict[str, Any] = {}
                    if state is not RunState.SUCCEEDED:
                        patch = {"metadata": {"annotations": {REPORTED: state.value}}}
                    if held is not None:
                        patch = merged(patch, release_patch(held))
                    try:
                        await self.kube.patch(resource, record.namespace, record.name, patch)
                        return True
                    except KubeForbidden:
                        # Least-privilege RBAC (the Helm chart's) grants no patch: delete
                        # instead, so a restart cannot report or requeue the run twice.
                        log.info("no RBAC to annotate Jobs: reported Jobs are deleted instead")
                        self.may_patch = False
            await self.kube.delete(resource, record.namespace, record.name)
            record.deleting = True
        except KubeNotFound:
            return True  # gone already: nothing left to mark
        except KubeError as exc:
            log.warning("cleaning up %s failed: %s", record.workload, exc)
            return False
        return True
