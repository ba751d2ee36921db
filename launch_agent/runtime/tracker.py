"""Informer events → the pure tracking layer → what to report; never a poll per run.

One informer per (kind, namespace) in use plus one for pods per target namespace, all
selecting `launch-agent.io/agent=<agent name>`, feed `on_event`. The handler does no I/O of its
own: it updates the run's record, asks `tracking.assess` for the state, queues new warnings
(deduplicated per run) with the reporter and hands terminal runs to the finisher. So a slow or
unavailable W&B never stalls a watch, and events of one informer stay in order.

Adoption is the same path: a workload event for an item the table does not know (the first
list after a restart) creates its record from the workload's labels and annotations. Objects
already reported (`launch-agent.io/reported`) and items that finished moments ago are ignored,
so a late event can never report a run twice. An adopted run without the mark may still have
been reported (a kill between W&B's accept and the mark): its record says `adopted`, and the
finisher asks W&B before reporting it (`Finisher._reported_before`).

Time-driven transitions need no event: a pod that stays unschedulable passes its deadline
without anything changing in the cluster. `run_periodic` re-assesses the runs that are still
starting from the informers' caches (local data, no request) every few seconds, and publishes
the informers' health to `/readyz` and their reconnects to the metrics.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from launch_agent.adapters.kube import (
    Informer,
    InformerEvent,
    InformerSet,
    InformerSettings,
    KindNotInstalled,
    KubeClient,
    KubeError,
    Resource,
)
from launch_agent.adapters.kube.cache import tracking_view
from launch_agent.aio import wait_event
from launch_agent.model import labels as L
from launch_agent.model.queue_spec import QueueSpec
from launch_agent.model.run_state import Diagnosis, Reason, RunState, Severity
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.events import EVENT, WARNINGS, EventBook, event_view, file_event
from launch_agent.runtime.health import Readiness
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.reporter import Reporter
from launch_agent.runtime.runs import RunRecord, RunTable, item_of, reported
from launch_agent.runtime.workers import Workers, unreadable_message
from launch_agent.tracking import (
    Assessment,
    TrackingPolicy,
    assess,
    assess_deleted,
    main_container_of,
    new_warnings,
    pod_warnings,
    steady_until,
)
from launch_agent.tracking.views import Meta

log = logging.getLogger(__name__)

POD = Resource("", "v1", "Pod", "pods")
# Events or runs handled between two yields to the event loop.
YIELD_EVERY = 100
# Seconds a failed workload waits for its pods to say why (see `Tracker._unexplained`).
EXPLAIN_GRACE = 3.0
_EXPLAINABLE = frozenset(
    {Reason.BACKOFF_LIMIT_EXCEEDED, Reason.POD_FAILURE_POLICY, Reason.WORKLOAD_FAILED}
)
# (cluster, namespace, name): "" is the agent's own cluster, else a MultiKueue worker's name.
PodKey = tuple[str, str, str]
HERE = ""
Finish = Callable[[RunRecord, Assessment], None]


class Tracker:
    def __init__(
        self,
        kube: KubeClient,
        runs: RunTable,
        reporter: Reporter,
        metrics: Metrics,
        readiness: Readiness,
        *,
        agent_name: str,
        policy: TrackingPolicy,
        now: Callable[[], datetime],
        finish: Finish,
        observe: Callable[[RunRecord], None] | None = None,
        kueue_workload: Callable[[RunRecord], Mapping[str, Any] | None] | None = None,
        informer_settings: InformerSettings | None = None,
        clock: Clock = monotonic,
        worker_clusters: Workers | None = None,
        adopting: bool = False,
    ) -> None:
        # `adopting`: until the first `recheck(everything=True)` events only file runs and
        # pods, and it assesses each run once (not at its workload's and pods' lists too).
        self.adopting = adopting
        self.kube = kube
        self.runs = runs
        self.reporter = reporter
        self.metrics = metrics
        self.readiness = readiness
        self.policy = policy
        self.now = now
        self.finish = finish
        # quota.mode kueue: the run's Kueue Workload, for the judgement (deactivation).
        self.kueue_workload = kueue_workload
        # Cache states, not manifests: what tracking, adoption and reports read (10,000 runs).
        # A copy: the caller's settings are shared with Kueue's informers.
        given = informer_settings or InformerSettings()
        settings = dataclasses.replace(
            given,
            label_selector=f"{L.AGENT}={agent_name}",
            transform=functools.partial(tracking_view, suspend_paths=given.suspend_paths),
        )
        self.informers = InformerSet(kube, self.on_event, settings)
        # Events carry no labels: one watch of Warning Events per namespace, filed per run on
        # arrival (`runtime/events.py`); entered by the agent next to `informers`.
        self.event_informers = InformerSet(
            kube,
            self.on_kube_event,
            dataclasses.replace(
                settings, label_selector=None, field_selector=WARNINGS, transform=event_view
            ),
        )
        self.events = EventBook()
        # MultiKueue workers (`runtime/workers.py`): the same pod and Event watches on each
        # worker the agent can read, so a run's pods are read where it runs (`RunRecord.worker`).
        self.workers = worker_clusters
        self.worker_informers: dict[str, InformerSet] = {}
        clients = worker_clusters.clients if worker_clusters is not None else {}
        for name, client in clients.items():
            self.worker_informers[name] = InformerSet(
                client, functools.partial(self._on_worker_pod, name), settings
            )
            self.worker_informers[f"{name} events"] = InformerSet(
                client,
                self.on_kube_event,
                dataclasses.replace(
                    settings, label_selector=None, field_selector=WARNINGS, transform=event_view
                ),
            )
        self._worker_pods: dict[tuple[str, str], Informer] = {}
        # (namespace, workload name) -> run-queue-item id, for filing Events.
        self._by_workload: dict[tuple[str, str], str] = {}
        self._workloads: dict[tuple[str, str, str], Informer] = {}
        self._pods: dict[str, Informer] = {}
        # label-safe item id → the keys of its pods; entries go when their pods are deleted.
        self._pods_by_run: dict[str, set[PodKey]] = {}
        self._restarts: dict[str, tuple[int, int]] = {}
        self._events = 0
        # Told about every assessed run (quota.mode agent keeps its engine in step).
        self.observe = observe
        self.clock = clock

    # --- informers -------------------------------------------------------------------------

    def watch_pods(self, namespace: str) -> None:
        if namespace not in self._pods:
            self._pods[namespace] = self.informers.add(POD, namespace)
            self.event_informers.add(EVENT, namespace)
            for name in self.workers.clients if self.workers is not None else ():
                pods = self.worker_informers[name].add(POD, namespace)
                self._worker_pods[(name, namespace)] = pods
                self.worker_informers[f"{name} events"].add(EVENT, namespace)

    def watch(self, resource: Resource, namespace: str) -> Informer:
        """The informer of a workload kind in a namespace (started on first use)."""
        key = (resource.api_version, resource.kind, namespace)
        informer = self._workloads.get(key)
        if informer is None:
            informer = self.informers.add(resource, namespace)
            self._workloads[key] = informer
            self.watch_pods(namespace)
        return informer

    async def watch_specs(self, specs: Iterable[QueueSpec], namespaces: Iterable[str]) -> None:
        """Watch every kind the specs run, in their namespaces, and pods everywhere."""
        served = set(namespaces)
        for namespace in sorted(served):
            self.watch_pods(namespace)
        for spec in specs:
            if spec.namespace not in served:
                continue
            try:
                resource = await self.kube.resolve(spec.api_version, spec.kind)
            except KindNotInstalled as exc:
                log.warning("queue spec %s: %s; its items will fail until it is", spec.name, exc)
                continue
            except KubeError as exc:
                log.warning("queue spec %s: cannot resolve its kind yet: %s", spec.name, exc)
                continue
            self.watch(resource, spec.namespace)

    async def wait_synced(self, seconds: float) -> bool:
        """Until every informer listed once (adoption is complete); False on timeout."""
        try:
            async with asyncio.timeout(seconds):
                await self.informers.wait_synced()
        except TimeoutError:
            return False
        return True

    # --- events ----------------------------------------------------------------------------

    async def on_event(self, event: InformerEvent) -> None:
        if event.resource == POD:
            self._on_pod(event)
        else:
            self._on_workload(event)
        self._events += 1
        if self._events % YIELD_EVERY == 0:
            # A (re)list delivers thousands of events without awaiting anything: let the
            # other watches, the poller and the health probes run in between.
            await asyncio.sleep(0)

    async def on_kube_event(self, event: InformerEvent) -> None:
        """A Warning Event: filed under its run, which is assessed again."""
        if event.type == "DELETED":
            # Expired (the API server's --event-ttl); what it said still explains the run.
            return
        run = file_event(self.events, dict(event.obj), self._run_of)
        record = None if run is None else self.runs.get(run)
        if record is not None:
            self.evaluate(record)

    def _run_of(self, namespace: str, name: str) -> str | None:
        return self._by_workload.get((namespace, name))

    async def _on_worker_pod(self, worker: str, event: InformerEvent) -> None:
        """A pod on a MultiKueue worker: the same labels as here (MultiKueue copies the
        workload with its pod templates), filed under the worker."""
        self._on_pod(event, worker)

    def _on_pod(self, event: InformerEvent, cluster: str = HERE) -> None:
        meta = Meta(event.obj)
        label = meta.labels.get(L.RUN_QUEUE_ITEM)
        if not isinstance(label, str):
            return
        key = (cluster, meta.namespace, meta.name)
        if event.type == "DELETED":
            keys = self._pods_by_run.get(label)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._pods_by_run[label]
        else:
            self._pods_by_run.setdefault(label, set()).add(key)
        record = self.runs.by_label(label)
        if record is not None:
            if event.type == "DELETED" and cluster == (record.worker or HERE):
                record.pod_gone(event.obj)
            self.evaluate(record)

    def _on_workload(self, event: InformerEvent) -> None:
        obj = event.obj
        rqi = item_of(obj)
        if rqi is None:
            return
        record = self.runs.get(rqi)
        if record is None:
            if event.type == "DELETED" or reported(obj) or self.runs.finished_recently(rqi):
                return
            record = RunRecord.from_object(obj)
            if record is None:
                return
            self.runs.add(record)
            log.info("adopted %s (item %s, run %s)", record.workload, record.rqi_id, record.run_id)
        elif reported(obj):
            # Reported by whichever replica led then: a standby's queued finish is void.
            if record.finishing:
                self.runs.remove(record)
            return
        record.last = obj
        if event.type == "DELETED":
            record.deleted = True
            # A watch's DELETED carries the object as it was at deletion (its final status);
            # a relist's carries only what this cache last saw (see `Finisher.handle`).
            record.end_unseen = event.from_list
        self.evaluate(record)

    def pods_of(self, record: RunRecord) -> list[Mapping[str, Any]]:
        """The run's pods where it runs: here, or on its MultiKueue worker (only there: pods a
        lost worker still shows are not this placement's)."""
        cluster = record.worker or HERE
        informer = (
            self._pods.get(record.namespace)
            if cluster == HERE
            else self._worker_pods.get((cluster, record.namespace))
        )
        keys = sorted(k for k in self._pods_by_run.get(record.label) or () if k[0] == cluster)
        live = [] if informer is None else [informer.get(ns, n) for _, ns, n in keys]
        pods: list[Mapping[str, Any]] = [p for p in live if p is not None]
        names = {Meta(p).name for p in pods}
        pods += [p for name, p in record.gone_pods.items() if name not in names]
        return pods

    def pods_synced(self, namespace: str) -> bool:
        informer = self._pods.get(namespace)
        return informer is not None and informer.synced.is_set()

    def _workload_of(self, record: RunRecord) -> Any:
        informer = self._workloads.get((record.api_version, record.kind, record.namespace))
        cached = None if informer is None else informer.get(record.namespace, record.name)
        return cached if cached is not None else record.last

    def evaluate(self, record: RunRecord) -> None:
        """Assess one run from the caches and act on what changed."""
        record.steady_until = None
        if not record.finishing:
            self._by_workload[(record.namespace, record.name)] = record.rqi_id
        if record.finishing or self.adopting or not self.pods_synced(record.namespace):
            # Without the pods a failure cannot be explained; the first list of the pods
            # informer is awaited (`recheck` comes back to this run).
            return
        workload = record.last if record.deleted else self._workload_of(record)
        if workload is None:
            return
        record.last = workload
        pods = self.pods_of(record)
        record.live_pods = sum(
            1
            for p in pods
            if Meta(p).name not in record.gone_pods
            and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        )
        now = self.now()
        kueue: Mapping[str, Any] | None = None
        if record.deleted:
            assessment = assess_deleted(workload, pods, now, self.policy)
        else:
            events = self.events.of(record.rqi_id)
            kueue = self.kueue_workload(record) if self.kueue_workload is not None else None
            record.steady_until = steady_until(workload, pods, self.policy, kueue_workload=kueue)
            assessment = assess(
                workload,
                pods,
                now,
                self.policy,
                events=events,
                kueue_workload=kueue,
                main=main_container_of(workload),
            )
        state, diagnosis = assessment
        if state is not record.state:
            log.info(
                "run %s (%s): %s -> %s%s",
                record.run_id,
                record.workload,
                record.state.value if record.state else "new",
                state.value,
                f" ({diagnosis.message})" if diagnosis else "",
            )
            record.state = state
        # A pod being deleted ends with 143 (SIGTERM) or 137 (SIGKILL after its grace period)
        # because it is deleted: by its controller when Kueue or the agent's quota suspends
        # the workload, on completion, or by the agent. That is no warning about the run; a
        # suspended workload's pods are leftovers altogether. (Evictions and other
        # disruptions are judged by `assess`, not warned about.)
        live = [] if state is RunState.QUEUED else [p for p in pods if not _deleting(p)]
        candidates = list(pod_warnings(live, now, self.policy))
        deleting = {Meta(p).name for p in pods if _deleting(p)}
        # Kueue's own decisions on a queued run (pending, inadmissible) are the Kueue watch's to
        # report (runtime/kueue_watch.py, once per change and across restarts); the tracker
        # reads the Workload for what ends a run (deactivation).
        kueue_says = state is RunState.QUEUED and kueue is not None
        if (
            diagnosis is not None
            and not diagnosis.terminal
            and diagnosis.pod not in deleting
            and not kueue_says
        ):
            candidates.append(diagnosis)
        record.timed = any(d.reason is Reason.UNSCHEDULABLE for d in candidates)
        fresh, record.warned = new_warnings(candidates, record.warned)
        for warning in fresh:
            self.reporter.warn(record.rqi_id, warning.message, "run")
        if self.observe is not None:
            self.observe(record)
        if state.terminal and self._unexplained(record, assessment):
            return
        if state.terminal:
            self.runs.mark_finishing(record)
            self._forget(record)
            self.finish(record, self._from_worker(record, assessment))

    def worker_unreadable(self, record: RunRecord) -> str | None:
        """Why the agent cannot read the pods of a run on its MultiKueue worker (None: it can,
        or the run is not on a worker)."""
        worker = record.worker
        if worker is None:
            return None
        why = (
            self.workers.why_not(worker)
            if self.workers is not None
            else "it is not listed under multikueue.workers"
        )
        if why is None:
            informer = self._worker_pods.get((worker, record.namespace))
            if informer is not None and not informer.synced.is_set() and informer.stats.errors:
                why = f"reading its pods failed: {informer.stats.last_error}"
        return None if why is None else unreadable_message(worker, record.namespace, why)

    def _from_worker(self, record: RunRecord, assessment: Assessment) -> Assessment:
        """A failure on a worker the agent cannot read says so: the mirrored status on the
        manager gives the workload's verdict, not the pods' reasons."""
        state, diagnosis = assessment
        if state is not RunState.FAILED or (diagnosis is not None and diagnosis.pod):
            return assessment
        why = self.worker_unreadable(record)
        if why is None:
            return assessment
        diag = diagnosis or Diagnosis(
            Reason.WORKLOAD_FAILED, "the workload failed", Severity.TERMINAL
        )
        return Assessment(state, dataclasses.replace(diag, message=f"{diag.message}; {why}"))

    def _forget(self, record: RunRecord) -> None:
        self.events.forget(record.rqi_id)
        if self._by_workload.get((record.namespace, record.name)) == record.rqi_id:
            del self._by_workload[(record.namespace, record.name)]

    def _unexplained(self, record: RunRecord, assessment: Assessment) -> bool:
        """True while a workload failure still waits for its pods to explain it.

        The workload and its pods come from different watches, so the Job's "failed" can arrive
        before the pod event that says "OOMKilled" (or before a relist after a dropped pod
        watch). Reporting the bare "BackoffLimitExceeded" then would lose the reason; the run
        waits up to `EXPLAIN_GRACE` seconds for the pods, then is reported as it is.
        """
        state, diagnosis = assessment
        if state is not RunState.FAILED or diagnosis is None or diagnosis.pod is not None:
            return False
        if diagnosis.reason not in _EXPLAINABLE:
            return False
        now = self.clock()
        if record.explain_until is None:
            record.explain_until = now + EXPLAIN_GRACE
        return now < record.explain_until

    # --- housekeeping ----------------------------------------------------------------------

    async def recheck(self, everything: bool = False) -> None:
        """Re-assess runs whose state can change with time alone (unschedulable deadlines),
        and runs not assessed yet (their pods were not listed yet). A run whose assessment
        cannot change with time alone until `steady_until` is skipped until then: every change
        of what it reads (workload, pods, Events, Kueue's Workload) assesses it at once, so
        only the clock is left to recheck (10,000 starting runs without pods cost 10,000
        assessments a second otherwise)."""
        now = self.now()
        if everything:
            self.adopting = False
        for i, record in enumerate(self.runs):
            # A starting run fails at its start deadline with nothing changing in the cluster.
            waiting = (
                record.explain_until is not None
                or record.timed
                or record.state is RunState.STARTING
            )
            steady = (
                record.explain_until is None
                and record.steady_until is not None
                and now < record.steady_until
            )
            if everything or record.state is None or (waiting and not steady):
                self.evaluate(record)
            if i % YIELD_EVERY == YIELD_EVERY - 1:
                await asyncio.sleep(0)
        # Runs removed without passing through `evaluate` as terminal (a requeue, a dispatch
        # given up) leave their Events behind: drop them.
        for run in self.events.runs():
            if self.runs.get(run) is None:
                self.events.forget(run)
        stale = [key for key, run in self._by_workload.items() if self.runs.get(run) is None]
        for key in stale:
            del self._by_workload[key]

    def publish(self) -> None:
        every = {**self.informers.informers, **self.event_informers.informers}
        for (resource, namespace), informer in every.items():
            key = f"{resource.kind}.{resource.api_version} {namespace or '*'}"
            starting = not informer.synced.is_set() and informer.stats.errors == 0
            self.readiness.watch(key, informer.healthy or starting)
            before = self._restarts.get(key, (0, 0))
            now = (informer.stats.errors, informer.stats.relists_after_gone)
            labels = {"kind": resource.kind, "namespace": namespace or "*"}
            if now[0] > before[0]:
                self.metrics.watch_restarts.labels(**labels, cause="error").inc(now[0] - before[0])
            if now[1] > before[1]:
                self.metrics.watch_restarts.labels(**labels, cause="gone").inc(now[1] - before[1])
            self._restarts[key] = now
        self.metrics.inflight.set(self.runs.inflight)

    async def run_periodic(self, stopping: asyncio.Event, interval: float = 1.0) -> None:
        while not stopping.is_set():
            await wait_event(stopping, interval)
            await self.recheck()
            self.publish()


def _deleting(pod: Mapping[str, Any]) -> bool:
    return bool(Meta(pod).deletion_timestamp)
