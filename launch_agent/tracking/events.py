"""Warning Events -> why a run does not start, when its objects' status cannot say.

Some failures leave no trace in any status: a pod the Job controller cannot create (namespace
ResourceQuota exceeded, missing ServiceAccount, PodSecurity admission, LimitRange) is only a
`FailedCreate` Event on the Job (kubernetes `pkg/controller/job/job_controller.go`, `manageJob`
-> `recorder.Event(job, v1.EventTypeWarning, FailedCreatePodReason, ...)` in
`pkg/controller/controller_utils.go` `CreatePods`); JobSet's controller records
`JobCreationFailed` (`pkg/controllers/jobset_controller.go`), the Trainer
`TrainJobResourcesCreationFailed` (`pkg/controller/trainjob_controller.go`); the kubelet's
volume manager records `FailedMount` / `FailedAttachVolume` on a pod that stays in
ContainerCreating; the scheduler records `FailedScheduling`. This module reads them.

Both Event APIs are read: core/v1 (`involvedObject`, `message`, `count`, `lastTimestamp`) and
events.k8s.io/v1 (`regarding`, `note`, `deprecatedCount`, `series.count`, `eventTime`). Only
`Warning` Events count: Normal ones describe progress. Pure: plain objects in, values out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from launch_agent.model.run_state import Reason
from launch_agent.tracking.fields import dig, integer, one_line, text, timestamp
from launch_agent.tracking.views import Meta

# Event reason -> the run's Reason, in the order they explain a run that does not start: a pod
# that cannot be created explains more than one that cannot be scheduled.
EXPLAINING: dict[str, Reason] = {
    "FailedCreate": Reason.FAILED_CREATE,
    # kubeflow/training-operator `pkg/controller.v1/common/pod.go` (`FailedCreatePodReason`).
    "FailedCreatePod": Reason.FAILED_CREATE,
    # kuberay `ray-operator/controllers/ray/utils/constant.go` (`FailedToCreateHeadPod`, ...).
    "FailedToCreateHeadPod": Reason.FAILED_CREATE,
    "FailedToCreateWorkerPod": Reason.FAILED_CREATE,
    "FailedToCreateRayCluster": Reason.FAILED_CREATE,
    "JobCreationFailed": Reason.JOB_CREATION_FAILED,
    "TrainJobResourcesCreationFailed": Reason.TRAINJOB_RESOURCES_CREATION_FAILED,
    "FailedMount": Reason.FAILED_MOUNT,
    "FailedAttachVolume": Reason.FAILED_ATTACH_VOLUME,
    "FailedScheduling": Reason.UNSCHEDULABLE,
    # Volcano's PodGroup controller (`pkg/scheduler/framework/job_updater.go`).
    "Unschedulable": Reason.UNSCHEDULABLE,
}
_ORDER = {reason: i for i, reason in enumerate(EXPLAINING)}


@dataclass(frozen=True, slots=True)
class Event:
    """One Warning Event, whichever API it came from."""

    reason: str
    message: str
    kind: str
    name: str
    namespace: str
    uid: str
    count: int
    last: datetime | None


def normalize(obj: Mapping[str, Any]) -> Event | None:
    """A core/v1 or events.k8s.io/v1 Event as `Event`; None if it is not a Warning Event."""
    if text(obj, "type") != "Warning":
        return None
    about = dig(obj, "involvedObject")
    if not isinstance(about, Mapping):
        about = dig(obj, "regarding")
    count = (
        integer(obj, "series", "count")
        or integer(obj, "count")
        or integer(obj, "deprecatedCount")
        or 1
    )
    last = (
        timestamp(dig(obj, "series", "lastObservedTime"))
        or timestamp(obj.get("lastTimestamp"))
        or timestamp(obj.get("deprecatedLastTimestamp"))
        or timestamp(obj.get("eventTime"))
        or timestamp(obj.get("firstTimestamp"))
        or timestamp(Meta(obj).creation_timestamp)
    )
    return Event(
        reason=text(obj, "reason") or "",
        message=text(obj, "message") or text(obj, "note") or "",
        kind=text(about, "kind") or "",
        name=text(about, "name") or "",
        namespace=text(about, "namespace") or Meta(obj).namespace,
        uid=text(about, "uid") or "",
        count=count,
        last=last,
    )


def warnings(events: Iterable[object]) -> list[Event]:
    return [e for e in (normalize(o) for o in events if isinstance(o, Mapping)) if e is not None]


def related(
    events: Iterable[Event], workload: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]
) -> list[Event]:
    """The Events about the workload, the objects its controller made for it, or its pods.

    Children are named after their parent by every controller we track (a JobSet's Jobs
    `<jobset>-<replicatedJob>-<index>`, a RayJob's RayCluster `<rayjob>-<suffix>`, a
    LeaderWorkerSet's StatefulSets `<lws>`, `<lws>-<group>`, a Volcano PodGroup
    `<job>-<uid>`), so an Event about `<name>` or `<name>-...` in the namespace is about it.
    """
    meta = Meta(workload)
    kind = text(workload, "kind") or ""
    uid = text(workload, "metadata", "uid")
    pod_names = {Meta(p).name for p in pods}
    out = []
    for event in events:
        if meta.namespace and event.namespace and event.namespace != meta.namespace:
            continue
        # `train-2` beside `train`: another workload of the same kind. (Same name and another
        # uid is an earlier incarnation, or a capture whose uids were rewritten: its creation
        # failures still describe this namespace's refusals.)
        if (
            uid
            and event.uid
            and event.kind == kind
            and event.uid != uid
            and event.name != meta.name
        ):
            continue
        if (
            (uid and event.uid == uid)
            or (event.kind == "Pod" and event.name in pod_names)
            or (event.kind != "Pod" and _child_name(event.name, meta.name))
        ):
            out.append(event)
    return out


def _child_name(name: str, parent: str) -> bool:
    return bool(parent) and (name == parent or name.startswith(parent + "-"))


@dataclass(frozen=True, slots=True)
class Explanation:
    """The Events that best explain a run that does not start, summed up."""

    reason: Reason
    event_reason: str
    count: int
    message: str
    about: str


def explain(events: Iterable[Event]) -> Explanation | None:
    """The most telling kind of Warning Event (see `EXPLAINING`), its total count and its
    latest message verbatim; None when no Event explains anything."""
    by_reason: dict[str, list[Event]] = {}
    for event in events:
        if event.reason in EXPLAINING:
            by_reason.setdefault(event.reason, []).append(event)
    if not by_reason:
        return None
    chosen = min(by_reason, key=lambda r: _ORDER[r])
    group = by_reason[chosen]
    latest = max(group, key=lambda e: (e.last.isoformat() if e.last else "", e.count, e.message))
    about = f"{latest.kind.lower()} {latest.name}".strip()
    return Explanation(
        EXPLAINING[chosen], chosen, sum(e.count for e in group), latest.message, about
    )


def sentence(found: Explanation) -> str:
    """`3 FailedCreate events: pods "x" is forbidden: exceeded quota: ...`"""
    plural = "event" if found.count == 1 else "events"
    return f"{found.count} {found.event_reason} {plural}: {_one_line(readable(found.message))}"


# A Go `%#v` of an API error, as Volcano's job controller prints it into its FailedCreate
# Event (`pkg/controllers/job/job_controller_actions.go` `syncJob`: "failed to create pod %s,
# err: %#v"): several hundred characters of struct before the API server's own message.
_GO_STATUS_ERROR = re.compile(
    r'&errors\.StatusError\{ErrStatus:v1\.Status\{.*?Message:"((?:[^"\\]|\\.)*)".*?Code:\d+\}\}',
    re.DOTALL,
)


def readable(message: str) -> str:
    """`message` with every Go-printed StatusError replaced by its `Message`, unquoted."""

    def unquote(match: re.Match[str]) -> str:
        return re.sub(r"\\(.)", r"\1", match.group(1))

    return _GO_STATUS_ERROR.sub(unquote, message)


def _one_line(value: str, limit: int = 400) -> str:
    return one_line(value, limit)


def pull_errors(events: Iterable[Event]) -> dict[str, str]:
    """Pod name -> the latest pull failure the kubelet recorded for it (`Failed` Events,
    `pkg/kubelet/images/image_manager.go` `pullImage`: "Failed to pull image ...")."""
    latest: dict[str, Event] = {}
    for event in events:
        if event.kind != "Pod" or event.reason not in ("Failed", "ErrImagePull"):
            continue
        if "failed to pull" not in event.message.lower():
            continue
        known = latest.get(event.name)
        stamp = event.last.isoformat() if event.last else ""
        if known is None or stamp >= (known.last.isoformat() if known.last else ""):
            latest[event.name] = event
    return {name: event.message for name, event in latest.items()}
