"""One popped item → one workload, exactly once: validate, render, create, then ack.

Order (docs/agent.md, "Exactly once"): the objects are created *before* the item is acked.
Names are deterministic (queue spec + run-queue-item id) and so is the run id (from the item id
unless the runSpec names one), so every crash window ends well:

- crash before the create: the lease lapses, W&B offers the item again, it is created then;
- crash after the create, before the ack: the restarted agent adopts the workload without
  knowing whether the item was acked. While the workload exists, a second pop of the item finds
  its record (or its create answers 409) and only acks it; when the run ends, the finisher
  acks the item or, its lease lapsed, keeps the workload until W&B offers the item again and
  that offer is acked (`Finisher._settle`), so an item never gets a second workload;
- crash after the ack: the restarted agent adopts the workload from its labels.

`ackRunQueueItem` answering `success: false` means our lease lapsed before the ack: the item is
offered again and acked then; the workload stays tracked. `WandbAckUncertain` (an earlier
attempt may have been applied, or not) is handled the same way: the item is not known acked.

Every problem that belongs to the item fails it with `failRunQueueItem` and a message a person
can act on; the agent goes on with the next item. Problems that are not the item's fault (the
Kubernetes API unavailable) leave it un-acked, so W&B offers it again after the lease.

Admission (`runtime/admission/`): the item holds its place from the pop on (`holding`), the
admission stage decides how the run is created (`admit`: suspended, its Kueue LocalQueue, its
quota stamp) or refuses it, render applies those decisions, and the stage hears when the
workload exists (`created`). The manifest render returns is the one created: nothing here edits
it.

Sweeps (docs/sweeps.md): a sweep scheduler item (`model.sweeps.is_scheduler_item`) takes a place
of `max_schedulers` (`admission/schedulers.py`) instead of a `max_jobs` slot, or is left un-acked
with a warning, as W&B's agent does; the standard `wandb scheduler` renders through the built-in
scheduler spec (`render/scheduler.py`), a custom scheduler job through its queue's spec when that
spec allows it. A sweep run (`sweep_id`) starts only while its sweep is RUNNING or PAUSED
(`GetSweepState`, W&B's `check_sweep_state`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from launch_agent.adapters.kube import (
    KindNotInstalled,
    KubeApiError,
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeUnauthorized,
    KubeUnavailable,
)
from launch_agent.adapters.wandb_client import RunQueueItem, WandbClient
from launch_agent.adapters.wandb_errors import WandbAckUncertain, WandbError, WandbUnavailable
from launch_agent.model.config import AgentConfig
from launch_agent.model.display import quoted
from launch_agent.model.queue_spec import InvalidInput, Problem
from launch_agent.model.run_item import RunItem, parse_run_item, shown_item_id
from launch_agent.model.sweeps import (
    SCHEDULER_MARK,
    is_custom_scheduler,
    is_scheduler_item,
    sweep_state_refusal,
)
from launch_agent.render import kinds
from launch_agent.render.decisions import NO_DECISIONS, Refused
from launch_agent.render.naming import derived_run_id
from launch_agent.render.pipeline import render
from launch_agent.render.scheduler import scheduler_queue_spec, scheduler_run
from launch_agent.render.settings import RenderSettings
from launch_agent.runtime.admission.schedulers import SchedulerCap
from launch_agent.runtime.admission.stage import AdmissionStage
from launch_agent.runtime.builds import BuildService
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.reporter import Delivery, Reporter
from launch_agent.runtime.runs import RUN_SPEC, RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore
from launch_agent.runtime.tracker import Tracker

log = logging.getLogger(__name__)

# Larger run specs are not recorded on the workload (annotations share a 256 KiB budget);
# such a run is failed instead of requeued if it is preempted.
MAX_RUN_SPEC_ANNOTATION = 64 * 1024


def not_installed_message(exc: KindNotInstalled) -> str:
    """The admin's next step: the kinds table knows what to install for each known kind."""
    info = kinds.lookup(exc.api_version, exc.kind)
    if info is not None:
        return info.not_installed()
    group = exc.api_version.rpartition("/")[0]
    return f"{exc}: install the operator that serves the {group} API group"


def shown(value: object, limit: int = 80) -> str:
    """A submitter's value quoted in a failure message: its repr, at most `limit` characters
    of it (a 900 KB job name is not echoed back to W&B); `model.display.quoted`."""
    return quoted(value, limit)


def problems_text(problems: Sequence[Problem]) -> str:
    return "; ".join(str(p) for p in problems)


class Dispatcher:
    def __init__(
        self,
        config: AgentConfig,
        *,
        wandb: WandbClient,
        kube: KubeClient,
        specs: SpecStore,
        runs: RunTable,
        reporter: Reporter,
        tracker: Tracker,
        metrics: Metrics,
        settings: RenderSettings,
        admission: AdmissionStage,
        schedulers: SchedulerCap,
        builds: BuildService | None = None,
        clock: Clock = monotonic,
    ) -> None:
        self.config = config
        self.builds = builds
        self.wandb = wandb
        self.kube = kube
        self.specs = specs
        self.runs = runs
        self.reporter = reporter
        self.tracker = tracker
        self.metrics = metrics
        self.settings = settings
        self.admission = admission
        self.schedulers = schedulers
        self.clock = clock
        # Scheduler items already warned about the cap (W&B offers them again every lease).
        self._capped: set[str] = set()
        # Items whose dispatch has not ended (bounded by the items popped at once).
        self._in_flight: set[str] = set()
        self.namespaces = frozenset(config.namespaces)

    async def _fail(
        self, item: RunQueueItem, message: str, reason: str, stage: str = "agent"
    ) -> Delivery[None]:
        # Whatever W&B made of it, the item is done here: unacked, W&B offers it again after
        # its lease (NotSent), and a refusal is final.
        return await self.reporter.fail(item.id, message, stage, reason)

    async def dispatch(self, item: RunQueueItem, popped_at: float | None = None) -> None:
        """Handle one popped item to the end of its ack (or its failure)."""
        if item.id in self._in_flight:
            # Its lease lapsed during the dispatch (a long build or create) and W&B offered it
            # again: the dispatch in flight creates and acks it. Two at once would stamp it
            # twice for the quota's ordering and answer each other's ack with success: false.
            log.info(
                "item %s offered again while its dispatch is in flight: left to it",
                shown_item_id(item.id),
            )
            return
        existing = self.runs.get(item.id)
        if existing is not None:
            await self._offered_again(item, existing)
            return
        self._in_flight.add(item.id)
        try:
            await self._dispatch_new(item, popped_at)
        finally:
            self._in_flight.discard(item.id)

    async def _dispatch_new(self, item: RunQueueItem, popped_at: float | None) -> None:
        try:
            if item.problem is None and is_scheduler_item(item.run_spec):
                with self.schedulers.place(item.id) as placed:
                    if not placed:
                        self._over_cap(item)
                        return
                    with self.admission.holding(item.queue, item.id):
                        await self._dispatch(item, popped_at, scheduler=True)
                return
            with self.admission.holding(item.queue, item.id):  # its place from the pop on
                await self._dispatch(item, popped_at)
        except RecursionError:
            # The item limits keep runSpecs far from Python's recursion limit; should a walk
            # still recurse too deep, the item is at fault: fail it rather than let W&B offer
            # it again after its lease, forever.
            await self._fail(
                item,
                "the run queue item is nested too deeply to handle (limits.max_item_depth)",
                "malformed",
            )

    async def _offered_again(self, item: RunQueueItem, record: RunRecord) -> None:
        """W&B offers an item this process has a workload for (created or adopted): its ack
        was lost and its lease lapsed. The run is never rendered or created again, whatever
        became of its workload (a custom resource that ended is deleted, and then a create
        would succeed): the offer is acked. A run already over waits for this ack before its
        clean-up (`Finisher._settle`). A record without a workload yet is a dispatch of the
        same item still in flight: that dispatch acks."""
        if record.last is None:
            return  # a record whose create has not answered is a dispatch's: it acks
        log.warning(
            "item %s offered again by W&B (its ack was lost, its lease lapsed): %s exists"
            " already; acking it, not creating it again",
            item.id,
            record.workload,
        )
        # Counted as a create answering 409 is: the pop found its workload.
        self.metrics.submits.labels(queue=item.queue, kind=record.kind, outcome="adopted").inc()
        await self._ack(item, record)

    def _over_cap(self, item: RunQueueItem) -> None:
        """W&B's agent: warn, do not ack; the lease lapses and W&B offers the item again."""
        message = self.schedulers.over_cap_message()
        key = shown_item_id(item.id)  # kept clipped: 10,000 ids of W&B's choosing
        log.warning("scheduler item %s not started: %s", key, message)
        if key not in self._capped:
            if len(self._capped) >= 10_000:
                self._capped.clear()
            self._capped.add(key)
            self.reporter.warn(item.id, message, "agent")

    async def _dispatch(
        self, item: RunQueueItem, popped_at: float | None, *, scheduler: bool = False
    ) -> None:
        popped_at = self.clock() if popped_at is None else popped_at
        if item.problem is not None:
            await self._fail(
                item, f"the run queue item cannot be read: {item.problem}", "malformed"
            )
            return
        standard = scheduler and not is_custom_scheduler(item.run_spec)
        spec = (
            scheduler_queue_spec(
                item.queue, self.config.scheduler_namespace, self.config.sweeps.scheduler_image
            )
            if standard
            else self.specs.for_queue(item.queue)
        )
        if spec is None:
            await self._fail(
                item,
                f"no queue spec serves queue {item.queue!r}: add one to"
                f" {self.config.queue_specs_dir} (a QueueSpec whose spec.queues lists"
                f" {item.queue!r})",
                "no_queue_spec",
            )
            return
        if spec.namespace not in self.namespaces:
            await self._fail(
                item,
                f"queue spec {spec.name!r} targets namespace {spec.namespace!r}, which this agent"
                f" does not serve (namespaces: {', '.join(sorted(self.namespaces))}): add it to"
                " `namespaces` in the agent configuration",
                "namespace",
            )
            return
        if scheduler and not standard and not spec.custom_schedulers:
            await self._fail(
                item,
                f"this sweep scheduler is a job ({shown(item.run_spec.get('job'))}) that runs the"
                f" submitter's code, and queue spec {spec.name!r} does not allow custom"
                " schedulers: set spec.sweeps.customSchedulers: true in it, or launch the sweep"
                " with the standard scheduler (`wandb launch-sweep` without scheduler.job)",
                "custom_scheduler",
            )
            return
        try:
            run = parse_run_item(
                {"runQueueItemId": item.id, "runSpec": item.run_spec}, scheduler=scheduler
            )
            if standard:
                run = scheduler_run(run, self.config.sweeps.scheduler_image)
        except InvalidInput as exc:
            await self._fail(
                item, f"the run queue item is malformed: {problems_text(exc.problems)}", "malformed"
            )
            return
        if run.sweep_id and not scheduler and not await self._sweep_runnable(item, run):
            return
        image: str | None = None
        if run.docker_image is None and run.job is not None:
            if self.builds is None:
                await self._fail(item, self._build_message(run), "build_not_configured", "build")
                return
            # Minutes, in this item's own task: the poller goes on (runtime/builds.py).
            image = await self.builds.image_for(item, run)
            if image is None:
                return
        run_id = run.run_id or derived_run_id(run.run_queue_item_id)
        text = json.dumps(
            {k: v for k, v in item.run_spec.items() if k != "_wandb_api_key"},
            separators=(",", ":"),
            default=str,
        )
        recorded = {RUN_SPEC: text} if len(text) <= MAX_RUN_SPEC_ANNOTATION else {}
        if scheduler:
            recorded[SCHEDULER_MARK] = "true"
        refusal: Refused | None = None
        try:
            decisions = self.admission.admit(item.id, item.queue, spec, item.run_spec)
        except Refused as exc:
            # Reported after render's own problems, which come first (what the submitter can
            # change); the refused run is rendered without decisions only to find those.
            decisions, refusal = NO_DECISIONS, exc
        try:
            result = render(
                spec,
                run,
                image,
                self.settings,
                queue_name=item.queue,
                decisions=decisions.annotated(recorded),
            )
        except Refused as exc:
            await self._fail(item, exc.message, exc.reason)
            return
        except InvalidInput as exc:
            await self._fail(
                item,
                f"queue spec {spec.name!r} refused this run: {problems_text(exc.problems)}",
                "render",
            )
            return
        if refusal is not None:
            await self._fail(item, refusal.message, refusal.reason)
            return
        workload = result.workload
        meta = workload["metadata"]

        try:
            resource = await self.kube.resolve(str(workload["apiVersion"]), str(workload["kind"]))
        except KindNotInstalled as exc:
            await self._fail(item, not_installed_message(exc), "kind_not_installed")
            return
        except KubeError as exc:
            log.error(
                "item %s left for a later pop: Kubernetes discovery failed: %s",
                shown_item_id(item.id),
                exc,
            )
            return
        record = self.runs.get(item.id)
        if record is None:
            record = self.runs.add(
                RunRecord(
                    rqi_id=item.id,
                    queue=item.queue,
                    entity=run.entity,
                    project=run.project,
                    run_id=run_id,
                    namespace=spec.namespace,
                    name=str(meta["name"]),
                    api_version=resource.api_version,
                    kind=resource.kind,
                    started=popped_at,
                    scheduler=scheduler,
                )
            )
        self.tracker.watch(resource, spec.namespace)
        try:
            created = await self.kube.create(workload, spec.namespace)
        except (KubeUnavailable, KubeError) as exc:
            # 401: the agent's own credential was refused (and could not be renewed), which
            # says nothing about this run: it stays in W&B like any unavailability.
            refused = not isinstance(exc, KubeUnavailable | KubeUnauthorized)
            if isinstance(exc, KubeApiError) and refused:
                self.runs.remove(record, finished=False)
                await self._fail(item, self._refused_message(record, exc), "kube_refused")
                return
            self.runs.remove(record, finished=False)
            self.metrics.submits.labels(queue=item.queue, kind=resource.kind, outcome="error").inc()
            log.error(
                "item %s not created, left for a later pop (its lease lapses): %s",
                shown_item_id(item.id),
                exc,
            )
            return
        if record.last is None:
            record.last = created.obj
        outcome = "adopted" if created.adopted else "created"
        self.metrics.submits.labels(queue=item.queue, kind=resource.kind, outcome=outcome).inc()
        self.metrics.queue_latency.observe(self.clock() - popped_at)
        log.info(
            "%s %s for item %s (queue %r, run %s)",
            outcome,
            record.workload,
            item.id,
            item.queue,
            run_id,
        )
        await self._ack(item, record)
        self.admission.created(record)
        for warning in result.warnings:
            self.reporter.warn(item.id, f"{warning}", "agent")

    async def _sweep_runnable(self, item: RunQueueItem, run: RunItem) -> bool:
        """W&B's `check_sweep_state`: a sweep run starts only in a RUNNING or PAUSED sweep.
        W&B being unavailable is not the item's fault: it is left for a later pop."""
        assert run.sweep_id is not None
        try:
            state = await self.wandb.sweep_state(run.entity, run.project, run.sweep_id)
        except WandbUnavailable as exc:
            log.warning(
                "item %s left for a later pop: sweep state unknown: %s", shown_item_id(item.id), exc
            )
            return False
        except WandbError as exc:
            log.info("sweep state of %s not read: %s", run.sweep_id, exc)
            state = None  # W&B's agent: any error reading the state refuses the run
        refusal = sweep_state_refusal(run.sweep_id, state)
        if refusal is None:
            return True
        await self._fail(item, refusal, "sweep_not_running")
        return False

    async def _ack(self, item: RunQueueItem, record: RunRecord) -> None:
        try:
            won = await self.wandb.ack(item.id, record.run_id)
        except WandbAckUncertain as exc:
            # It may have landed or not (the chaos bench saw such items offered again): the
            # workload stays tracked, the item not known acked; the offer is acked if it comes,
            # and W&B's item state is read before the run's clean-up (`Finisher._settle`).
            log.warning("%s; the item is settled when offered again or when the run ends", exc)
            return
        except WandbUnavailable as exc:
            log.warning(
                "ack of item %s not sent (%s): W&B offers it again after its lease and the"
                " existing workload is adopted then",
                item.id,
                exc,
            )
            return
        except WandbError as exc:
            log.error("W&B refused the ack of item %s: %s", shown_item_id(item.id), exc)
            return
        if not won:
            if record.acked:
                return  # claimed meanwhile by this process (the finisher settling the run)
            # Our lease lapsed: W&B offers the item again (or another agent claimed it). The
            # workload's name is the item's, so any claim of the item is of this workload: it
            # stays tracked (dropping it left an unreported run and its quota held), and the
            # item is acked when offered again or settled when the run ends (`Finisher._settle`).
            log.warning(
                "ack of item %s answered success: false (our lease lapsed): %s stays tracked",
                item.id,
                record.workload,
            )
            return
        record.acked = True

    def _build_message(self, run: RunItem) -> str:
        builder = self.config.builder.type if self.config.builder else None
        what = f"job {shown(run.job)} has no image"
        if builder in (None, "noop"):
            return (
                f"this run needs an image build ({what}), but no builder is configured"
                " (builder.type: kaniko in launch-config.yaml); submit it with a docker image"
                " (docker.docker_image) or configure a builder"
            )
        return (
            f"this run needs an image build ({what}); builder.type {builder!r} is configured but"
            " this agent builds only with builder.type: kaniko: submit it with a docker image"
            " (docker.docker_image) or configure a Kaniko builder"
        )

    def _refused_message(self, record: RunRecord, exc: KubeApiError) -> str:
        what = f"Kubernetes refused to create {record.workload}"
        if isinstance(exc, KubeForbidden):
            return (
                f"{what}: {exc.message} (the agent's service account may not create"
                f" {record.kind} in namespace {record.namespace}: check its RBAC)"
            )
        # kube-apiserver's Invalid message already lists its causes (`NewInvalid` joins them);
        # repeat only those it does not, so W&B does not show the same sentence twice.
        rendered = (f"{f}: {m}" if f else m for f, m in exc.causes)
        causes = "; ".join(c for c in rendered if c not in exc.message)
        return f"{what}: {exc.reason}: {exc.message}" + (f" ({causes})" if causes else "")
