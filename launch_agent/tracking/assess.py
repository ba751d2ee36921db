"""A workload, its pods, their Events and the time -> `(RunState, Diagnosis | None)`.

This is the one decision the informers feed and `launch-agent diagnose` prints: the runtime
calls `assess` on every event for a run with the latest cached objects and reports what
changed; `diagnose` calls it with what it read from the cluster or a `kubectl get -o json`
dump. It is a pure function of its inputs (the clock is a parameter), so it is tested with
tables of real-shaped status objects and with hypothesis, never with a cluster.

Precedence, strongest first:

1. The workload's own terminal signal (Job conditions, JobSet Completed/Failed, RayJob
   jobDeploymentStatus, ...). Pods can only *explain* it: a Job that failed with
   BackoffLimitExceeded is reported as "OOMKilled in container main" when its pod says so,
   and as preempted when its pods were taken away by the cluster (preemption, drain, lost
   node, node shutdown) and none failed on its own. Success is never overridden by a pod:
   terminal states are absorbing whatever pod events arrive, in whatever order.
2. Deletion in progress -> stopped.
3. Kueue deactivated the run's Workload (`spec.active: false`) -> failed with Kueue's reason:
   the job stays suspended for good.
4. Suspended (Kueue or the agent's quota) -> queued; pods of a suspended workload are leftovers.
   So is a workload whose Kueue Workload is not admitted while none of its pods runs (Kueue
   gates the pods of the kinds it cannot suspend).
5. A pod stuck in a way no controller resolves (a permanent pull error, a transient one or
   CreateContainerConfigError past its grace, InvalidImageName, unschedulable past the
   deadline) -> failed, so the agent can delete the workload and free its slot.
6. Running if the workload or any pod says so. Otherwise starting, until the start deadline
   (`start_timeout`, from creation or the last resume): then failed, with the Warning Events
   that explain it ("did not start within 30m: 3 FailedCreate events: ...").

The code says the same: `JUDGEMENTS` lists one function per judgement in this order, each
returning an `Assessment` or None (no opinion), and `assess` takes the first answer.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from launch_agent.model.config import TrackingConfig
from launch_agent.model.run_state import Diagnosis, Reason, RunState, Severity
from launch_agent.tracking import events as ev
from launch_agent.tracking import jobset_startup, kueue, ray, volcano
from launch_agent.tracking.fields import mappings, name_of, one_line, text, timestamp
from launch_agent.tracking.pods import (
    NO_MAIN,
    Graces,
    MainContainer,
    PodSummary,
    summarize_pods,
)
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


_CREATION = frozenset(
    {
        Reason.FAILED_CREATE,
        Reason.JOB_CREATION_FAILED,
        Reason.TRAINJOB_RESOURCES_CREATION_FAILED,
    }
)

# `steady_until` of a run that time alone never changes.
NEVER = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class TrackingPolicy:
    """The knobs of tracking; defaults match `docs/architecture.md` and `TrackingConfig`."""

    # How long a pod may stay unschedulable before the run is failed. Long enough for a cluster
    # autoscaler to add a node (typically 1-3 minutes), short enough not to hold a slot forever.
    unschedulable_deadline: timedelta = timedelta(minutes=10)
    # tracking.start_timeout_seconds: no pod running this long after creation (or resume).
    start_timeout: timedelta = timedelta(seconds=1800)
    # tracking.image_pull_grace_seconds: a transient pull error fails the run after this.
    image_pull_grace: timedelta = timedelta(seconds=300)
    # tracking.container_config_grace_seconds: CreateContainerConfigError fails after this.
    container_config_grace: timedelta = timedelta(seconds=300)

    @classmethod
    def from_config(
        cls, tracking: TrackingConfig, start_timeout: float | None = None
    ) -> TrackingPolicy:
        """The policy of an agent configured with `tracking` (`runtime/agent.py`, `diagnose`)."""
        return cls(
            unschedulable_deadline=timedelta(seconds=tracking.unschedulable_timeout_seconds),
            start_timeout=timedelta(seconds=start_timeout or tracking.start_timeout_seconds),
            image_pull_grace=timedelta(seconds=tracking.image_pull_grace_seconds),
            container_config_grace=timedelta(seconds=tracking.container_config_grace_seconds),
        )

    @property
    def graces(self) -> Graces:
        return Graces(self.image_pull_grace, self.container_config_grace)


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
    message = head + (f": {_said(status.message)}" if status.message else "")
    return Diagnosis(reason, message, Severity.TERMINAL, detail=status.message)


def _said(message: str) -> str:
    """A controller's own message, bounded: a RayJob's is Ray's, with up to 20,000 characters
    of the driver's log (ray `dashboard/modules/job/job_supervisor.py`: "Job entrypoint command
    failed with exit code 1. Last available logs (truncated to 20,000 chars): ..."), whose end
    is the traceback that explains it. `detail` keeps the whole of it."""
    return one_line(message, 500)


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


def _failed(workload: Mapping[str, Any], status: WorkloadStatus, summary: PodSummary) -> Assessment:
    own = _workload_failure(workload, status)
    if own.reason is Reason.DEADLINE_EXCEEDED:
        return Assessment(RunState.FAILED, own)
    disruption = summary.disruption
    failed_itself = _disruption_rule(workload, status)
    if failed_itself is not None:
        # The Job's own record that a disrupted pod failed it (the rule render adds): it holds
        # after the pod is deleted, and whatever its other pods did, that pod decided.
        if disruption is not None and disruption.pod == failed_itself.pod:
            return Assessment(RunState.PREEMPTED, _terminal(disruption))
        return Assessment(RunState.PREEMPTED, failed_itself)
    if disruption is not None and summary.own_failure is None:
        # Every failed pod was taken away by the cluster: infrastructure, requeue the run.
        return Assessment(RunState.PREEMPTED, _terminal(disruption))
    if own.reason in _EXPLAINABLE:
        explanation = summary.own_failure or summary.failure
        if explanation is not None:
            return Assessment(RunState.FAILED, _terminal(explanation))
    return Assessment(RunState.FAILED, own)


# kubernetes `pkg/controller/job/pod_failure_policy.go` (`matchPodFailurePolicy`, an
# `onPodConditions` rule with action FailJob): the message of the Job's FailureTarget / Failed.
_DISRUPTION_RULE = re.compile(
    r"Pod (?P<namespace>[^/\s]+)/(?P<pod>\S+) has condition DisruptionTarget matching FailJob"
    r" rule at index \d+"
)


def _disruption_rule(workload: Mapping[str, Any], status: WorkloadStatus) -> Diagnosis | None:
    """A batch/v1 Job failed by a podFailurePolicy rule on `DisruptionTarget`: the cluster took
    a pod away (render/disruption_rule.py adds the rule so that this survives the pod)."""
    if group_kind(workload) != ("batch", "Job") or status.reason != "PodFailurePolicy":
        return None
    found = _DISRUPTION_RULE.fullmatch((status.message or "").strip())
    if found is None:
        return None
    pod = found["pod"]
    return Diagnosis(
        Reason.PREEMPTED,
        f"pod {pod} was taken away by the cluster (DisruptionTarget), and {describe_kind(workload)}"
        f" failed on it by its podFailurePolicy: {_said(status.message or '')}",
        Severity.TERMINAL,
        pod=pod,
        detail=status.message,
    )


def _started_at(
    workload: Mapping[str, Any], kueue_workload: Mapping[str, Any] | None
) -> datetime | None:
    """When the run last became free to start: its creation, or its last resume (a Suspended
    condition turning False, a Job's `status.startTime`, Kueue's admission), whichever is
    latest. A run queued for hours in Kueue is not late the moment it is admitted."""
    times = [timestamp(Meta(workload).creation_timestamp)]
    times.append(timestamp(text(workload, "status", "startTime")))
    for cond in mappings(workload, "status", "conditions"):
        if cond.get("type") == "Suspended" and cond.get("status") == "False":
            times.append(timestamp(cond.get("lastTransitionTime")))
    if kueue_workload is not None:
        for cond in mappings(kueue_workload, "status", "conditions"):
            if cond.get("type") in ("Admitted", "QuotaReserved") and cond.get("status") == "True":
                times.append(timestamp(cond.get("lastTransitionTime")))
    known = [t for t in times if t is not None]
    return max(known) if known else None


def steady_until(
    workload: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    policy: TrackingPolicy = DEFAULT_POLICY,
    *,
    kueue_workload: Mapping[str, Any] | None = None,
) -> datetime | None:
    """Until when `assess` of these same inputs cannot answer differently for a later `now`:
    a run without pods changes with time alone only at its start deadline (`_late`; never
    when nothing says when it became free to start). None when it may change at any moment:
    pods have deadlines and graces of their own, and Kueue's admission moves the start."""
    if pods or kueue_workload is not None:
        return None
    since = _started_at(workload, None)
    if since is None:
        return NEVER
    try:
        return since + policy.start_timeout
    except OverflowError:  # a start time near year 9999: its deadline never comes
        return NEVER


def _event_diagnosis(found: ev.Explanation, severity: Severity, head: str = "") -> Diagnosis:
    return Diagnosis(
        found.reason,
        head + ev.sentence(found),
        severity,
        pod=found.about.removeprefix("pod ") if found.about.startswith("pod ") else None,
        detail=found.message,
    )


def _admitted_gang(workload: Mapping[str, Any], found: ev.Explanation | None) -> bool:
    """A Volcano Job without pods reads as queued (its gang is not admitted yet), but one
    whose controller records FailedCreate was admitted: volcano
    `pkg/controllers/job/job_controller_actions.go` (`syncJob`) creates pods only once the
    PodGroup is Inqueue. It is starting, and the start deadline applies."""
    return (
        group_kind(workload)[0] == "batch.volcano.sh"
        and found is not None
        and found.reason is Reason.FAILED_CREATE
    )


def _kueue(workload: Mapping[str, Any], kueue_workload: Mapping[str, Any]) -> Assessment | None:
    status = kueue.workload_status(kueue_workload)
    if status.state is kueue.KueueState.DEACTIVATED:
        why = f"{status.reason}: {status.message}" if status.message else status.reason
        return Assessment(
            RunState.FAILED,
            Diagnosis(
                Reason.DEACTIVATED,
                f"Kueue deactivated the Workload of {describe_kind(workload)} ({why}); it stays"
                " suspended and is never admitted again",
                Severity.TERMINAL,
                detail=status.message or None,
            ),
        )
    return None


def _queued(kueue_workload: Mapping[str, Any] | None) -> Assessment:
    if kueue_workload is None:
        return Assessment(RunState.QUEUED, None)
    status = kueue.workload_status(kueue_workload)
    said = kueue.describe(status)
    if said is None or status.state not in (
        kueue.KueueState.PENDING,
        kueue.KueueState.INADMISSIBLE,
        kueue.KueueState.CHECKS,
        kueue.KueueState.EVICTED,
    ):
        return Assessment(RunState.QUEUED, None)
    reason = (
        Reason.INADMISSIBLE
        if status.state is kueue.KueueState.INADMISSIBLE
        else Reason.PREEMPTED
        if status.state is kueue.KueueState.EVICTED
        else Reason.PENDING
    )
    return Assessment(
        RunState.QUEUED,
        Diagnosis(reason, said, Severity.WARNING, detail=status.message or None),
    )


@dataclass
class _Seen:
    """What every judgement reads: the inputs of `assess` and what is derived from them once
    (derived lazily where only the later judgements need it). Not frozen: a frozen init costs
    more than some of the judgements, and this is built for every event of every run."""

    workload: Mapping[str, Any]
    pods: Sequence[Mapping[str, Any]]
    now: datetime
    policy: TrackingPolicy
    status: WorkloadStatus
    summary: PodSummary
    about: Sequence[ev.Event]
    graces: Graces
    kueue_workload: Mapping[str, Any] | None
    main: MainContainer
    started_at: datetime | None

    @functools.cached_property
    def found(self) -> ev.Explanation | None:
        """What the Warning Events say best."""
        return ev.explain(self.about)

    @functools.cached_property
    def stage(self) -> str | None:
        """A JobSet's replicatedJobs still starting in order (`jobset_startup.waiting`)."""
        return jobset_startup.waiting(self.workload)

    @property
    def warning(self) -> Diagnosis | None:
        """The most important pod warning."""
        return self.summary.warnings[0] if self.summary.warnings else None


Judgement = Callable[[_Seen], Assessment | None]


def assess(
    workload: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    now: datetime,
    policy: TrackingPolicy = DEFAULT_POLICY,
    *,
    events: Iterable[object] = (),
    kueue_workload: Mapping[str, Any] | None = None,
    main: MainContainer = NO_MAIN,
    started_at: datetime | None = None,
) -> Assessment:
    """The run's state and the one diagnosis that best explains it (None when all is well).

    `events`: Warning Events (core/v1 or events.k8s.io/v1) about the workload, the objects its
    controller made and its pods; others are ignored. `kueue_workload`: Kueue's Workload for
    it, when Kueue admits it. `main`: the run's main container. `started_at`: when the run was
    free to start, when the caller knows better than the objects.

    The first of `JUDGEMENTS` (the module docstring's precedence, in order) that has an answer
    decides; a run none of them judges is starting.
    """
    about = ev.related(ev.warnings(events), workload, pods)
    graces = dataclasses.replace(policy.graces, pull_errors=ev.pull_errors(about))
    seen = _Seen(
        workload,
        pods,
        now,
        policy,
        workload_status(workload),
        summarize_pods(pods, now, policy.unschedulable_deadline, graces=graces, main=main),
        about,
        graces,
        kueue_workload,
        main,
        started_at,
    )
    for judge in JUDGEMENTS:
        verdict = judge(seen)
        if verdict is not None:
            return verdict
    return _starting(seen)


# --- 1. the workload's own terminal signal -----------------------------------------------------


def _succeeded(seen: _Seen) -> Assessment | None:
    # Never overridden by a pod: terminal states are absorbing.
    return Assessment(RunState.SUCCEEDED, None) if seen.status.phase is Phase.SUCCEEDED else None


def _failed_itself(seen: _Seen) -> Assessment | None:
    workload, status = seen.workload, seen.status
    if status.phase is not Phase.FAILED:
        return None
    short = volcano.shortfalls(workload) if _is_volcano(workload, status) else ()
    if short:
        return _volcano_short(
            workload,
            status,
            short,
            seen.pods,
            now=seen.now,
            policy=seen.policy,
            graces=seen.graces,
            main=seen.main,
        )
    return _failed(workload, status, seen.summary)


# --- 2. stopped, or deletion in progress -------------------------------------------------------


def _stopped(seen: _Seen) -> Assessment | None:
    workload, status = seen.workload, seen.status
    if status.phase is not Phase.STOPPED:
        return None
    own = seen.summary.own_failure
    if (
        group_kind(workload)[0] == "batch.volcano.sh"
        and own is not None
        and own.reason in (Reason.OOM_KILLED, Reason.EXIT_CODE)
    ):
        # volcano `pkg/controllers/job/state/running.go` (`Execute`, AbortJobAction): a
        # `PodFailed -> AbortJob` policy aborts the job the way `vcctl job suspend` does;
        # a failed container says which of the two it was.
        return Assessment(RunState.FAILED, _terminal(own))
    what = describe_kind(workload)
    message = f"{what} was stopped" + (f": {_said(status.message)}" if status.message else "")
    return Assessment(
        RunState.STOPPED,
        Diagnosis(Reason.STOPPED, message, Severity.TERMINAL, detail=status.message),
    )


# --- 3. Kueue deactivated its Workload ---------------------------------------------------------


def _deactivated(seen: _Seen) -> Assessment | None:
    if seen.kueue_workload is None:
        return None
    return _kueue(seen.workload, seen.kueue_workload)


# --- 4. suspended, or waiting in Kueue ---------------------------------------------------------


def _suspended(seen: _Seen) -> Assessment | None:
    if seen.status.phase is not Phase.SUSPENDED or _admitted_gang(seen.workload, seen.found):
        return None
    queued = _queued(seen.kueue_workload)
    if queued.diagnosis is None and seen.found is not None:
        # A Volcano gang its scheduler cannot place says so only in PodGroup Events.
        return Assessment(RunState.QUEUED, _event_diagnosis(seen.found, Severity.WARNING))
    return queued


def _gated_by_kueue(seen: _Seen) -> Assessment | None:
    """Kueue holds kinds it cannot suspend (LeaderWorkerSet, plain pods) by gating their pods
    (`kueue.x-k8s.io/admission`, kueue `pkg/controller/jobs/pod/pod_controller.go` `gate`):
    the workload looks like it is starting, but it waits in a queue, and the start deadline
    must not fail it."""
    if (
        seen.kueue_workload is not None
        and kueue.workload_status(seen.kueue_workload).state.waiting
        and seen.status.phase is not Phase.RUNNING
        and not seen.summary.running
    ):
        return _queued(seen.kueue_workload)
    return None


# --- 5. a pod stuck for good -------------------------------------------------------------------


def _stuck(seen: _Seen) -> Assessment | None:
    stuck = seen.summary.stuck
    return Assessment(RunState.FAILED, stuck) if stuck is not None else None


# --- 6. running, or starting until the start deadline ------------------------------------------


def _restarting(seen: _Seen) -> Assessment | None:
    status = seen.status
    if status.phase is not Phase.RESTARTING:
        return None
    what = describe_kind(seen.workload)
    said = f": {_said(status.message)}" if status.message else ""
    retry = Diagnosis(
        Reason.RESTARTING,
        f"{what} is retrying a failed attempt ({status.reason}){said}",
        Severity.WARNING,
        detail=status.message,
    )
    return Assessment(RunState.RUNNING, seen.warning or retry)


def _running(seen: _Seen) -> Assessment | None:
    # A JobSet creating its replicatedJobs in order (startupPolicy, dependsOn) has not started
    # its main work while an earlier stage runs: starting, under the start deadline.
    if seen.stage is not None:
        return None
    if seen.status.phase is Phase.RUNNING or seen.summary.running:
        return Assessment(RunState.RUNNING, seen.warning)
    return None


def _late(seen: _Seen) -> Assessment | None:
    """Not started within `start_timeout` of its creation or last resume: failed, with what
    explains it best (pods that cannot be created, then what a pod shows, then other Events)."""
    stage = seen.stage
    since = seen.started_at or _started_at(seen.workload, seen.kueue_workload)
    started = seen.summary.started and stage is None
    if since is None or started or seen.now - since < seen.policy.start_timeout:
        return None
    head = f"{describe_kind(seen.workload)} did not start within"
    head += f" {_duration(seen.policy.start_timeout)}"
    found, warning = seen.found, seen.warning
    # Without Events (expired, or an agent that restarted), a RayJob's mirrored RayCluster
    # status still says which pod could not be created (`tracking/ray.py`).
    refused = ray.replica_failure(seen.workload) if found is None else None
    if refused is not None:
        return Assessment(RunState.FAILED, _refused(refused, Severity.TERMINAL, head + ": "))
    if found is not None and (found.reason in _CREATION or warning is None):
        return Assessment(RunState.FAILED, _event_diagnosis(found, Severity.TERMINAL, head + ": "))
    if warning is not None:
        return Assessment(
            RunState.FAILED,
            _terminal(dataclasses.replace(warning, message=f"{head}: {warning.message}")),
        )
    said = f"{head}: {stage}" if stage is not None else f"{head} and no Event says why"
    return Assessment(RunState.FAILED, Diagnosis(Reason.START_TIMEOUT, said, Severity.TERMINAL))


def _starting(seen: _Seen) -> Assessment:
    """Starting, with the most important pod warning, else what the Events or the RayCluster
    say."""
    warning, found = seen.warning, seen.found
    if warning is None and found is not None:
        warning = _event_diagnosis(found, Severity.WARNING)
    refused = ray.replica_failure(seen.workload) if found is None else None
    if warning is None and refused is not None:
        warning = _refused(refused, Severity.WARNING)
    return Assessment(RunState.STARTING, warning)


# The precedence of the module docstring, strongest first.
JUDGEMENTS: tuple[Judgement, ...] = (
    _succeeded,  # 1
    _failed_itself,
    _stopped,  # 2
    _deactivated,  # 3
    _suspended,  # 4
    _gated_by_kueue,
    _stuck,  # 5
    _restarting,  # 6
    _running,
    _late,
)


def _refused(found: ray.ReplicaFailure, severity: Severity, head: str = "") -> Diagnosis:
    return Diagnosis(Reason.FAILED_CREATE, head + found.sentence(), severity, detail=found.message)


def _is_volcano(workload: Mapping[str, Any], status: WorkloadStatus) -> bool:
    # The phase Failed (not Terminated, which a policy writes), of a Volcano Job.
    return group_kind(workload)[0] == "batch.volcano.sh" and status.reason == "Failed"


def _volcano_short(
    workload: Mapping[str, Any],
    status: WorkloadStatus,
    short: tuple[volcano.Shortfall, ...],
    pods: Sequence[Mapping[str, Any]],
    *,
    now: datetime,
    policy: TrackingPolicy,
    graces: Graces,
    main: MainContainer,
) -> Assessment:
    """A Volcano Job failed by a task short of its own minAvailable (`tracking/volcano.py`):
    only that task's pods explain it, and the message says which task."""
    why = "; ".join(s.sentence() for s in short)
    mine = volcano.pods_of(short, list(pods))
    summary = summarize_pods(mine, now, policy.unschedulable_deadline, graces=graces, main=main)
    state, diag = _failed(workload, dataclasses.replace(status, message=why), summary)
    if diag is not None and diag.pod is not None:
        diag = dataclasses.replace(
            diag, message=f"{diag.message} ({describe_kind(workload)}: {why})"
        )
    return Assessment(state, diag)


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


def _duration(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [
        f"{hours}h" if hours else "",
        f"{minutes}m" if minutes else "",
        f"{seconds}s" if seconds else "",
    ]
    return "".join(parts) or "0s"
