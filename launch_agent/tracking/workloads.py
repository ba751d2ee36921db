"""Workload status -> a kind-independent phase, one reader per workload kind.

Each controller writes status in its own shape; the readers below know those shapes from the
CRD schemas (`tests/fixtures/crds/`) and the controllers' constants, not from guesses:

- batch/v1 Job: conditions Complete / SuccessCriteriaMet and Failed / FailureTarget (reasons
  BackoffLimitExceeded, DeadlineExceeded, PodFailurePolicy); `status.ready`; `spec.suspend` or
  condition Suspended.
- JobSet: conditions Completed / Failed, `status.terminalState`; `replicatedJobsStatus[]` (a
  list: the reference agent reads a dict that never exists); `spec.suspend`, Suspended.
- PyTorchJob: conditions Succeeded / Failed / Running / Suspended; `spec.runPolicy.suspend`.
- TrainJob: conditions Complete / Failed / Suspended; `jobsStatus[]`; `spec.suspend`.
- LeaderWorkerSet: no terminal signal (it serves until deleted); condition Available,
  `readyReplicas`.
- RayJob: `jobDeploymentStatus` (Complete, Failed, ValidationFailed, Suspended, Running, ...)
  with `jobStatus` (PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED); `spec.suspend`.
- Volcano Job: `status.state.phase` (Completed, Failed, Terminated, Aborted, Running, Pending:
  queued while no pod exists, as the queue has not admitted the gang yet; starting after).

An unknown kind falls back to the common condition vocabulary, so a new CRD degrades to
"starting until a Succeeded/Complete/Failed condition appears" rather than to an error.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from launch_agent.tracking.fields import condition, dig, flag, integer, mappings, text
from launch_agent.tracking.views import Meta


class Phase(Enum):
    SUSPENDED = "suspended"
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"
    # A failed attempt the controller retries (RayJob Retrying, PyTorchJob Restarting).
    RESTARTING = "restarting"


@dataclass(frozen=True, slots=True)
class WorkloadStatus:
    phase: Phase
    # The controller's reason and message for a terminal phase, verbatim.
    reason: str | None = None
    message: str | None = None


PENDING = WorkloadStatus(Phase.PENDING)
RUNNING = WorkloadStatus(Phase.RUNNING)
SUSPENDED = WorkloadStatus(Phase.SUSPENDED)


def _from_condition(phase: Phase, cond: Mapping[str, Any]) -> WorkloadStatus:
    return WorkloadStatus(phase, text(cond, "reason"), text(cond, "message"))


def _terminal_conditions(
    obj: Mapping[str, Any], succeeded: tuple[str, ...], failed: tuple[str, ...]
) -> WorkloadStatus | None:
    # Failure is checked first: a controller that (wrongly) sets both must not report success.
    for ctype in failed:
        cond = condition(obj, ctype)
        if cond is not None:
            return _from_condition(Phase.FAILED, cond)
    for ctype in succeeded:
        cond = condition(obj, ctype)
        if cond is not None:
            return _from_condition(Phase.SUCCEEDED, cond)
    return None


def _child_jobs(obj: Mapping[str, Any], field: str) -> WorkloadStatus:
    ready = active = suspended = 0
    for child in mappings(obj, "status", field):
        ready += integer(child, "ready")
        active += integer(child, "active")
        suspended += integer(child, "suspended")
    if ready:
        return RUNNING
    if suspended and not active:
        return SUSPENDED
    return PENDING


def job(obj: Mapping[str, Any]) -> WorkloadStatus:
    # FailureTarget / SuccessCriteriaMet come first (Kubernetes 1.31+): the controller sets them
    # as soon as the outcome is decided, and Failed / Complete only after pods terminate.
    done = _terminal_conditions(
        obj, ("SuccessCriteriaMet", "Complete"), ("FailureTarget", "Failed")
    )
    if done is not None:
        return done
    if flag(obj, "spec", "suspend") or condition(obj, "Suspended") is not None:
        return SUSPENDED
    if integer(obj, "status", "ready"):
        return RUNNING
    return PENDING


def jobset(obj: Mapping[str, Any]) -> WorkloadStatus:
    done = _terminal_conditions(obj, ("Completed",), ("Failed",))
    if done is not None:
        return done
    terminal = text(obj, "status", "terminalState")
    if terminal == "Completed":
        return WorkloadStatus(Phase.SUCCEEDED)
    if terminal == "Failed":
        return WorkloadStatus(Phase.FAILED)
    if flag(obj, "spec", "suspend") or condition(obj, "Suspended") is not None:
        return SUSPENDED
    return _child_jobs(obj, "replicatedJobsStatus")


def pytorchjob(obj: Mapping[str, Any]) -> WorkloadStatus:
    done = _terminal_conditions(obj, ("Succeeded",), ("Failed",))
    if done is not None:
        return done
    if flag(obj, "spec", "runPolicy", "suspend") or condition(obj, "Suspended") is not None:
        return SUSPENDED
    if condition(obj, "Running") is not None:
        return RUNNING
    restarting = condition(obj, "Restarting")
    if restarting is not None:
        # training-operator `pkg/controller.v1/pytorch/pytorchjob_controller.go`
        # (`UpdateJobStatus`): a replica failed with a retryable exit code and is recreated;
        # Failed follows only once `runPolicy.backoffLimit` is exceeded.
        return _from_condition(Phase.RESTARTING, restarting)
    return PENDING


def trainjob(obj: Mapping[str, Any]) -> WorkloadStatus:
    done = _terminal_conditions(obj, ("Complete",), ("Failed",))
    if done is not None:
        return done
    if flag(obj, "spec", "suspend") or condition(obj, "Suspended") is not None:
        return SUSPENDED
    return _child_jobs(obj, "jobsStatus")


def leaderworkerset(obj: Mapping[str, Any]) -> WorkloadStatus:
    if condition(obj, "Available") is not None or integer(obj, "status", "readyReplicas"):
        return RUNNING
    return PENDING


_RAY_SUCCEEDED = "SUCCEEDED"


def rayjob(obj: Mapping[str, Any]) -> WorkloadStatus:
    # kuberay `ray-operator/apis/ray/v1/rayjob_types.go` (`IsJobDeploymentTerminal`): only the
    # deployment statuses Complete and Failed are final. With `spec.backoffLimit > 0` a failed
    # attempt is `jobStatus: FAILED` with `jobDeploymentStatus: Retrying`, then New ("") while
    # `rayjob_controller.go` (`Reconcile`, case Retrying) deletes the cluster and starts over:
    # FAILED alone is an attempt, not the outcome. Only a controller old enough to write no
    # `jobDeploymentStatus` at all has jobStatus as its outcome.
    status = dig(obj, "status")
    deployment = text(obj, "status", "jobDeploymentStatus")
    job_status = text(obj, "status", "jobStatus")
    reason = text(obj, "status", "reason")
    message = text(obj, "status", "message")
    modern = isinstance(status, Mapping) and "jobDeploymentStatus" in status
    if deployment in ("Failed", "ValidationFailed"):
        return WorkloadStatus(Phase.FAILED, reason or deployment or job_status, message)
    # `JobDeploymentStatusNew` is "" and `omitempty`: after Retrying the controller resets
    # jobStatus, reason and message too, so a retry about to start is a status with only the
    # `failed` count (some write the constant's name, "New").
    retry = integer(obj, "status", "failed") > 0 and deployment in (None, "New")
    if (
        deployment == "Retrying"
        or (modern and deployment is None and job_status == "FAILED")
        or (deployment == "New" and job_status == "FAILED")
        or (retry and job_status in (None, "FAILED", "PENDING"))
    ):
        return WorkloadStatus(Phase.RESTARTING, "Retrying", message)
    if job_status == "STOPPED" and deployment in (None, "Complete"):
        return WorkloadStatus(Phase.STOPPED, reason or job_status, message)
    if job_status == _RAY_SUCCEEDED and deployment in (None, "Complete"):
        return WorkloadStatus(Phase.SUCCEEDED, reason, message)
    if deployment == "Complete":
        # Complete without a SUCCEEDED job: the Ray job ended some other way (an older
        # KubeRay writes Complete for a FAILED job without retries).
        return WorkloadStatus(Phase.FAILED, reason or job_status or "Complete", message)
    if job_status == "FAILED" and not modern:
        return WorkloadStatus(Phase.FAILED, reason or job_status, message)
    if flag(obj, "spec", "suspend") or deployment in ("Suspended", "Suspending"):
        return SUSPENDED
    if job_status == "RUNNING" or (deployment == "Running" and job_status not in (None, "PENDING")):
        return RUNNING
    return PENDING


def volcano_job(obj: Mapping[str, Any]) -> WorkloadStatus:
    state = dig(obj, "status", "state")
    phase = text(state, "phase")
    reason = text(state, "reason")
    message = text(state, "message")
    if phase == "Completed":
        return WorkloadStatus(Phase.SUCCEEDED, reason, message)
    # Terminated is "ended by an external event" (eviction, a failed task's policy).
    if phase in ("Failed", "Terminated"):
        return WorkloadStatus(Phase.FAILED, reason or phase, message)
    # Aborted is the outcome of `vcctl job suspend` / an abort action: someone stopped it.
    if phase in ("Aborting", "Aborted", "Terminating"):
        return WorkloadStatus(Phase.STOPPED, reason or phase, message)
    if phase in ("Running", "Completing", "Restarting"):
        return RUNNING
    if phase == "Pending" and not any(
        integer(obj, "status", counter) for counter in ("pending", "running", "failed")
    ):
        # No pods yet: the job's queue has not admitted its gang (minAvailable) yet. Once pods
        # exist, Pending means they are starting, and a stuck pod must be able to fail the run.
        return SUSPENDED
    return PENDING


def generic(obj: Mapping[str, Any]) -> WorkloadStatus:
    done = _terminal_conditions(obj, ("Succeeded", "Complete", "Completed"), ("Failed",))
    if done is not None:
        return done
    if flag(obj, "spec", "suspend") or condition(obj, "Suspended") is not None:
        return SUSPENDED
    if any(condition(obj, c) is not None for c in ("Running", "Available", "Ready")):
        return RUNNING
    return PENDING


Reader = Callable[[Mapping[str, Any]], WorkloadStatus]

# (API group, kind) -> reader. Versions are left out on purpose: status shapes are stable across
# the served versions of these CRDs (RayJob v1alpha1 and v1 share them).
READERS: dict[tuple[str, str], Reader] = {
    ("batch", "Job"): job,
    ("jobset.x-k8s.io", "JobSet"): jobset,
    ("kubeflow.org", "PyTorchJob"): pytorchjob,
    ("trainer.kubeflow.org", "TrainJob"): trainjob,
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): leaderworkerset,
    ("ray.io", "RayJob"): rayjob,
    ("batch.volcano.sh", "Job"): volcano_job,
}


def group_kind(obj: Mapping[str, Any]) -> tuple[str, str]:
    api_version = text(obj, "apiVersion") or ""
    group = api_version.rpartition("/")[0]
    return group, text(obj, "kind") or ""


def workload_status(obj: Mapping[str, Any]) -> WorkloadStatus:
    """The phase of any supported workload; unknown kinds use the common conditions."""
    status = READERS.get(group_kind(obj), generic)(obj)
    if status.phase in (Phase.SUCCEEDED, Phase.FAILED, Phase.STOPPED):
        return status
    if Meta(obj).deletion_timestamp:
        # Being deleted (foreground propagation or finalizers) before it finished.
        return WorkloadStatus(Phase.STOPPED, "Deleting", "the workload is being deleted")
    return status
