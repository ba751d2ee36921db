"""One popped item → one workload, exactly once: validate, render, create, then ack.

Order (docs/agent.md, "Exactly once"): the objects are created *before* the item is acked.
Names are deterministic (queue spec + run-queue-item id) and so is the run id (from the item id
unless the runSpec names one), so every crash window ends well:

- crash before the create: the lease lapses, W&B offers the item again, it is created then;
- crash after the create, before the ack: the restarted agent adopts the workload without
  knowing whether the item was acked. While the workload exists, a second pop of the item finds
  its record (or its create answers 409) and only acks it; when the run ends, the finisher
  acks the item or, its lease lapsed, keeps the workload until W&B offers the item again and
  that offer is acked (runtime/settlement.py), so an item never gets a second workload;
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

import logging
from collections.abc import Sequence
from typing import NamedTuple

from launch_agent.adapters.kube import (
    Created,
    KindNotInstalled,
    KubeApiError,
    KubeClient,
    KubeError,
    KubeForbidden,
    KubeUnauthorized,
)
from launch_agent.adapters.wandb_client import RunQueueItem, WandbClient
from launch_agent.adapters.wandb_errors import WandbError, WandbUnavailable
from launch_agent.model.config import AgentConfig
from launch_agent.model.display import quoted
from launch_agent.model.queue_spec import InvalidInput, Problem, QueueSpec
from launch_agent.model.run_item import RunItem, parse_run_item, shown_item_id
from launch_agent.model.sweeps import (
    is_custom_scheduler,
    is_scheduler_item,
    sweep_state_refusal,
)
from launch_agent.render import kinds
from launch_agent.render.decisions import NO_DECISIONS, NotAdmitted
from launch_agent.render.naming import derived_run_id
from launch_agent.render.pipeline import render
from launch_agent.render.scheduler import scheduler_queue_spec, scheduler_run
from launch_agent.render.settings import RenderResult, RenderSettings
from launch_agent.runtime.admission.schedulers import SchedulerCap
from launch_agent.runtime.admission.stage import AdmissionStage
from launch_agent.runtime.builds import BuildService
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.outcomes import ItemFailed, LeftForLater
from launch_agent.runtime.pace import ProjectPace
from launch_agent.runtime.recorded_spec import record_run_spec
from launch_agent.runtime.reporter import Delivery, Reporter
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.settlement import Settlement
from launch_agent.runtime.specs import SpecStore
from launch_agent.runtime.tracker import Tracker

log = logging.getLogger(__name__)


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


def _standard_scheduler(item: RunQueueItem, scheduler: bool) -> bool:
    """W&B's own `wandb scheduler`, rendered from the built-in spec (render/scheduler.py)."""
    return scheduler and not is_custom_scheduler(item.run_spec)


class Landed(NamedTuple):
    """A workload that exists: its record, the create's answer and the kind it was created as."""

    record: RunRecord
    created: Created
    kind: str


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
        settlement: Settlement,
        builds: BuildService | None = None,
        clock: Clock = monotonic,
        pace: ProjectPace | None = None,
    ) -> None:
        self.config = config
        self.pace = pace
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
        self.settlement = settlement
        self.clock = clock
        # Scheduler items already warned about the cap (W&B offers them again every lease).
        self._capped: set[str] = set()
        # Items whose dispatch has not ended (bounded by the items popped at once).
        self._in_flight: set[str] = set()
        self.namespaces = frozenset(config.namespaces)

    async def _fail(self, item: RunQueueItem, failed: ItemFailed) -> Delivery[None]:
        # Whatever W&B made of it, the item is done here: unacked, W&B offers it again after
        # its lease (NotSent), and a refusal is final.
        return await self.reporter.fail(
            item.id, failed.message, stage=failed.stage, reason=failed.reason
        )

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
            await self.settlement.offered_again(item, existing)
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
                ItemFailed(
                    "the run queue item is nested too deeply to handle (limits.max_item_depth)",
                    stage="agent",
                    reason="malformed",
                ),
            )

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
        """One new item's steps, in order: spec, parse, image, render, create, then report.
        Each step returns what the next needs or raises `ItemFailed` / `LeftForLater`
        (runtime/outcomes.py), which end the item here and nowhere else."""
        popped_at = self.clock() if popped_at is None else popped_at
        try:
            spec = self._spec(item, scheduler)
            run = self._parse(item, scheduler)
            if run.sweep_id and not scheduler:
                await self._sweep_running(run)
            image = await self._image(item, run)
            result = self._render(item, spec, run, image, scheduler)
            await self._paced(run)
            landed = await self._create(
                item, spec, run, result, popped_at=popped_at, scheduler=scheduler
            )
        except ItemFailed as failed:
            await self._fail(item, failed)
            return
        except LeftForLater as later:
            log.log(
                later.level, "item %s left for a later pop: %s", shown_item_id(item.id), later.why
            )
            return
        await self._report(item, run, landed, result, popped_at)

    # --- the steps ---------------------------------------------------------------------------

    def _spec(self, item: RunQueueItem, scheduler: bool) -> QueueSpec:
        """The queue spec the item renders with (the built-in one for the standard sweep
        scheduler), checked against what this agent serves. An item whose runSpec could not be
        read fails first: nothing else about it can be trusted."""
        if item.problem is not None:
            raise ItemFailed(
                f"the run queue item cannot be read: {item.problem}",
                stage="agent",
                reason="malformed",
            )
        standard = _standard_scheduler(item, scheduler)
        spec = (
            scheduler_queue_spec(
                item.queue, self.config.scheduler_namespace, self.config.sweeps.scheduler_image
            )
            if standard
            else self.specs.for_queue(item.queue)
        )
        if spec is None:
            raise ItemFailed(
                f"no queue spec serves queue {item.queue!r}: add one to"
                f" {self.config.queue_specs_dir} (a QueueSpec whose spec.queues lists"
                f" {item.queue!r})",
                stage="agent",
                reason="no_queue_spec",
            )
        if spec.namespace not in self.namespaces:
            raise ItemFailed(
                f"queue spec {spec.name!r} targets namespace {spec.namespace!r}, which this agent"
                f" does not serve (namespaces: {', '.join(sorted(self.namespaces))}): add it to"
                " `namespaces` in the agent configuration",
                stage="agent",
                reason="namespace",
            )
        if scheduler and not standard and not spec.custom_schedulers:
            raise ItemFailed(
                f"this sweep scheduler is a job ({shown(item.run_spec.get('job'))}) that runs the"
                f" submitter's code, and queue spec {spec.name!r} does not allow custom"
                " schedulers: set spec.sweeps.customSchedulers: true in it, or launch the sweep"
                " with the standard scheduler (`wandb launch-sweep` without scheduler.job)",
                stage="agent",
                reason="custom_scheduler",
            )
        return spec

    def _parse(self, item: RunQueueItem, scheduler: bool) -> RunItem:
        try:
            run = parse_run_item(
                {"runQueueItemId": item.id, "runSpec": item.run_spec}, scheduler=scheduler
            )
            if _standard_scheduler(item, scheduler):
                run = scheduler_run(run, self.config.sweeps.scheduler_image)
        except InvalidInput as exc:
            raise ItemFailed(
                f"the run queue item is malformed: {problems_text(exc.problems)}",
                stage="agent",
                reason="malformed",
            ) from None
        return run

    async def _sweep_running(self, run: RunItem) -> None:
        """W&B's `check_sweep_state`: a sweep run starts only in a RUNNING or PAUSED sweep.
        W&B being unavailable is not the item's fault: it is left for a later pop."""
        assert run.sweep_id is not None
        try:
            state = await self.wandb.sweep_state(run.entity, run.project, run.sweep_id)
        except WandbUnavailable as exc:
            raise LeftForLater(f"sweep state unknown: {exc}") from None
        except WandbError as exc:
            log.info("sweep state of %s not read: %s", run.sweep_id, exc)
            state = None  # W&B's agent: any error reading the state refuses the run
        refusal = sweep_state_refusal(run.sweep_id, state)
        if refusal is not None:
            raise ItemFailed(refusal, stage="agent", reason="sweep_not_running")

    async def _image(self, item: RunQueueItem, run: RunItem) -> str | None:
        """The image built for a run that names a job and no image; None: the run names its
        own (or has none, which render refuses)."""
        if run.docker_image is not None or run.job is None:
            return None
        if self.builds is None:
            raise ItemFailed(self._build_message(run), stage="build", reason="build_not_configured")
        # Minutes, in this item's own task: the poller goes on (runtime/builds.py).
        image = await self.builds.image_for(item, run)
        if image is None:
            # The build service failed the item, or left it, and said so.
            raise LeftForLater("no image from the build service", level=logging.DEBUG)
        return image

    def _render(
        self, item: RunQueueItem, spec: QueueSpec, run: RunItem, image: str | None, scheduler: bool
    ) -> RenderResult:
        """The admission stage's decisions, then the one manifest render makes of them.
        Render's own problems are reported before the stage's refusal: they are what the
        submitter can change; the refused run is rendered without decisions only to find them."""
        recorded = record_run_spec(item.run_spec, scheduler=scheduler)
        refusal: NotAdmitted | None = None
        try:
            decisions = self.admission.admit(item.id, item.queue, spec, item.run_spec)
        except NotAdmitted as exc:
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
        except NotAdmitted as exc:
            raise ItemFailed(exc.message, stage="agent", reason=exc.reason) from None
        except InvalidInput as exc:
            raise ItemFailed(
                f"queue spec {spec.name!r} refused this run: {problems_text(exc.problems)}",
                stage="agent",
                reason="render",
            ) from None
        if refusal is not None:
            raise ItemFailed(refusal.message, stage="agent", reason=refusal.reason)
        return result

    async def _create(
        self,
        item: RunQueueItem,
        spec: QueueSpec,
        run: RunItem,
        result: RenderResult,
        *,
        popped_at: float,
        scheduler: bool,
    ) -> Landed:
        """The workload created (or adopted: its create answered 409), with its record in the
        table and its kind watched from before the create."""
        workload = result.workload
        try:
            resource = await self.kube.resolve(str(workload["apiVersion"]), str(workload["kind"]))
        except KindNotInstalled as exc:
            raise ItemFailed(
                not_installed_message(exc), stage="agent", reason="kind_not_installed"
            ) from None
        except KubeError as exc:
            raise LeftForLater(f"Kubernetes discovery failed: {exc}", level=logging.ERROR) from None
        record = self.runs.get(item.id) or self.runs.add(
            RunRecord(
                rqi_id=item.id,
                queue=item.queue,
                entity=run.entity,
                project=run.project,
                run_id=run.run_id or derived_run_id(run.run_queue_item_id),
                namespace=spec.namespace,
                name=str(workload["metadata"]["name"]),
                api_version=resource.api_version,
                kind=resource.kind,
                started=popped_at,
                scheduler=scheduler,
            )
        )
        self.tracker.watch(resource, spec.namespace)
        try:
            created = await self.kube.create(workload, spec.namespace)
        except KubeUnauthorized as exc:
            # The agent's own credential was refused (and could not be renewed), which says
            # nothing about this run: it stays in W&B like any unavailability.
            raise self._not_created(item, record, resource.kind, exc) from None
        except KubeApiError as exc:
            self.runs.remove(record, finished=False)
            raise ItemFailed(
                self._refused_message(record, exc), stage="agent", reason="kube_refused"
            ) from None
        except KubeError as exc:  # KubeUnavailable: retried until the policy gave up
            raise self._not_created(item, record, resource.kind, exc) from None
        return Landed(record, created, resource.kind)

    async def _paced(self, run: RunItem) -> None:
        """The run starts when its W&B project's pace allows (`runtime/pace.py`)."""
        if self.pace is not None and not await self.pace.wait(run.entity, run.project):
            raise LeftForLater("the agent is stopping before the run's turn (its lease lapses)")

    def _not_created(
        self, item: RunQueueItem, record: RunRecord, kind: str, exc: KubeError
    ) -> LeftForLater:
        self.runs.remove(record, finished=False)
        self.metrics.submits.labels(queue=item.queue, kind=kind, outcome="error").inc()
        return LeftForLater(f"not created (its lease lapses): {exc}", level=logging.ERROR)

    async def _report(
        self,
        item: RunQueueItem,
        run: RunItem,
        landed: Landed,
        result: RenderResult,
        popped_at: float,
    ) -> None:
        """The workload exists: count it, ack the item, tell the admission stage, then the
        render's warnings."""
        record, created = landed.record, landed.created
        if record.last is None:
            record.last = created.obj
        outcome = "adopted" if created.adopted else "created"
        self.metrics.submits.labels(queue=item.queue, kind=landed.kind, outcome=outcome).inc()
        self.metrics.queue_latency.observe(self.clock() - popped_at)
        log.info(
            "%s %s for item %s (queue %r, run %s)",
            outcome,
            record.workload,
            item.id,
            item.queue,
            run.run_id or derived_run_id(run.run_queue_item_id),
        )
        await self.settlement.ack(item, record)
        self.admission.created(record)
        for warning in result.warnings:
            self.reporter.warn(item.id, f"{warning}", "agent")

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
