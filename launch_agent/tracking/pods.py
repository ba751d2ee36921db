"""Pod status -> what is wrong with a run's pods, in words a person can act on.

Workload controllers summarise pods into counts and conditions and lose the *why*: a Job that
failed says "BackoffLimitExceeded", while its pod says "container main was OOMKilled". This
module reads the pods (like Prefect's pure `diagnostics.py`) and returns every problem it finds
as a `Diagnosis`, plus the two facts the state needs: is any pod running, and is any pod stuck
in a way no controller will ever resolve (ImagePullBackOff, InvalidImageName,
CreateContainerConfigError, unschedulable past the deadline). Those stuck pods are what the
reference agent never notices: they hold a `max_jobs` slot forever.

Whether a problem is terminal depends on the pod alone only for stuck pods. A container that
exited non-zero or was OOMKilled is a warning here; it becomes the run's terminal diagnosis only
when the workload itself has failed (the Job may still retry), which `assess` decides.

Every function is order-independent: pods are sorted before they are read, so the same set of
pods gives the same answer whatever order the informer delivered them in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from launch_agent.model.run_state import Diagnosis, Reason, Severity
from launch_agent.tracking.fields import dig, mappings, name_of, optional_int, text, timestamp
from launch_agent.tracking.views import creation_order

# Waiting reasons the kubelet retries forever without a chance of success: fail the run now.
STUCK_WAITING = {
    "ImagePullBackOff": Reason.IMAGE_PULL,
    "InvalidImageName": Reason.INVALID_IMAGE_NAME,
    "CreateContainerConfigError": Reason.CREATE_CONTAINER_CONFIG_ERROR,
}
# Waiting reasons that are worth a warning but may clear up: ErrImagePull is the first failed
# pull (a registry hiccup retries fine; a missing image turns into ImagePullBackOff seconds
# later), CrashLoopBackOff ends in the Job's own backoff limit.
WARNING_WAITING = {
    "ErrImagePull": Reason.IMAGE_PULL,
    "CreateContainerError": Reason.CREATE_CONTAINER_ERROR,
    "CrashLoopBackOff": Reason.CRASH_LOOP_BACK_OFF,
}
# DisruptionTarget reasons that mean "the cluster wanted the node or the resources back".
PREEMPTION_REASONS = frozenset({"PreemptionByScheduler", "PreemptionByKueue"})

# Which diagnosis explains a failed workload best, most specific first.
_FAILURE_RANK = {
    Reason.OOM_KILLED: 0,
    Reason.IMAGE_PULL: 1,
    Reason.INVALID_IMAGE_NAME: 1,
    Reason.CREATE_CONTAINER_CONFIG_ERROR: 1,
    Reason.EVICTED: 2,
    Reason.PREEMPTED: 2,
    Reason.CRASH_LOOP_BACK_OFF: 3,
    Reason.EXIT_CODE: 4,
    Reason.CREATE_CONTAINER_ERROR: 5,
    Reason.UNSCHEDULABLE: 6,
}


@dataclass(frozen=True, slots=True)
class PodSummary:
    running: bool
    # A problem no controller will resolve: the agent fails the run.
    stuck: Diagnosis | None
    # The cluster took a pod away (preemption, drain, eviction).
    disruption: Diagnosis | None
    # The best explanation if the workload fails (OOMKilled beats a bare exit code).
    failure: Diagnosis | None
    # Everything worth telling the submitter, most important first, without duplicates.
    warnings: tuple[Diagnosis, ...]


def _sorted_pods(pods: Iterable[object]) -> list[Mapping[str, Any]]:
    return sorted((p for p in pods if isinstance(p, Mapping)), key=creation_order)


def _container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = list(mappings(pod, "status", "initContainerStatuses"))
    found += mappings(pod, "status", "containerStatuses")
    return found


def _terminated(
    pod: str, cs: Mapping[str, Any], term: object, image: str | None, restarted: bool
) -> Diagnosis | None:
    container = text(cs, "name")
    code = optional_int(term, "exitCode")
    reason = text(term, "reason")
    again = " (it restarted)" if restarted else ""
    if reason == "OOMKilled":
        return Diagnosis(
            Reason.OOM_KILLED,
            f"container {container} in pod {pod} was OOMKilled: it used more memory than its"
            f" limit{again}; raise the memory limit or use less memory",
            Severity.WARNING,
            pod=pod,
            container=container,
            image=image,
            exit_code=code,
        )
    if code:
        detail = text(term, "message")
        return Diagnosis(
            Reason.EXIT_CODE,
            f"container {container} in pod {pod} exited with code {code}{again}"
            + (f": {_one_line(detail)}" if detail else ""),
            Severity.WARNING,
            pod=pod,
            container=container,
            image=image,
            exit_code=code,
            detail=detail,
        )
    return None


def _waiting(pod: str, cs: Mapping[str, Any], image: str | None) -> Diagnosis | None:
    waiting = dig(cs, "state", "waiting")
    reason = text(waiting, "reason")
    if reason is None:
        return None
    container = text(cs, "name")
    detail = text(waiting, "message")
    tail = f": {_one_line(detail)}" if detail else ""
    if reason in ("ImagePullBackOff", "ErrImagePull"):
        message = f"cannot pull image {image} for container {container} in pod {pod}{tail}"
    elif reason == "InvalidImageName":
        message = f"image name {image!r} of container {container} in pod {pod} is invalid"
    elif reason == "CreateContainerConfigError":
        message = (
            f"container {container} in pod {pod} cannot be created{tail}"
            " (check the Secrets and ConfigMaps it references)"
        )
    elif reason == "CrashLoopBackOff":
        last = dig(cs, "lastState", "terminated")
        code = optional_int(last, "exitCode")
        what = text(last, "reason") or (f"exit code {code}" if code is not None else "a failure")
        message = f"container {container} in pod {pod} keeps crashing (last: {what})"
    elif reason == "CreateContainerError":
        message = f"container {container} in pod {pod} cannot be created{tail}"
    else:
        return None
    stuck = STUCK_WAITING.get(reason)
    category = stuck or WARNING_WAITING[reason]
    exit_code = None
    if category is Reason.CRASH_LOOP_BACK_OFF:
        exit_code = optional_int(cs, "lastState", "terminated", "exitCode")
    return Diagnosis(
        category,
        message,
        Severity.TERMINAL if stuck else Severity.WARNING,
        pod=pod,
        container=container,
        image=image,
        exit_code=exit_code,
        detail=detail,
    )


def _unschedulable(
    pod: Mapping[str, Any], name: str, now: datetime, deadline: timedelta
) -> Diagnosis | None:
    for cond in mappings(pod, "status", "conditions"):
        if cond.get("type") != "PodScheduled" or cond.get("status") != "False":
            continue
        if cond.get("reason") != "Unschedulable":
            return None
        since = timestamp(cond.get("lastTransitionTime")) or timestamp(
            dig(pod, "metadata", "creationTimestamp")
        )
        detail = text(cond, "message")
        waited = now - since if since is not None else timedelta(0)
        over = waited >= deadline
        message = f"pod {name} cannot be scheduled" + (
            f" for {_duration(waited)}" if since is not None else ""
        )
        message += f": {_one_line(detail)}" if detail else ""
        if over:
            message += f" (gave up after {_duration(deadline)})"
        return Diagnosis(
            Reason.UNSCHEDULABLE,
            message,
            Severity.TERMINAL if over else Severity.WARNING,
            pod=name,
            detail=detail,
        )
    return None


def _disruption(pod: Mapping[str, Any], name: str) -> Diagnosis | None:
    if text(pod, "status", "phase") == "Failed" and text(pod, "status", "reason") == "Evicted":
        detail = text(pod, "status", "message")
        return Diagnosis(
            Reason.EVICTED,
            f"pod {name} was evicted" + (f": {_one_line(detail)}" if detail else ""),
            Severity.WARNING,
            pod=name,
            detail=detail,
        )
    for cond in mappings(pod, "status", "conditions"):
        if cond.get("type") != "DisruptionTarget" or cond.get("status") != "True":
            continue
        why = text(cond, "reason") or "Disruption"
        detail = text(cond, "message")
        preempted = why in PREEMPTION_REASONS
        return Diagnosis(
            Reason.PREEMPTED if preempted else Reason.EVICTED,
            f"pod {name} was {'preempted' if preempted else 'evicted'} ({why})"
            + (f": {_one_line(detail)}" if detail else ""),
            Severity.WARNING,
            pod=name,
            detail=detail,
        )
    return None


def diagnose_pod(pod: Mapping[str, Any], now: datetime, deadline: timedelta) -> list[Diagnosis]:
    """Every problem visible in one pod, in a fixed order."""
    name = name_of(pod)
    found: list[Diagnosis] = []
    for diag in (_disruption(pod, name), _unschedulable(pod, name, now, deadline)):
        if diag is not None:
            found.append(diag)
    for cs in _container_statuses(pod):
        image = text(cs, "image")
        for diag in (
            _waiting(name, cs, image),
            _terminated(name, cs, dig(cs, "state", "terminated"), image, restarted=False),
            _terminated(name, cs, dig(cs, "lastState", "terminated"), image, restarted=True),
        ):
            if diag is not None:
                found.append(diag)
    return found


def summarize_pods(pods: Sequence[object], now: datetime, deadline: timedelta) -> PodSummary:
    """What a run's pods say, independent of the order they are given in."""
    running = False
    stuck: list[Diagnosis] = []
    disruptions: list[Diagnosis] = []
    every: list[Diagnosis] = []
    for pod in _sorted_pods(pods):
        if text(pod, "status", "phase") == "Running":
            running = True
        for diag in diagnose_pod(pod, now, deadline):
            every.append(diag)
            if diag.terminal:
                stuck.append(diag)
            if diag.reason in (Reason.PREEMPTED, Reason.EVICTED):
                disruptions.append(diag)
    return PodSummary(
        running=running,
        stuck=_best(stuck),
        disruption=_best(disruptions),
        failure=_best([d for d in every if d.reason in _FAILURE_RANK]),
        warnings=_unique(sorted(every, key=_rank_key)),
    )


def _rank_key(diag: Diagnosis) -> tuple[int, int, str, str]:
    # Terminal first, then by how well the reason explains a failure, then stably by text.
    return (
        0 if diag.terminal else 1,
        _FAILURE_RANK.get(diag.reason, 9),
        diag.key,
        diag.message,
    )


def _best(diags: list[Diagnosis]) -> Diagnosis | None:
    return min(diags, key=_rank_key) if diags else None


def _unique(diags: list[Diagnosis]) -> tuple[Diagnosis, ...]:
    seen: set[str] = set()
    out: list[Diagnosis] = []
    for diag in diags:
        if diag.key not in seen:
            seen.add(diag.key)
            out.append(diag)
    return tuple(out)


def _one_line(value: str, limit: int = 300) -> str:
    flat = " ".join(value.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _duration(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"
