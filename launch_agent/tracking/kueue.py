"""Kueue's admission state of a run, read from its Workload (kueue.x-k8s.io v1beta1/v1beta2).

With `quota.mode: kueue` the agent creates its workloads suspended with the
`kueue.x-k8s.io/queue-name` label and Kueue decides when they start. Kueue records that decision
on a `Workload` it creates for the job (controller ownerReference to the job), in conditions
whose shape is the same in both served API versions:

- finished: `Finished=True`;
- evicted: `Evicted=True`, newer than any admission (`Preempted=True` carries the detailed
  reason: `InClusterQueue`, `InCohortReclamation`, ...);
- admitted: `Admitted=True` (`status.admission.clusterQueue` names the ClusterQueue);
- checks: `QuotaReserved=True` but not `Admitted` yet: admission checks are pending;
- inadmissible: `QuotaReserved=False`, reason `Inadmissible` (or `Misconfigured` in newer
  Kueue): the LocalQueue or ClusterQueue is missing or stopped ("LocalQueue NAME doesn't
  exist");
- deactivated: `spec.active: false`, or `Evicted=True` with reason `Deactivated`,
  `DeactivatedDueTo<Cause>` (`RequeuingLimitExceeded`, `MaximumExecutionTimeExceeded`,
  `AdmissionCheck`) or the older `InactiveWorkload` (kueue `pkg/workload/workload.go`,
  `pkg/controller/core/workload_controller.go` `reconcileNotReadyTimeout` /
  `reconcileMaxExecutionTime`): Kueue never admits it again until someone sets it active;
  the job stays suspended for good, so the run is failed with Kueue's message;
- pending: `QuotaReserved=False` otherwise, with Kueue's message ("couldn't assign flavors to
  pod set main: insufficient unused quota for cpu in flavor default-flavor, 3 more needed"), or
  no condition yet (no warning then: Kueue usually admits moments later).

`describe` turns that into the sentence a person reads in W&B, which always names the
LocalQueue, and the ClusterQueue when known, so they know where to look (`kubectl describe
clusterqueue NAME`). Pure: objects in, values out.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

GROUP = "kueue.x-k8s.io"
QUEUE_LABEL = f"{GROUP}/queue-name"
# Served versions, newest first: the agent watches the first one the cluster serves.
VERSIONS = ("v1beta2", "v1beta1")
INADMISSIBLE = "Inadmissible"
# kueue `apis/kueue/v1beta1/workload_types.go` (`WorkloadInadmissible`) and the newer
# `Misconfigured` pending reason for a missing or misconfigured LocalQueue.
INADMISSIBLE_REASONS = frozenset({INADMISSIBLE, "Misconfigured"})
# Evicted reasons of a deactivated Workload (`WorkloadDeactivated`, `WorkloadInactive` in
# older releases, and `DeactivatedDueTo` + the cause since v0.10).
DEACTIVATED = "Deactivated"
_DEACTIVATED_REASONS = frozenset({DEACTIVATED, "InactiveWorkload"})


class KueueState(enum.Enum):
    PENDING = "pending"
    CHECKS = "checks"
    INADMISSIBLE = "inadmissible"
    ADMITTED = "admitted"
    EVICTED = "evicted"
    DEACTIVATED = "deactivated"
    FINISHED = "finished"

    @property
    def waiting(self) -> bool:
        """Not admitted yet: counts against the pending cap of its LocalQueue."""
        return self in (
            KueueState.PENDING,
            KueueState.CHECKS,
            KueueState.INADMISSIBLE,
            KueueState.EVICTED,
        )


@dataclass(frozen=True, slots=True)
class KueueStatus:
    state: KueueState
    namespace: str
    local_queue: str
    cluster_queue: str | None = None
    reason: str = ""
    message: str = ""
    # MultiKueue: the worker cluster the Workload is placed on (`status.clusterName`, set by
    # the manager's MultiKueue controller once a worker reserved quota; reset on eviction).
    cluster_name: str | None = None


@dataclass(frozen=True, slots=True)
class Owner:
    """The object a Workload stands for (its controller ownerReference)."""

    namespace: str
    kind: str
    name: str
    uid: str


def _conditions(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    status = obj.get("status")
    items = status.get("conditions") if isinstance(status, Mapping) else None
    out: dict[str, Mapping[str, Any]] = {}
    for c in items if isinstance(items, Sequence) else ():
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            out[c["type"]] = c
    return out


def _mapping(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _true(conds: Mapping[str, Mapping[str, Any]], kind: str) -> bool:
    return conds.get(kind, {}).get("status") == "True"


JOB_UID_LABEL = f"{GROUP}/job-uid"


def owner_of(workload: Mapping[str, Any]) -> Owner | None:
    """The controller ownerReference; else the reference to the object whose uid Kueue put in
    the `kueue.x-k8s.io/job-uid` label: the Workloads of a LeaderWorkerSet (one per group,
    kueue `pkg/controller/jobs/leaderworkerset/leaderworkerset_reconciler.go`
    `constructWorkload`) are owned through `SetOwnerReference`, which sets no controller."""
    meta = workload.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    refs = meta.get("ownerReferences")
    refs = [r for r in (refs if isinstance(refs, Sequence) else ()) if isinstance(r, Mapping)]
    labels = meta.get("labels")
    job_uid = labels.get(JOB_UID_LABEL) if isinstance(labels, Mapping) else None
    chosen = [r for r in refs if r.get("controller")] or [
        r for r in refs if job_uid and r.get("uid") == job_uid
    ]
    if not chosen:
        return None
    ref = chosen[0]
    return Owner(
        str(meta.get("namespace") or ""),
        str(ref.get("kind") or ""),
        str(ref.get("name") or ""),
        str(ref.get("uid") or ""),
    )


def workload_status(workload: Mapping[str, Any]) -> KueueStatus:
    """Where Kueue is with this Workload (table in the module docstring)."""
    meta, spec, status = (_mapping(workload, key) for key in ("metadata", "spec", "status"))
    namespace = str(meta.get("namespace") or "")
    local_queue = str(spec.get("queueName") or "")
    admission = status.get("admission")
    cluster_queue = (
        str(admission.get("clusterQueue"))
        if isinstance(admission, Mapping) and admission.get("clusterQueue")
        else None
    )
    conds = _conditions(workload)
    worker = cluster_name(workload)

    def make(state: KueueState, cond: str | None = None, **extra: Any) -> KueueStatus:
        c = conds.get(cond or "", {})
        return KueueStatus(
            state,
            namespace,
            local_queue,
            extra.get("cluster_queue", cluster_queue),
            str(extra.get("reason", c.get("reason") or "")),
            str(extra.get("message", c.get("message") or "")),
            worker,
        )

    if _true(conds, "Finished"):
        return make(KueueState.FINISHED, "Finished")
    deactivated = deactivation(workload)
    if deactivated is not None:
        reason, message = deactivated
        return make(KueueState.DEACTIVATED, reason=reason, message=message, cluster_queue=None)
    evicted = _true(conds, "Evicted")
    admitted = _true(conds, "Admitted")
    if evicted and admitted:
        # Re-admitted after an eviction when the admission is the newer of the two (RFC 3339
        # UTC timestamps compare as strings).
        evicted = str(conds["Evicted"].get("lastTransitionTime") or "") >= str(
            conds["Admitted"].get("lastTransitionTime") or ""
        )
    if evicted:
        preempted = conds.get("Preempted", {})
        if preempted.get("status") == "True":
            return make(KueueState.EVICTED, "Preempted", cluster_queue=None)
        return make(KueueState.EVICTED, "Evicted", cluster_queue=None)
    if admitted:
        return make(KueueState.ADMITTED, "Admitted")
    if _true(conds, "QuotaReserved"):
        checks = status.get("admissionChecks")
        checks = checks if isinstance(checks, Sequence) else ()
        waiting = sorted(
            str(c.get("name"))
            for c in checks
            if isinstance(c, Mapping) and c.get("state") != "Ready"
        )
        return make(
            KueueState.CHECKS,
            "QuotaReserved",
            reason="AdmissionChecks",
            message=", ".join(waiting),
        )
    reserved = conds.get("QuotaReserved", {})
    # A reason of the wrong type (a list, as a CRD without status validation allows) is none.
    refused = reserved.get("reason")
    if (
        reserved.get("status") == "False"
        and isinstance(refused, str)
        and refused in INADMISSIBLE_REASONS
    ):
        return make(KueueState.INADMISSIBLE, "QuotaReserved")
    return make(KueueState.PENDING, "QuotaReserved")


def cluster_name(workload: Mapping[str, Any]) -> str | None:
    """The MultiKueue worker a Workload is placed on: `status.clusterName`, the same field in
    v1beta1 and v1beta2 (kueue `apis/kueue/*/workload_types.go`; written by
    `pkg/controller/admissionchecks/multikueue/workload.go` once the worker reserved quota,
    cleared by `pkg/workload` `resetClusterNomination` on eviction). None when not placed."""
    value = _mapping(workload, "status").get("clusterName")
    return value if isinstance(value, str) and value else None


def deactivation(workload: Mapping[str, Any]) -> tuple[str, str] | None:
    """(reason, message) when Kueue deactivated the Workload, else None.

    Kueue first marks it with a `DeactivationTarget` condition (`workload.SetDeactivationTarget`
    in `pkg/controller/core/workload_controller.go`: reasons `RequeuingLimitExceeded`,
    `MaximumExecutionTimeExceeded`, `AdmissionCheck`), then sets `spec.active: false` and
    evicts it (`Evicted` reason `Deactivated`, `DeactivatedDueTo<Cause>`,
    `EvictedDueToDeactivatedDueTo<Cause>`; `InactiveWorkload` before v0.9). Once an admin
    re-activates it (`spec.active` true again) a stale Evicted condition no longer counts.
    """
    spec = _mapping(workload, "spec")
    conds = _conditions(workload)
    evicted = conds.get("Evicted", {})
    target = conds.get("DeactivationTarget", {})
    reason = str(evicted.get("reason") or "")
    by_reason = evicted.get("status") == "True" and (
        reason in _DEACTIVATED_REASONS or "DeactivatedDueTo" in reason
    )
    if by_reason and spec.get("active") is not True:
        return reason, str(evicted.get("message") or "")
    if target.get("status") == "True":
        cause = str(target.get("reason") or "")
        return (
            f"DeactivatedDueTo{cause}" if cause else DEACTIVATED,
            str(target.get("message") or ""),
        )
    if spec.get("active") is False:
        return DEACTIVATED, "the Workload was deactivated (spec.active: false)"
    return None


def describe(status: KueueStatus, left: str | None = None) -> str | None:
    """The W&B warning for this state; None when there is nothing worth telling (finished).
    `left`: the MultiKueue worker the run was placed on before this change (an eviction
    clears the Workload's own record of it)."""
    where = f"LocalQueue {status.namespace}/{status.local_queue}"
    if status.cluster_queue:
        where += f" (ClusterQueue {status.cluster_queue})"
    match status.state:
        case KueueState.FINISHED:
            return None
        case KueueState.DEACTIVATED:
            why = f"{status.reason}: {status.message}" if status.message else status.reason
            return (
                f"Kueue deactivated the workload ({why}); it will not be admitted again in"
                f" {where} unless an admin sets spec.active: true on its Workload"
            )
        case KueueState.ADMITTED:
            if status.cluster_name:
                return (
                    f"admitted by Kueue: {where}; MultiKueue runs it on worker cluster"
                    f" {status.cluster_name}"
                )
            return f"admitted by Kueue: {where}"
        case KueueState.CHECKS:
            if not status.message:
                # Every check is Ready (or none is listed yet): admitted moments later.
                return None
            return (
                f"waiting for Kueue: quota reserved in {where}, admission checks pending:"
                f" {status.message}"
            )
        case KueueState.EVICTED:
            why = f"{status.reason}: {status.message}" if status.message else status.reason
            if left:
                # MultiKueue's workerLostTimeout, or the worker evicted it: Kueue requeues the
                # same workload, which is not a failure and not a new run.
                return (
                    f"evicted by Kueue ({why}) from worker cluster {left}: Kueue requeued the"
                    f" run, which waits in {where} until MultiKueue places it on a worker again"
                )
            return (
                f"evicted by Kueue ({why}); the run is suspended and waits in {where} to be"
                " admitted again"
            )
        case KueueState.INADMISSIBLE:
            said = status.message or status.reason
            if not status.message or ("LocalQueue" in said and "doesn't exist" in said):
                return (
                    f"Kueue cannot admit this run: {said}. Create"
                    f" LocalQueue {status.local_queue} in namespace {status.namespace} (pointing"
                    " at a ClusterQueue), or name an existing one in the queue spec's"
                    " spec.kueue.queueName or quota.kueue.default_local_queue"
                )
            # A stopped or misconfigured queue (kueue `workload_controller.go`: "ClusterQueue %s
            # is stopped", "ClusterQueue %s doesn't exist", an admissibility error): the admin
            # fixes the queue; creating a LocalQueue would not help.
            return (
                f"Kueue cannot admit this run: {said}. The run waits in {where} until an admin"
                " fixes the queue (kubectl describe localqueue / clusterqueue)"
            )
        case KueueState.PENDING:
            if not status.message:
                return None  # Kueue has not looked at it yet: usually admitted moments later
            return f"waiting for Kueue: {where}: {status.message}"
