"""A workload, its pods and the time -> `(RunState, Diagnosis | None)`.

This is the one decision the informers feed: the runtime calls `assess` on every event for a
run with the latest cached objects and reports what changed. It is a pure function of its
inputs (the clock is a parameter), so it is tested with tables of real-shaped status objects
and with hypothesis, never with a cluster.

Precedence, strongest first:

1. The workload's own terminal signal (Job conditions, JobSet Completed/Failed, RayJob
   jobStatus, ...). Pods can only *explain* it: a Job that failed with BackoffLimitExceeded is
   reported as "OOMKilled in container main" when its pod says so, and as preempted when its
   pod was preempted. Success is never overridden by a pod: terminal states are absorbing
   whatever pod events arrive, in whatever order.
2. Deletion in progress -> stopped.
3. Suspended (Kueue or the agent's quota) -> queued; pods of a suspended workload are leftovers.
4. A pod stuck in a way no controller resolves (ImagePullBackOff, InvalidImageName,
   CreateContainerConfigError, unschedulable past the deadline) -> failed, so the agent can
   delete the workload and free its slot.
5. Running if the workload or any pod says so, else starting; the most important pod warning
   rides along.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from launch_agent.model.run_state import Diagnosis, Reason, RunState, Severity
from launch_agent.tracking.fields import name_of, timestamp
from launch_agent.tracking.pods import summarize_pods
from launch_agent.tracking.views import Meta
from launch_agent.tracking.workloads import Phase, WorkloadStatus, group_kind, workload_status

_JOB_REASONS = {
    "BackoffLimitExceeded": Reason.BACKOFF_LIMIT_EXCEEDED,
    "DeadlineExceeded": Reason.DEADLINE_EXCEEDED,
    "PodFailurePolicy": Reason.POD_FAILURE_POLICY,
}
# Workload failure reasons a pod can explain better; a deadline is its own explanation (the
# pods' exit codes are a consequence of being killed).
_EXPLAINABLE = frozenset(
    {Reason.BACKOFF_LIMIT_EXCEEDED, Reason.POD_FAILURE_POLICY, Reason.WORKLOAD_FAILED}
)


@dataclass(frozen=True, slots=True)
class TrackingPolicy:
    """The knobs of tracking; defaults match `docs/architecture.md`."""

    # How long a pod may stay unschedulable before the run is failed. Long enough for a cluster
    # autoscaler to add a node (typically 1-3 minutes), short enough not to hold a slot forever.
    unschedulable_deadline: timedelta = timedelta(minutes=10)
    # tracking.start_timeout_seconds: no pod running this long after creation.
    start_timeout: timedelta = timedelta(seconds=1800)


DEFAULT_POLICY = TrackingPolicy()


class Assessment(NamedTuple):
    state: RunState
    diagnosis: Diagnosis | None


def describe_kind(obj: Mapping[str, Any]) -> str:
    group, kind = group_kind(obj)
    # Volcano's kind is plain "Job": say which Job it is.
    label = "Volcano Job" if group == "batch.volcano.sh" else (kind or "workload")
    return f"{label} {name_of(obj)}"


def _workload_failure(obj: Mapping[str, Any], status: WorkloadStatus) -> Diagnosis:
    reason = _JOB_REASONS.get(status.reason or "", Reason.WORKLOAD_FAILED)
    what = describe_kind(obj)
    if reason is Reason.DEADLINE_EXCEEDED:
        head = f"{what} ran past its deadline (activeDeadlineSeconds) and was stopped"
    elif reason is Reason.BACKOFF_LIMIT_EXCEEDED:
        head = f"{what} failed: its pods failed more often than its backoffLimit allows"
    else:
        head = f"{what} failed" + (f" ({status.reason})" if status.reason else "")
    message = head + (f": {status.message}" if status.message else "")
    return Diagnosis(reason, message, Severity.TERMINAL, detail=status.message)


def _terminal(diag: Diagnosis) -> Diagnosis:
    return Diagnosis(
        diag.reason,
        diag.message,
        Severity.TERMINAL,
        pod=diag.pod,
        container=diag.container,
        image=diag.image,
        exit_code=diag.exit_code,
        detail=diag.detail,
    )


def assess(
    workload: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: datetime,
    policy: TrackingPolicy = DEFAULT_POLICY,
    *,
    events: Iterable[object] = (),
    started_at: datetime | None = None,
) -> Assessment:
    """The run's state and the one diagnosis that best explains it (None when all is well).

    `events`: Warning Events about the workload, the objects its controller made and its pods
    (the runtime's Events informer files them per run). `started_at`: when the run was free to
    start, when the caller knows better than the workload's creationTimestamp.
    """
    status = workload_status(workload)
    summary = summarize_pods(pods, now, policy.unschedulable_deadline)
    if status.phase is Phase.SUCCEEDED:
        return Assessment(RunState.SUCCEEDED, None)
    if status.phase is Phase.FAILED:
        own = _workload_failure(workload, status)
        disruption = summary.disruption
        if (
            disruption is not None
            and disruption.reason is Reason.PREEMPTED
            and own.reason is not Reason.DEADLINE_EXCEEDED
        ):
            return Assessment(RunState.PREEMPTED, _terminal(disruption))
        if own.reason in _EXPLAINABLE and summary.failure is not None:
            return Assessment(RunState.FAILED, _terminal(summary.failure))
        return Assessment(RunState.FAILED, own)
    if status.phase is Phase.STOPPED:
        what = describe_kind(workload)
        message = f"{what} was stopped" + (f": {status.message}" if status.message else "")
        return Assessment(
            RunState.STOPPED,
            Diagnosis(Reason.STOPPED, message, Severity.TERMINAL, detail=status.message),
        )
    if status.phase is Phase.SUSPENDED:
        return Assessment(RunState.QUEUED, None)
    if summary.stuck is not None:
        return Assessment(RunState.FAILED, summary.stuck)
    warning = summary.warnings[0] if summary.warnings else None
    if status.phase is Phase.RUNNING or summary.running:
        return Assessment(RunState.RUNNING, warning)
    since = started_at or timestamp(Meta(workload).creation_timestamp)
    if since is not None and now - since >= policy.start_timeout and not _ever_ran(pods):
        return Assessment(RunState.FAILED, _start_timeout(workload, events, warning, policy))
    return Assessment(RunState.STARTING, warning)


def _ever_ran(pods: Sequence[Mapping[str, Any]]) -> bool:
    """A container of these pods ran at some point: the run started, whatever it does now
    (a pod ended by SIGTERM while its Job's terminal condition waits for it)."""
    for pod in pods:
        status = pod.get("status") or {}
        for cs in status.get("containerStatuses") or []:
            for key in ("state", "lastState"):
                state = cs.get(key) or {}
                if "running" in state or (state.get("terminated") or {}).get("startedAt"):
                    return True
    return False


def _start_timeout(
    workload: Mapping[str, Any],
    events: Iterable[object],
    warning: Diagnosis | None,
    policy: TrackingPolicy,
) -> Diagnosis:
    """A run that never started: the latest Warning Event says why, in its writer's words."""
    minutes = int(policy.start_timeout.total_seconds() // 60)
    head = f"{describe_kind(workload)} did not start within {minutes}m"
    latest: Mapping[str, Any] | None = None
    for event in events:
        if not isinstance(event, Mapping) or event.get("type") != "Warning":
            continue
        if latest is None or str(event.get("lastTimestamp") or "") >= str(
            latest.get("lastTimestamp") or ""
        ):
            latest = event
    if latest is not None:
        count = latest.get("count") or 1
        said = " ".join(str(latest.get("message") or "").split())
        message = f"{head}: {count} {latest.get('reason')} event(s): {said}"
        return Diagnosis(Reason.START_TIMEOUT, message, Severity.TERMINAL, detail=said)
    if warning is not None:
        return Diagnosis(
            Reason.START_TIMEOUT,
            f"{head}: {warning.message}",
            Severity.TERMINAL,
            pod=warning.pod,
            container=warning.container,
            image=warning.image,
            detail=warning.detail,
        )
    return Diagnosis(Reason.START_TIMEOUT, f"{head} and no Event says why", Severity.TERMINAL)


def assess_deleted(
    workload: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: datetime,
    policy: TrackingPolicy = DEFAULT_POLICY,
) -> Assessment:
    """The state of a run whose workload is gone (a DELETED event, or missing after a relist).

    A workload that had already finished keeps its outcome: the TTL controller deleting a
    completed Job is not a failure (the reference agent reports it as one). Anything else was
    deleted before it finished.
    """
    last = assess(workload, pods, now, policy)
    if last.state.terminal:
        return last
    what = describe_kind(workload)
    return Assessment(
        RunState.STOPPED,
        Diagnosis(
            Reason.DELETED,
            f"{what} was deleted before it finished",
            Severity.TERMINAL,
        ),
    )
