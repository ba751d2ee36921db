"""A Kueue emulation (kueue.x-k8s.io v1beta2): Workloads, FIFO admission by nominal quota.

It is opt-in (`SimulatedCluster(kube, kueue=True)` or `cluster.kueue.enabled = True`), runs
once the Workload CRD is registered (`load_crd_file(".../kueue.x-k8s.io_workloads.yaml")`), and
follows the objects a real Kueue v0.19 writes, so the agent reads them as on a cluster:

- **Workload per job.** A batch/v1 Job or a JobSet with the `kueue.x-k8s.io/queue-name` label
  and no controlling owner gets a Workload `job-<name>-<hash>` / `jobset-<name>-<hash>` in its
  namespace: a controller ownerReference to the job, the label `kueue.x-k8s.io/job-uid`,
  `spec.queueName`, and `spec.podSets` as Kueue builds them (Job: one set `main` with
  `min(parallelism, completions)` pods; JobSet: one set per replicated job with
  `replicas × parallelism` pods; the pod template copied). A job that runs without admission is
  suspended again (Kueue's webhook and job reconciler do the same).
- **Admission.** Pending Workloads are taken oldest first (creationTimestamp, then name) per
  ClusterQueue. A Workload whose LocalQueue does not exist gets `QuotaReserved=False`, reason
  `Inadmissible`, "LocalQueue NAME doesn't exist" (the same for a missing ClusterQueue). Otherwise
  every pod set's requests (container requests, limits standing in for missing requests, times
  the count) must fit a flavor of the resource group covering each resource, under
  `nominalQuota` minus the usage of admitted Workloads. If they do: `status.admission`
  (clusterQueue, podSetAssignments with flavors, resourceUsage and count) and conditions
  `QuotaReserved` and `Admitted` True, and the job is unsuspended. If not: `QuotaReserved=False`,
  reason `Pending`, with Kueue's message, e.g. "couldn't assign flavors to pod set main:
  insufficient unused quota for cpu in flavor default-flavor, 3 more needed" (or "...,
  previously considered podsets requests (0) + current podset request (24) > maximum capacity
  (16)" when it can never fit), and a Warning Event with the reason. `version = "0.20"`: the
  granular reasons (Misconfigured, WaitingForQuota, ExceedsMaxQuota, NoMatchingFlavor).
  `BestEffortFIFO` (the default) lets a later Workload that fits pass one that does not;
  `StrictFIFO` does not.
- **Release.** When the job completes or fails the Workload gets `Finished=True` and its quota
  is free for the next one; a deleted job's Workload goes with it (ownerReference GC).
- **Counts.** ClusterQueue and LocalQueue status: `pendingWorkloads`, `reservingWorkloads`,
  `admittedWorkloads` and `flavorsUsage`.

- **Deactivation.** `spec.active: false` (an admin; `deactivate()` plays the requeuing limit;
  `maximumExecutionTimeSeconds` sets it itself): `Evicted=True` reason `Deactivated` or
  `DeactivatedDueTo<cause>`, the job stopped, then `Requeued=False`: suspended for good.

Not modelled: cohorts and borrowing, preemption (use `evict()` to play one), admission checks,
priorities, fair sharing, partial admission, waitForPodsReady itself, topology-aware scheduling,
ResourceFlavor node labels, and the other job integrations (PyTorchJob, RayJob, ...).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from launch_agent.sandbox.cluster.children import elapsed
from launch_agent.sandbox.cluster.common import (
    Ctx,
    condition,
    has_condition,
    merge_conditions,
    owner_ref,
)
from launch_agent.sandbox.cluster.nodes import pod_requests
from launch_agent.sandbox.cluster.nodes import quantity as _quantity
from launch_agent.sandbox.kube.store import Obj

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/v1beta2"
WORKLOADS = f"workloads.{GROUP}"
LOCAL_QUEUES = f"localqueues.{GROUP}"
CLUSTER_QUEUES = f"clusterqueues.{GROUP}"
QUEUE_LABEL = f"{GROUP}/queue-name"
JOB_UID_LABEL = f"{GROUP}/job-uid"
MAX_EXEC_LABEL = f"{GROUP}/max-exec-time-seconds"
PRIORITY_LABEL = f"{GROUP}/priority-class"
PRIORITY_CLASSES = f"workloadpriorityclasses.{GROUP}"
SOURCE = "kueue-admission"

PodSets = list[dict[str, Any]]
Usage = dict[tuple[str, str], Decimal]  # (flavor, resource) -> amount


def _job_pod_sets(job: Obj) -> PodSets:
    spec = job.get("spec") or {}
    count = int(spec.get("parallelism", 1))
    if spec.get("completions") is not None:
        count = min(count, int(spec["completions"]))
    return [{"name": "main", "count": count, "template": spec.get("template") or {}}]


def _jobset_pod_sets(js: Obj) -> PodSets:
    sets: PodSets = []
    for rj in (js.get("spec") or {}).get("replicatedJobs") or []:
        jspec = (rj.get("template") or {}).get("spec") or {}
        count = int(rj.get("replicas", 1)) * int(jspec.get("parallelism", 1))
        sets.append({"name": rj["name"], "count": count, "template": jspec.get("template") or {}})
    return sets


def _job_finished(job: Obj) -> tuple[str, str] | None:
    """(Finished reason, message): the job's own Complete / Failed condition's message, which
    Kueue copies (`pkg/controller/jobs/job/job_controller.go`, Finished)."""
    for kind, outcome in (
        ("Complete", "Succeeded"),
        ("Completed", "Succeeded"),
        ("Failed", "Failed"),
    ):
        found = _condition(job, kind)
        if found is not None:
            return outcome, str(found.get("message") or "")
    return None


# Resource (as `store.rt` names it) -> (workload name prefix, pod sets).
INTEGRATIONS: dict[str, tuple[str, Callable[[Obj], PodSets]]] = {
    "jobs": ("job", _job_pod_sets),
    "jobsets.jobset.x-k8s.io": ("jobset", _jobset_pod_sets),
}


# The job reconciler's recorder, named after its integration (jobframework `setup.go`,
# `<integration>-kueue-controller`): the reporting component of its Events.
RECORDERS = {
    "job": "batch/job-kueue-controller",
    "jobset": "jobset.x-k8s.io/jobset-kueue-controller",
}


def workload_name(prefix: str, job: Obj) -> str:
    """`<prefix>-<name>-<5 hex>`, as Kueue's GetWorkloadNameForOwnerWithGVK (name cut to fit)."""
    digest = hashlib.sha256(
        f"{job['metadata']['name']}/{job['apiVersion']}/{job['kind']}".encode()
    ).hexdigest()[:5]
    return f"{prefix}-{job['metadata']['name'][:240]}-{digest}"


def format_amount(resource: str, value: Decimal) -> str:
    """A quantity as Kueue prints it: `24`, `500m`, `16Gi`."""
    if value == value.to_integral_value():
        n = int(value)
        if resource != "cpu" and n and n % 1024 == 0:
            for suffix, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
                if n % size == 0:
                    return f"{n // size}{suffix}"
        return str(n)
    return f"{int(value * 1000)}m"


class KueueController:
    """One reconcile pass over jobs, Workloads and queues (state lives only in the objects).

    Off unless `enabled` (`SimulatedCluster(kube, kueue=True)`, or set `cluster.kueue.enabled`),
    and idle until the Workload CRD is registered.
    """

    def __init__(self, enabled: bool = False, version: str = "0.19") -> None:
        self.enabled = enabled
        # "0.19": the legacy reasons (Inadmissible, Pending); "0.20": the granular ones of
        # UnadmittedWorkloadsObservability, on by default from 0.20 (Misconfigured,
        # WaitingForQuota, ExceedsMaxQuota, PendingEvaluation, Deactivated); before "0.10" a
        # deactivation is reason InactiveWorkload.
        self.version = version

    def _at_least(self, major: int, minor: int) -> bool:
        return tuple(int(p) for p in self.version.split(".")[:2]) >= (major, minor)

    @property
    def granular(self) -> bool:
        """pkg/workload UnadmittedWorkloadReasonWithFallback: the gate decides the reason."""
        return self._at_least(0, 20)

    def _reason(self, granular: str, fallback: str) -> str:
        return granular if self.granular else fallback

    def reconcile(self, ctx: Ctx) -> None:
        store = ctx.store
        if not self.enabled or store.registry.find(WORKLOADS) is None:
            return
        for resource, (prefix, pod_sets) in INTEGRATIONS.items():
            rt = store.registry.find(resource)
            if rt is None:
                continue
            for job in store.list(rt, None):
                if self._managed(job):
                    self._sync_job(ctx, job, prefix, pod_sets)
        self._admit(ctx)

    @staticmethod
    def _managed(job: Obj) -> bool:
        meta = job["metadata"]
        if meta.get("deletionTimestamp") or not (meta.get("labels") or {}).get(QUEUE_LABEL):
            return False
        return not any(r.get("controller") for r in meta.get("ownerReferences") or [])

    @staticmethod
    def _workload_spec(
        ctx: Ctx, job: Obj, pod_sets: Callable[[Obj], PodSets]
    ) -> dict[str, Any] | None:
        """The Workload's spec, or None while the WorkloadPriorityClass its job names does not
        exist (jobframework `PrepareWorkloadPriority` fails, and the reconcile is retried)."""
        labels = job["metadata"]["labels"]
        spec: dict[str, Any] = {
            "queueName": labels[QUEUE_LABEL],
            "podSets": pod_sets(job),
            "active": True,
            "priority": 0,
        }
        wanted = labels.get(PRIORITY_LABEL)
        if wanted:
            rt = ctx.store.registry.find(PRIORITY_CLASSES)
            found = ctx.store.find(rt, "", str(wanted)) if rt is not None else None
            if found is None:
                return None
            # pkg/util/priority GetPriorityFromWorkloadPriorityClass.
            spec["priority"] = int(found.get("value") or 0)
            spec["priorityClassRef"] = {
                "group": GROUP,
                "kind": "WorkloadPriorityClass",
                "name": str(wanted),
            }
        # jobframework MaximumExecutionTimeSeconds: from the job's label.
        limit = str(labels.get(MAX_EXEC_LABEL) or "")
        if limit.isdigit() and int(limit) > 0:
            spec["maximumExecutionTimeSeconds"] = int(limit)
        return spec

    def _workload_of(self, ctx: Ctx, job: Obj) -> Obj | None:
        found = ctx.children(job, "Workload")
        return found[0] if found else None

    def _sync_job(
        self, ctx: Ctx, job: Obj, prefix: str, pod_sets: Callable[[Obj], PodSets]
    ) -> None:
        wl = self._workload_of(ctx, job)
        if wl is None:
            meta = job["metadata"]
            spec = self._workload_spec(ctx, job, pod_sets)
            if spec is None:
                return
            wl = ctx.create(
                WORKLOADS,
                meta["namespace"],
                {
                    "apiVersion": API_VERSION,
                    "kind": "Workload",
                    "metadata": {
                        "name": workload_name(prefix, job),
                        "labels": {JOB_UID_LABEL: meta["uid"]},
                        "ownerReferences": [owner_ref(job)],
                    },
                    "spec": spec,
                },
            )
            # jobframework `reconciler.go` `handleJobWithNoWorkload`.
            ctx.event(
                job,
                "Normal",
                "CreatedWorkload",
                f"Created Workload: {meta['namespace']}/{wl['metadata']['name']}",
                RECORDERS[prefix],
            )
        finished = _job_finished(job)
        status = dict(wl.get("status") or {})
        if finished is not None:
            if not has_condition(wl, "Finished"):
                outcome, message = finished
                status["conditions"] = merge_conditions(
                    status.get("conditions"),
                    [condition("Finished", True, outcome, message, ctx.ts())],
                )
                _set_workload_status(ctx, wl, status)
                # jobframework `reconciler.go`, "3. handle a finished job".
                ctx.event(
                    job,
                    "Normal",
                    "FinishedWorkload",
                    f"Workload '{wl['metadata']['namespace']}/{wl['metadata']['name']}' is"
                    " declared finished",
                    RECORDERS[prefix],
                )
            return
        wl = self._workload_lifecycle(ctx, wl)
        evicted = _condition(wl, "Evicted")
        suspended = bool((job.get("spec") or {}).get("suspend"))
        if evicted is not None:
            self._handle_eviction(
                ctx, job, wl, evicted, suspended=suspended, source=RECORDERS[prefix]
            )
            return
        admitted = has_condition(wl, "Admitted")
        if admitted == suspended:
            # Admitted and still suspended: start it. Running without admission: stop it.
            spec = {**job["spec"], "suspend": not admitted}
            if prefix == "job":
                spec["template"] = _pod_set_info(spec.get("template") or {}, wl, admitted)
            ctx.update({**job, "spec": spec})
            if admitted:
                # jobframework `reconciler.go` `startJob`.
                cq = ((wl.get("status") or {}).get("admission") or {}).get("clusterQueue")
                ctx.event(
                    job, "Normal", "Started", f"Admitted by clusterQueue {cq}", RECORDERS[prefix]
                )

    def _handle_eviction(
        self, ctx: Ctx, job: Obj, wl: Obj, evicted: dict[str, Any], *, suspended: bool, source: str
    ) -> None:
        """jobframework/reconciler.go ReconcileGenericJob, "6. handle eviction": stop the job,
        then, once it is no longer active, clear the admission with `Requeued` True only for a
        preemption or node failures (a deactivated Workload is never requeued)."""
        if not suspended:
            spec = {**job["spec"], "suspend": True}
            if job["kind"] == "Job":
                spec["template"] = _pod_set_info(spec.get("template") or {}, wl, False)
            ctx.update({**job, "spec": spec})
            ctx.event(job, "Normal", "Stopped", evicted.get("message", ""), source)
            return
        if not has_condition(wl, "QuotaReserved"):
            return
        now, reason, message = ctx.ts(), evicted["reason"], evicted.get("message", "")
        status = dict(wl.get("status") or {})
        status.pop("admission", None)
        status["conditions"] = merge_conditions(
            status.get("conditions"),
            [
                condition(
                    "Requeued", reason in ("Preempted", "NodeFailures"), reason, message, now
                ),
                condition(
                    "QuotaReserved",
                    False,
                    self._reason("PendingEvaluation", "Pending"),
                    message,
                    now,
                ),
                condition(
                    "Admitted", False, "NoReservation", "The workload has no reservation", now
                ),
            ],
        )
        _set_workload_status(ctx, wl, status)

    def _workload_lifecycle(self, ctx: Ctx, wl: Obj) -> Obj:
        """workload_controller.go Reconcile: a DeactivationTarget turns `spec.active` off, an
        exceeded maximumExecutionTimeSeconds sets one (reconcileMaxExecutionTime), and an
        inactive Workload is evicted with reason Deactivated[DueTo<cause>]."""
        spec, status = wl.get("spec") or {}, dict(wl.get("status") or {})
        active = spec.get("active", True) is not False
        target = _condition(wl, "DeactivationTarget")
        if active and target is not None:
            return ctx.update({**wl, "spec": {**spec, "active": False}})
        if active:
            self._max_execution_time(ctx, wl)
            return wl
        if _condition(wl, "Evicted") is not None:
            return wl
        message = "The workload is deactivated"
        # Kueue before 0.10 named it InactiveWorkload (WorkloadEvictedByDeactivation) and
        # appended the cause bare; since then Deactivated, "DueTo" the cause (ReasonWithCause).
        reason = "Deactivated" if self._at_least(0, 10) else "InactiveWorkload"
        if target is not None:
            joiner = "DueTo" if self._at_least(0, 10) else ""
            reason = f"{reason}{joiner}{target['reason']}"
            message = f"{message} due to {target.get('message', '')}"
        status["conditions"] = merge_conditions(
            [c for c in status.get("conditions") or [] if c.get("type") != "DeactivationTarget"],
            [condition("Evicted", True, reason, message, ctx.ts())],
        )
        status.pop("requeueState", None)
        had_admission = bool(status.get("admission"))
        wl = _set_workload_status(ctx, wl, status)
        if had_admission:
            # evict.reportEvictedWorkload: "Evicted" + "DueTo" + the reason.
            ctx.event(wl, "Normal", f"EvictedDueTo{reason}", message, "kueue-workload-controller")
        return wl

    def _max_execution_time(self, ctx: Ctx, wl: Obj) -> None:
        limit = (wl.get("spec") or {}).get("maximumExecutionTimeSeconds")
        admitted = _condition(wl, "Admitted")
        if limit is None or admitted is None or has_condition(wl, "Finished"):
            return
        past = int((wl.get("status") or {}).get("accumulatedPastExecutionTimeSeconds") or 0)
        left = float(limit) - past - elapsed(ctx, admitted["lastTransitionTime"])
        if left > 0:
            ctx.wake_at(ctx.t + left)
            return
        self.deactivate(
            ctx, wl, "MaximumExecutionTimeExceeded", "exceeding the maximum execution time"
        )
        ctx.event(
            wl,
            "Warning",
            "MaximumExecutionTimeExceeded",
            f"The maximum execution time ({int(limit)}s) exceeded",
            "kueue-workload-controller",
        )

    # --- admission -----------------------------------------------------------------------

    def _admit(self, ctx: Ctx) -> None:
        store = ctx.store
        workloads = [
            wl
            for wl in store.list(store.rt(WORKLOADS), None)
            if not wl["metadata"].get("deletionTimestamp")
        ]
        cq_rt, lq_rt = store.registry.find(CLUSTER_QUEUES), store.registry.find(LOCAL_QUEUES)
        cqs = {cq["metadata"]["name"]: cq for cq in (store.list(cq_rt, None) if cq_rt else [])}
        lqs = {
            (lq["metadata"]["namespace"], lq["metadata"]["name"]): lq
            for lq in (store.list(lq_rt, None) if lq_rt else [])
        }
        usage: dict[str, Usage] = {name: {} for name in cqs}
        # Per ClusterQueue, the Workloads holding quota and what each holds: the candidates
        # a preemption picks from.
        holding: dict[str, list[tuple[Obj, Usage]]] = {name: [] for name in cqs}
        counts: dict[tuple[str, str], dict[str, int]] = {}

        def count(wl: Obj, cq: str | None, what: str) -> None:
            lq = (wl["metadata"]["namespace"], str(wl["spec"].get("queueName") or ""))
            for key in (("", cq or ""), lq):
                bucket = counts.setdefault(key, {"pending": 0, "reserving": 0, "admitted": 0})
                bucket[what] += 1

        pending: list[Obj] = []
        for wl in workloads:
            if has_condition(wl, "Finished"):
                continue
            if (wl.get("spec") or {}).get("active", True) is False:
                # The queue manager holds no inactive Workload; with the granular reasons the
                # workload controller says so in QuotaReserved.
                if self.granular and not has_condition(wl, "QuotaReserved"):
                    self._unreserved(ctx, wl, "Deactivated", "The workload is deactivated")
                continue
            admission = (wl.get("status") or {}).get("admission")
            if has_condition(wl, "QuotaReserved") and admission:
                cq = admission["clusterQueue"]
                held = _held(admission)
                used = usage.setdefault(cq, {})
                for key, amount in held.items():
                    used[key] = used.get(key, Decimal(0)) + amount
                holding.setdefault(cq, []).append((wl, held))
                count(wl, cq, "reserving")
                count(wl, cq, "admitted")
            else:
                pending.append(wl)
        # The ClusterQueue's heap (pkg/cache/queue cluster_queue.go, queueOrderingFunc):
        # higher priority first, then older.
        pending.sort(
            key=lambda w: (
                -_priority(w),
                w["metadata"].get("creationTimestamp", ""),
                w["metadata"]["name"],
            )
        )
        blocked: set[str] = set()
        for wl in pending:
            ns, queue = wl["metadata"]["namespace"], str(wl["spec"].get("queueName") or "")
            lq = lqs.get((ns, queue))
            if lq is None:
                # getQueueBlocker (granular) / resolveLegacyUnadmittedQuotaReservedCondition.
                reason = self._reason("Misconfigured", "Inadmissible")
                self._unreserved(ctx, wl, reason, f"LocalQueue {queue} doesn't exist")
                count(wl, None, "pending")
                continue
            cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
            cq = cqs.get(cq_name)
            if cq is None:
                reason = self._reason("Misconfigured", "Inadmissible")
                self._unreserved(ctx, wl, reason, f"ClusterQueue {cq_name} doesn't exist")
                count(wl, cq_name, "pending")
                continue
            if cq_name in blocked:
                count(wl, cq_name, "pending")
                continue
            assignment, problem, no_fit = assign(
                cq, wl["spec"].get("podSets") or [], usage[cq_name]
            )
            if assignment is None:
                targets = _preemption_targets(cq, wl, holding.get(cq_name, []), usage[cq_name])
                if targets:
                    _preempt(ctx, wl, cq_name, targets)
                    # scheduler.go: the targets being evicted are counted as preempted too.
                    problem += f". Pending the preemption of {len(targets)} workload(s)"
                # scheduler.go requeueAndUpdate: the condition, and a Warning Event when it
                # changes, both with the (granular or "Pending") reason.
                reason = self._reason(no_fit, "Pending")
                requests = _resource_requests(wl["spec"].get("podSets") or [])
                if self._unreserved(ctx, wl, reason, problem, requests):
                    ctx.event(wl, "Warning", reason, problem, SOURCE)
                count(wl, cq_name, "pending")
                if (cq.get("spec") or {}).get("queueingStrategy") == "StrictFIFO":
                    blocked.add(cq_name)
                continue
            for psa in assignment:
                for res, flavor in psa["flavors"].items():
                    key = (flavor, res)
                    usage[cq_name][key] = usage[cq_name].get(key, Decimal(0)) + _quantity(
                        psa["resourceUsage"][res]
                    )
            self._reserve(ctx, wl, cq_name, assignment)
            count(wl, cq_name, "reserving")
            count(wl, cq_name, "admitted")
        self._queue_status(ctx, cqs, lqs, usage, counts)

    def _unreserved(
        self,
        ctx: Ctx,
        wl: Obj,
        reason: str,
        message: str,
        requests: list[dict[str, Any]] | None = None,
    ) -> bool:
        """workload.UnsetQuotaReservationWithCondition; True when the condition changed.
        `requests`: what the scheduler found did not fit (`PropagateResourceRequests`)."""
        before = next(
            (
                c
                for c in (wl.get("status") or {}).get("conditions") or []
                if c["type"] == "QuotaReserved"
            ),
            None,
        )
        changed = before is None or (
            before.get("status"),
            before.get("reason"),
            before.get("message"),
        ) != ("False", reason, message)
        status = dict(wl.get("status") or {})
        status.pop("admission", None)
        if requests is not None:
            status["resourceRequests"] = requests
        new = [condition("QuotaReserved", False, reason, message, ctx.ts())]
        if has_condition(wl, "Admitted"):
            new.append(
                condition(
                    "Admitted", False, "NoReservation", "The workload has no reservation", ctx.ts()
                )
            )
        conditions = merge_conditions(status.get("conditions"), new)
        status["conditions"] = conditions
        _set_workload_status(ctx, wl, status)
        return changed

    def _reserve(self, ctx: Ctx, wl: Obj, cq: str, assignment: list[dict[str, Any]]) -> None:
        status = dict(wl.get("status") or {})
        status["admission"] = {"clusterQueue": cq, "podSetAssignments": assignment}
        now = ctx.ts()
        # workload.SetQuotaReservation: Evicted and Preempted are reset (resetActiveCondition).
        reset = [
            condition(c["type"], False, "QuotaReserved", f"Previously: {c.get('message', '')}", now)
            for c in status.get("conditions") or []
            if c["type"] in ("Evicted", "Preempted") and c.get("status") == "True"
        ]
        status["conditions"] = merge_conditions(
            status.get("conditions"),
            [
                *reset,
                condition(
                    "QuotaReserved",
                    True,
                    "QuotaReserved",
                    f"Quota reserved in ClusterQueue {cq}",
                    now,
                ),
                condition("Admitted", True, "Admitted", "The workload is admitted", now),
            ],
        )
        _set_workload_status(ctx, wl, status)
        ctx.event(
            wl,
            "Normal",
            "QuotaReserved",
            f"Quota reserved in ClusterQueue {cq}, wait time since queued was 0s",
            "kueue-admission",
        )
        # scheduler.go `admit`: no admission checks, so admitted with the reservation.
        ctx.event(
            wl,
            "Normal",
            "Admitted",
            f"Admitted by ClusterQueue {cq}, wait time since reservation was 0s",
            "kueue-admission",
        )

    def _queue_status(
        self,
        ctx: Ctx,
        cqs: Mapping[str, Obj],
        lqs: Mapping[tuple[str, str], Obj],
        usage: Mapping[str, Usage],
        counts: Mapping[tuple[str, str], Mapping[str, int]],
    ) -> None:
        zero = {"pending": 0, "reserving": 0, "admitted": 0}
        for name, cq in cqs.items():
            c = counts.get(("", name), zero)
            used = usage.get(name, {})
            flavors: dict[str, list[dict[str, Any]]] = {}
            for group in (cq.get("spec") or {}).get("resourceGroups") or []:
                for flavor in group.get("flavors") or []:
                    flavors[flavor["name"]] = [
                        {
                            "name": r["name"],
                            "total": format_amount(
                                r["name"], used.get((flavor["name"], r["name"]), Decimal(0))
                            ),
                            "borrowed": "0",
                        }
                        for r in flavor.get("resources") or []
                    ]
            usage_list = [{"name": f, "resources": rs} for f, rs in flavors.items()]
            status = {
                **(cq.get("status") or {}),
                "pendingWorkloads": c["pending"],
                "reservingWorkloads": c["reserving"],
                "admittedWorkloads": c["admitted"],
                "flavorsReservation": usage_list,
                "flavorsUsage": usage_list,
            }
            ctx.set_status(cq, status)
        for key, lq in lqs.items():
            c = counts.get(key, zero)
            status = {
                **(lq.get("status") or {}),
                "pendingWorkloads": c["pending"],
                "reservingWorkloads": c["reserving"],
                "admittedWorkloads": c["admitted"],
            }
            ctx.set_status(lq, status)

    # --- scripted events -----------------------------------------------------------------

    @staticmethod
    def evict(ctx: Ctx, wl: Obj, reason: str, message: str, priorities: str = "") -> None:
        """Evict an admitted Workload as Kueue's preemption does (preemption.go
        IssuePreemptions: workload.Evict writes `Evicted=True` reason Preempted and
        `Preempted=True` with the preemption reason, with an `EvictedDueToPreempted` Event;
        then a `Preempted` Event, `priorities` appended). The next pass stops the job and
        releases the quota with `Requeued=True`, as the job reconciler does."""
        now = ctx.ts()
        status = dict(wl.get("status") or {})
        new = [condition("Evicted", True, "Preempted", message, now)]
        if reason:
            new.append(condition("Preempted", True, reason, message, now))
        status["conditions"] = merge_conditions(status.get("conditions"), new)
        _set_workload_status(ctx, wl, status)
        ctx.event(wl, "Normal", "EvictedDueToPreempted", message, SOURCE)
        said = f"{message}; {priorities}" if priorities else message
        ctx.event(wl, "Normal", "Preempted", said, SOURCE)

    @staticmethod
    def deactivate(ctx: Ctx, wl: Obj, cause: str, message: str) -> None:
        """workload.SetDeactivationTarget, as Kueue's requeuing limit (triggerDeactivation:
        `RequeuingLimitExceeded`, "exceeding the maximum number of re-queuing retries") or the
        maximum execution time do: the next pass sets `spec.active: false` and evicts with
        reason `DeactivatedDueTo<cause>`. An admin deactivates by patching `spec.active`."""
        status = dict(wl.get("status") or {})
        status["conditions"] = merge_conditions(
            status.get("conditions"),
            [condition("DeactivationTarget", True, cause, message, ctx.ts())],
        )
        _set_workload_status(ctx, wl, status)


POD_SET_LABELS = (f"{GROUP}/podset", f"{GROUP}/cluster-queue-name", f"{GROUP}/local-queue-name")
WORKLOAD_ANNOTATION = f"{GROUP}/workload"


def _pod_set_info(template: Obj, wl: Obj, admitted: bool) -> Obj:
    """A started job's pod template names its pod set, queues and Workload (Kueue v0.17,
    `pkg/podset/podset.go` `FromAssignment` merged by the Job integration's
    `RunWithPodSetsInfo`); a stopped one gets its own back (`RestorePodSetsInfo`)."""
    meta = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in POD_SET_LABELS}
    notes = {k: v for k, v in (meta.get("annotations") or {}).items() if k != WORKLOAD_ANNOTATION}
    if admitted:
        admission = (wl.get("status") or {}).get("admission") or {}
        assignments = admission.get("podSetAssignments") or [{}]
        labels |= {
            POD_SET_LABELS[0]: str(assignments[0].get("name", "main")),
            POD_SET_LABELS[1]: str(admission.get("clusterQueue", "")),
            POD_SET_LABELS[2]: str((wl.get("spec") or {}).get("queueName", "")),
        }
        notes[WORKLOAD_ANNOTATION] = wl["metadata"]["name"]
    meta["labels"], meta["annotations"] = labels, notes
    return {**template, "metadata": {k: v for k, v in meta.items() if v}}


def _set_workload_status(ctx: Ctx, wl: Obj, status: dict[str, Any]) -> Obj:
    """Kueue stamps each condition it sets with the Workload's generation
    (`pkg/workload/workload.go`, `SetConditionAndUpdate`, `ObservedGeneration: wl.Generation`)."""
    generation = wl["metadata"].get("generation", 1)
    status["conditions"] = [
        {**c, "observedGeneration": c.get("observedGeneration", generation)}
        for c in status.get("conditions") or []
    ]
    if not status["conditions"]:
        del status["conditions"]
    return ctx.set_status(wl, status)


def _priority(wl: Obj) -> int:
    value = (wl.get("spec") or {}).get("priority")
    return value if isinstance(value, int) else 0


def _held(admission: Mapping[str, Any]) -> Usage:
    """The quota an admission holds, by (flavor, resource)."""
    held: Usage = {}
    for psa in admission.get("podSetAssignments") or []:
        for res, flavor in (psa.get("flavors") or {}).items():
            amount = _quantity((psa.get("resourceUsage") or {}).get(res, 0))
            held[(flavor, res)] = held.get((flavor, res), Decimal(0)) + amount
    return held


def _reserved_at(wl: Obj) -> str:
    found = _condition(wl, "QuotaReserved")
    return str((found or {}).get("lastTransitionTime") or "")


def _preemption_targets(
    cq: Obj, wl: Obj, holding: list[tuple[Obj, Usage]], used: Usage
) -> list[Obj]:
    """The Workloads of `cq` to evict so that `wl` fits, by Kueue's classical heuristic within
    one ClusterQueue (`pkg/scheduler/preemption/preemption.go` classicalPreemptions,
    `common/ordering.go` CandidatesOrdering): candidates the ClusterQueue's
    `preemption.withinClusterQueue` allows (`LowerPriority`; `LowerOrNewerEqualPriority` also
    newer ones of equal priority; `Never`, the default, none), already evicted first, then
    lowest priority, then the most recently admitted; removed in that order until `wl` fits,
    then added back, last removed but one first, while it still fits. None if nothing does."""
    policy = ((cq.get("spec") or {}).get("preemption") or {}).get("withinClusterQueue") or "Never"
    if policy not in ("LowerPriority", "LowerOrNewerEqualPriority"):
        return []
    mine, created = _priority(wl), str(wl["metadata"].get("creationTimestamp") or "")

    def allowed(other: Obj) -> bool:
        theirs = _priority(other)
        newer = str(other["metadata"].get("creationTimestamp") or "") > created
        return theirs < mine or (policy == "LowerOrNewerEqualPriority" and theirs == mine and newer)

    candidates = [(o, h) for o, h in holding if allowed(o)]
    # Stable sorts, the last one the strongest key.
    candidates.sort(key=lambda c: str(c[0]["metadata"].get("uid") or ""))
    candidates.sort(key=lambda c: _reserved_at(c[0]), reverse=True)
    candidates.sort(key=lambda c: (_condition(c[0], "Evicted") is None, _priority(c[0])))
    pod_sets = wl["spec"].get("podSets") or []
    remaining, chosen = dict(used), []
    for candidate in candidates:
        chosen.append(candidate)
        for key, amount in candidate[1].items():
            remaining[key] = remaining.get(key, Decimal(0)) - amount
        if assign(cq, pod_sets, remaining)[0] is not None:
            break
    else:
        return []
    for candidate in reversed(chosen[:-1]):
        trial = dict(remaining)
        for key, amount in candidate[1].items():
            trial[key] = trial.get(key, Decimal(0)) + amount
        if assign(cq, pod_sets, trial)[0] is not None:
            remaining = trial
            chosen.remove(candidate)
    return [o for o, _ in chosen]


def _preempt(ctx: Ctx, preemptor: Obj, cq: str, targets: list[Obj]) -> None:
    """preemption.go IssuePreemptions: each target not yet evicted is, with the preemptor's
    UIDs and the queues' paths ("/<cq>": no cohorts here), and both sides get an Event."""
    meta = preemptor["metadata"]
    message = (
        f"Preempted to accommodate a workload (UID: {meta.get('uid')}, JobUID:"
        f" {(meta.get('labels') or {}).get(JOB_UID_LABEL, 'UNKNOWN')}) due to prioritization in"
        f" the ClusterQueue; preemptor path: /{cq}; preemptee path: /{cq}"
    )
    for target in targets:
        if _condition(target, "Evicted") is not None:
            continue  # "Preemption ongoing"
        mine, theirs = _priority(preemptor), _priority(target)
        priorities = (
            f"preemptor effective priority: {mine} (base: {mine}, boost: 0); preemptee"
            f" effective priority: {theirs} (base: {theirs}, boost: 0)"
        )
        KueueController.evict(ctx, target, "InClusterQueue", message, priorities)
        t = target["metadata"]
        ctx.event(
            preemptor,
            "Normal",
            "PreemptedWorkload",
            f"Preempted workload {t['namespace']}/{t['name']} (UID: {t.get('uid')}) in"
            f" ClusterQueue {cq}; {priorities}",
            SOURCE,
        )


def _condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    """The condition of that type when its status is True."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _resource_requests(pod_sets: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A pending Workload's `status.resourceRequests`: each pod set's requests times its count
    (`pkg/workload/workload.go` `PropagateResourceRequests`, called by `scheduler.go`
    `requeueAndUpdate` under WorkloadResourceRequestsSummary, on by default)."""
    out = []
    for ps in pod_sets:
        count = int(ps.get("count", 1))
        per_pod = pod_requests((ps.get("template") or {}).get("spec") or {})
        out.append(
            {
                "name": str(ps.get("name", "main")),
                "resources": {r: format_amount(r, v * count) for r, v in sorted(per_pod.items())},
            }
        )
    return out


def assign(
    cq: Obj, pod_sets: list[Mapping[str, Any]], used: Usage
) -> tuple[list[dict[str, Any]] | None, str, str]:
    """Flavors for every pod set under nominal quota, or (None, Kueue's pending message, the
    granular no-fit reason) as flavorassigner.go words them."""
    groups = (cq.get("spec") or {}).get("resourceGroups") or []
    taken: Usage = {}
    assignment: list[dict[str, Any]] = []
    for ps in pod_sets:
        name, count = str(ps.get("name", "main")), int(ps.get("count", 1))
        per_pod = pod_requests((ps.get("template") or {}).get("spec") or {})
        request = {r: v * count for r, v in per_pod.items() if v}
        flavors: dict[str, str] = {}
        for res in sorted(request):
            if res in flavors:
                continue
            group = next((g for g in groups if res in (g.get("coveredResources") or [])), None)
            if group is None:
                return (
                    None,
                    f"couldn't assign flavors to pod set {name}: resource {res} unavailable in"
                    " ClusterQueue",
                    "NoMatchingFlavor",
                )
            chosen, problems = _pick_flavor(group, request, used, taken)
            if chosen is None:
                # Status.Message sorts the reasons; the most severe one names the condition.
                severe = any("maximum capacity" in p for p in problems)
                return (
                    None,
                    f"couldn't assign flavors to pod set {name}: {', '.join(sorted(problems))}",
                    "ExceedsMaxQuota" if severe else "WaitingForQuota",
                )
            for r in request:
                if r in (group.get("coveredResources") or []):
                    flavors[r] = chosen
        for r, fname in flavors.items():
            taken[(fname, r)] = taken.get((fname, r), Decimal(0)) + request[r]
        assignment.append(
            {
                "name": name,
                "flavors": dict(sorted(flavors.items())),
                "resourceUsage": {r: format_amount(r, v) for r, v in sorted(request.items())},
                "count": count,
            }
        )
    return assignment, "", ""


def _pick_flavor(
    group: Mapping[str, Any], request: Mapping[str, Decimal], used: Usage, taken: Usage
) -> tuple[str | None, list[str]]:
    """The first flavor of a resource group where every requested resource it covers fits."""
    wanted = sorted(r for r in request if r in (group.get("coveredResources") or []))
    problems: list[str] = []
    for flavor in group.get("flavors") or []:
        fname = flavor["name"]
        quota = {r["name"]: _quantity(r["nominalQuota"]) for r in flavor.get("resources") or []}
        misses = []
        for r in wanted:
            nominal = quota.get(r, Decimal(0))
            in_use = used.get((fname, r), Decimal(0)) + taken.get((fname, r), Decimal(0))
            assumed = taken.get((fname, r), Decimal(0))
            if assumed + request[r] > nominal:
                # flavorassigner.go fitsResourceQuota, "No Fit" (v0.19 wording).
                misses.append(
                    f"insufficient quota for {r} in flavor {fname}, previously considered"
                    f" podsets requests ({format_amount(r, assumed)}) + current podset request"
                    f" ({format_amount(r, request[r])}) > maximum capacity"
                    f" ({format_amount(r, nominal)})"
                )
            elif in_use + request[r] > nominal:
                more = format_amount(r, in_use + request[r] - nominal)
                misses.append(
                    f"insufficient unused quota for {r} in flavor {fname}, {more} more needed"
                )
        if not misses:
            return fname, []
        problems += misses
    return None, problems
