"""Pod status -> what is wrong with a run's pods, in words a person can act on.

Workload controllers summarise pods into counts and conditions and lose the *why*: a Job that
failed says "BackoffLimitExceeded", while its pod says "container main was OOMKilled". This
module reads the pods (like Prefect's pure `diagnostics.py`) and returns every problem it finds
as a `Diagnosis`, plus the facts the state needs: is any pod running, is any pod stuck in a way
no controller will resolve, and did the cluster take a pod away (a disruption: requeue, not
the run's fault).

Whether a problem is terminal depends on the pod alone only for stuck pods. A container that
exited non-zero or was OOMKilled is a warning here; it becomes the run's terminal diagnosis only
when the workload itself has failed (the Job may still retry), which `assess` decides.

Blame goes to the run's main container first (the one running the run's image, or the queue
spec's primary container, `MainContainer`), then other containers, then sidecars (native
sidecars: initContainers with `restartPolicy: Always`, and the well-known mesh proxies): a
sidecar killed with 137/143 after the SIGTERM that ends every pod never explains a failure the
main container's own exit code explains. Exit codes compare as numbers.

Every function is order-independent: pods are sorted before they are read, so the same set of
pods gives the same answer whatever order the informer delivered them in.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from launch_agent.model import labels as L
from launch_agent.model.run_state import Diagnosis, Reason, Severity
from launch_agent.tracking.fields import (
    dig,
    mappings,
    name_of,
    one_line,
    optional_int,
    text,
    timestamp,
)
from launch_agent.tracking.views import Meta, creation_order

# Waiting reasons the kubelet retries forever without a chance of success: fail the run now.
STUCK_WAITING = {
    "ImagePullBackOff": Reason.IMAGE_PULL,
    "InvalidImageName": Reason.INVALID_IMAGE_NAME,
    "CreateContainerConfigError": Reason.CREATE_CONTAINER_CONFIG_ERROR,
}
# Waiting reasons that are worth a warning but may clear up: CrashLoopBackOff ends in the Job's
# own backoff limit; CreateContainerError is usually a runtime hiccup.
WARNING_WAITING = {
    "ErrImagePull": Reason.IMAGE_PULL,
    "CreateContainerError": Reason.CREATE_CONTAINER_ERROR,
    "CrashLoopBackOff": Reason.CRASH_LOOP_BACK_OFF,
}
# Pull failures that cannot recover by retrying, as containerd, CRI-O and the registries word
# them (containerd `remotes/docker/resolver.go` "not found", distribution's error codes
# MANIFEST_UNKNOWN / NAME_UNKNOWN / UNAUTHORIZED / DENIED, kubelet `pkg/kubelet/images` "invalid
# reference format"). Anything else (429 Too Many Requests, i/o timeout, 5xx, connection
# refused) is transient: the kubelet retries with back-off and often succeeds.
PERMANENT_PULL = (
    "manifest unknown",
    "not found",
    "notfound",
    "name unknown",
    "unauthorized",
    "denied",
    "authentication required",
    "invalid reference format",
    # A registry refusing the pull for want of permission (Artifact Registry, ECR, Harbor).
    "403 forbidden",
    "not authorized",
    "repository does not exist",
    "no such host",
)

# DisruptionTarget reasons (kubernetes `pkg/apis/core/types.go`, the Pod condition
# `DisruptionTarget`): the cluster took the pod away; none of them is the run's fault.
# `PreemptionByKubeScheduler` is the 1.25 spelling of `PreemptionByScheduler`.
DISRUPTION_REASONS = {
    "PreemptionByScheduler": "preempted by the scheduler for a higher-priority pod",
    "PreemptionByKubeScheduler": "preempted by the scheduler for a higher-priority pod",
    "PreemptionByKueue": "preempted by Kueue",
    # pkg/registry/core/pod/storage/eviction.go (`EvictionREST.Create`): drains, descheduler.
    "EvictionByEvictionAPI": "evicted through the Eviction API (a node drain or the descheduler)",
    # pkg/controller/tainteviction/taint_eviction.go: a NoExecute taint (node not ready).
    "DeletionByTaintManager": "deleted by the taint manager (its node became NotReady or was"
    " tainted NoExecute)",
    # pkg/controller/podgc/gc_controller.go (`gcOrphaned`, `gcUnscheduledTerminating`).
    "DeletionByPodGC": "deleted by the pod garbage collector (its node is gone)",
    # pkg/kubelet/eviction (node pressure) and pkg/kubelet/nodeshutdown.
    "TerminationByKubelet": "terminated by the kubelet (node pressure or node shutdown)",
}
PREEMPTION_REASONS = frozenset(
    {"PreemptionByScheduler", "PreemptionByKubeScheduler", "PreemptionByKueue"}
)
# pod.status.reason of a graceful node shutdown (pkg/kubelet/nodeshutdown/
# nodeshutdown_manager_linux.go: `nodeShutdownReason = "Terminated"`, older "Shutdown").
NODE_SHUTDOWN_REASONS = frozenset({"Terminated", "Shutdown", "NodeShutdown"})
# Kubelet evictions that are the pod's own doing (pkg/kubelet/eviction/helpers.go,
# `evictionMessage` / `localStorageEviction`): exceeding its own ephemeral-storage limits.
_OWN_EVICTION = (
    "exceeds the total limit",
    "exceeded its local ephemeral storage limit",
    "exceeds the limit",
)
# pod.status.reason values of a Failed pod that are not kubelet admission refusals.
_NOT_ADMISSION = frozenset({"Evicted", "DeadlineExceeded", "NodeLost", *NODE_SHUTDOWN_REASONS})
# Exit codes of a container killed by the SIGTERM/SIGKILL that ends every pod.
KILLED_CODES = frozenset({137, 143})
# Sidecars that are not declared as native sidecars but are injected into every pod of a mesh.
KNOWN_SIDECARS = frozenset(
    {
        "istio-proxy",
        "linkerd-proxy",
        "envoy",
        "envoy-sidecar",
        "cloud-sql-proxy",
        "vault-agent",
        "vault-agent-init",
        "fluent-bit",
        "datadog-agent",
        "otel-collector",
    }
)

# Which diagnosis explains a failed workload best, most specific first.
_FAILURE_RANK = {
    Reason.OOM_KILLED: 0,
    Reason.IMAGE_PULL: 1,
    Reason.INVALID_IMAGE_NAME: 1,
    Reason.CREATE_CONTAINER_CONFIG_ERROR: 1,
    Reason.ADMISSION_REFUSED: 2,
    Reason.EVICTED: 2,
    Reason.PREEMPTED: 2,
    Reason.CRASH_LOOP_BACK_OFF: 3,
    Reason.EXIT_CODE: 4,
    Reason.CREATE_CONTAINER_ERROR: 5,
    Reason.UNSCHEDULABLE: 6,
}


@dataclass(frozen=True, slots=True)
class MainContainer:
    """Which container runs the run itself: by name (the queue spec's primary container) or by
    image (the run's image). Empty: the first regular container that is not a known sidecar."""

    names: frozenset[str] = field(default_factory=frozenset)
    image: str | None = None


NO_MAIN = MainContainer()


def main_container_of(workload: Mapping[str, Any]) -> MainContainer:
    """The run's main container as render recorded it on the workload (its annotations), so the
    running agent and `diagnose` blame the same container; NO_MAIN for other objects."""
    meta = Meta(workload)
    names = meta.annotation(L.MAIN_CONTAINERS)
    image = meta.annotation(L.RUN_IMAGE)
    if names is None and image is None:
        return NO_MAIN
    found = frozenset(n for n in (names or "").split(",") if n)
    return MainContainer(found, image)


@dataclass(frozen=True, slots=True)
class Graces:
    """How long recoverable pod states may last before the run is failed (None: at once, the
    build pods' behaviour, where a Kaniko pod that cannot pull fails the build)."""

    image_pull: timedelta | None = None
    container_config: timedelta | None = None
    # Pod name -> the kubelet's latest "Failed to pull image" Event message: the back-off
    # message of older kubelets (`Back-off pulling image "x"`) does not say why.
    pull_errors: Mapping[str, str] = field(default_factory=dict)


IMMEDIATE = Graces()


@dataclass(frozen=True, slots=True)
class PodSummary:
    running: bool
    # A problem no controller will resolve: the agent fails the run.
    stuck: Diagnosis | None
    # The cluster took a pod away (preemption, drain, lost node, node shutdown).
    disruption: Diagnosis | None
    # The best explanation if the workload fails (OOMKilled beats a bare exit code).
    failure: Diagnosis | None
    # Everything worth telling the submitter, most important first, without duplicates.
    warnings: tuple[Diagnosis, ...]
    # The best explanation among pods the cluster did not take away.
    own_failure: Diagnosis | None = None
    # Some container of some pod ran at some point: the run started (no start deadline).
    started: bool = False


def _sorted_pods(pods: Iterable[object]) -> list[Mapping[str, Any]]:
    return sorted((p for p in pods if isinstance(p, Mapping)), key=creation_order)


def _container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    found = list(mappings(pod, "status", "initContainerStatuses"))
    found += mappings(pod, "status", "containerStatuses")
    return found


def _roles(pod: Mapping[str, Any], main: MainContainer) -> dict[str, int]:
    """Container name -> blame order: 0 the main container, 1 others, 2 sidecars."""
    roles: dict[str, int] = {}
    for init in mappings(pod, "spec", "initContainers"):
        name = text(init, "name") or ""
        native = text(init, "restartPolicy") == "Always"
        roles[name] = 2 if native or name in KNOWN_SIDECARS else 1
    regular = list(mappings(pod, "spec", "containers"))
    chosen = False
    for c in regular:
        name = text(c, "name") or ""
        if name in main.names or (main.image is not None and text(c, "image") == main.image):
            roles[name] = 0
            chosen = True
    for c in regular:
        name = text(c, "name") or ""
        if name in roles:
            continue
        if name in KNOWN_SIDECARS:
            roles[name] = 2
        elif not chosen and not main.names and main.image is None:
            roles[name] = 0
            chosen = True
        else:
            roles[name] = 1
    return roles


def _role(roles: Mapping[str, int], diag: Diagnosis, main: MainContainer) -> int:
    if diag.container is None:
        # A pod-level problem (disruption, admission, scheduling) ranks with "other containers":
        # below the main container's own failure, above a sidecar's.
        return 1
    if diag.container in roles:
        return roles[diag.container]
    # A status without a spec (a trimmed dump): judge by the inputs and the name alone.
    if diag.container in main.names or (main.image and diag.image == main.image):
        return 0
    return 2 if diag.container in KNOWN_SIDECARS else 1


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


# The back-off message of kubelets before 1.33 (`pkg/kubelet/images/image_manager.go`,
# `Back-off pulling image %q`): only the kubelet's Failed Event says why.
_BACK_OFF_ONLY = re.compile(r'Back-off pulling image "[^"]*"\.?')


def _names_no_cause(detail: str | None) -> bool:
    return detail is None or _BACK_OFF_ONLY.fullmatch(detail.strip()) is not None


def permanent_pull(message: str | None) -> bool:
    """True when a pull error's message says retrying cannot help."""
    low = (message or "").lower()
    return any(word in low for word in PERMANENT_PULL)


def _since(pod: Mapping[str, Any]) -> datetime | None:
    # The kubelet starts pulling once it accepted the pod (status.startTime).
    return timestamp(dig(pod, "status", "startTime")) or timestamp(Meta(pod).creation_timestamp)


def _waiting(
    pod: Mapping[str, Any],
    cs: Mapping[str, Any],
    image: str | None,
    now: datetime,
    graces: Graces,
) -> Diagnosis | None:
    name = name_of(pod)
    waiting = dig(cs, "state", "waiting")
    reason = text(waiting, "reason")
    if reason is None:
        return None
    container = text(cs, "name")
    detail = text(waiting, "message")
    tail = f": {_one_line(detail)}" if detail else ""
    grace: timedelta | None = None
    if reason in ("ImagePullBackOff", "ErrImagePull"):
        message = f"cannot pull image {image} for container {container} in pod {name}{tail}"
        grace = graces.image_pull
    elif reason == "InvalidImageName":
        message = f"image name {image!r} of container {container} in pod {name} is invalid"
    elif reason == "CreateContainerConfigError":
        message = (
            f"container {container} in pod {name} cannot be created{tail}"
            " (check the Secrets and ConfigMaps it references)"
        )
        grace = graces.container_config
    elif reason == "CrashLoopBackOff":
        last = dig(cs, "lastState", "terminated")
        code = optional_int(last, "exitCode")
        what = text(last, "reason") or (f"exit code {code}" if code is not None else "a failure")
        message = f"container {container} in pod {name} keeps crashing (last: {what})"
    elif reason == "CreateContainerError":
        message = f"container {container} in pod {name} cannot be created{tail}"
    else:
        return None
    category = STUCK_WAITING.get(reason) or WARNING_WAITING[reason]
    terminal = reason in STUCK_WAITING
    if reason in ("ImagePullBackOff", "ErrImagePull") and graces.image_pull is not None:
        # The kubelet alternates ErrImagePull and ImagePullBackOff while it retries: which of
        # the two it shows says nothing; the registry's words do.
        said = graces.pull_errors.get(name)
        permanent = permanent_pull(detail) or permanent_pull(said)
        if said and _names_no_cause(detail) and said not in message:
            message += f" ({_one_line(said)})"
        terminal = permanent or _outlasted(pod, now, graces.image_pull)
        if terminal and not permanent:
            message += f" (still failing after {_duration(graces.image_pull)})"
    elif reason == "CreateContainerConfigError" and grace is not None:
        terminal = _outlasted(pod, now, grace)
        if terminal:
            message += f" (still failing after {_duration(grace)})"
    exit_code = None
    if category is Reason.CRASH_LOOP_BACK_OFF:
        exit_code = optional_int(cs, "lastState", "terminated", "exitCode")
    return Diagnosis(
        category,
        message,
        Severity.TERMINAL if terminal else Severity.WARNING,
        pod=name,
        container=container,
        image=image,
        exit_code=exit_code,
        detail=detail,
    )


def _outlasted(pod: Mapping[str, Any], now: datetime, grace: timedelta) -> bool:
    since = _since(pod)
    return since is not None and now - since >= grace


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


def _disruption(pod: Mapping[str, Any], name: str) -> tuple[Diagnosis, bool] | None:
    """What took the pod away, and whether it was the infrastructure (True) or the pod's own
    doing (an ephemeral-storage eviction, False)."""
    phase = text(pod, "status", "phase")
    reason = text(pod, "status", "reason")
    detail = text(pod, "status", "message")
    tail = f": {_one_line(detail)}" if detail else ""
    for cond in mappings(pod, "status", "conditions"):
        if cond.get("type") != "DisruptionTarget" or cond.get("status") != "True":
            continue
        why = text(cond, "reason") or "Disruption"
        said = text(cond, "message")
        if reason == "Evicted" and _own_eviction(detail):
            break
        preempted = why in PREEMPTION_REASONS
        what = DISRUPTION_REASONS.get(why, "taken away by the cluster")
        return (
            Diagnosis(
                Reason.PREEMPTED if preempted else Reason.EVICTED,
                f"pod {name} was {what} ({why})" + (f": {_one_line(said)}" if said else tail),
                Severity.WARNING,
                pod=name,
                detail=said or detail,
            ),
            True,
        )
    if phase == "Failed" and reason == "Evicted":
        own = _own_eviction(detail)
        return (
            Diagnosis(
                Reason.EVICTED,
                f"pod {name} was evicted by the kubelet{tail}",
                Severity.WARNING,
                pod=name,
                detail=detail,
            ),
            not own,
        )
    if phase == "Failed" and reason in NODE_SHUTDOWN_REASONS:
        return (
            Diagnosis(
                Reason.EVICTED,
                f"pod {name} was terminated by a node shutdown ({reason}){tail}",
                Severity.WARNING,
                pod=name,
                detail=detail,
            ),
            True,
        )
    return None


def _own_eviction(message: str | None) -> bool:
    low = (message or "").lower()
    return any(words in low for words in _OWN_EVICTION)


def _admission_refused(pod: Mapping[str, Any], name: str) -> Diagnosis | None:
    # pkg/kubelet/lifecycle/predicate.go (`Admit`): a refused pod is Failed with the predicate's
    # reason (OutOfnvidia.com/gpu, OutOfcpu, NodeAffinity, ...) or UnexpectedAdmissionError from
    # a device plugin, before any container ran.
    if text(pod, "status", "phase") != "Failed":
        return None
    reason = text(pod, "status", "reason")
    if reason is None or reason in _NOT_ADMISSION:
        return None
    if any(
        dig(cs, "state", "terminated") or dig(cs, "state", "running")
        for cs in _container_statuses(pod)
    ):
        return None
    detail = text(pod, "status", "message")
    node = text(pod, "spec", "nodeName")
    where = f" on node {node}" if node else ""
    return Diagnosis(
        Reason.ADMISSION_REFUSED,
        f"the kubelet{where} refused pod {name} at admission ({reason})"
        + (f": {_one_line(detail)}" if detail else ""),
        Severity.WARNING,
        pod=name,
        detail=detail,
    )


def diagnose_pod(
    pod: Mapping[str, Any],
    now: datetime,
    deadline: timedelta,
    graces: Graces = IMMEDIATE,
) -> list[Diagnosis]:
    """Every problem visible in one pod, in a fixed order."""
    return [d for d, _ in _diagnose_pod(pod, now, deadline, graces)]


def _diagnose_pod(
    pod: Mapping[str, Any], now: datetime, deadline: timedelta, graces: Graces
) -> list[tuple[Diagnosis, bool]]:
    """(diagnosis, is an infrastructure disruption) for every problem of one pod."""
    name = name_of(pod)
    found: list[tuple[Diagnosis, bool]] = []
    disrupted = _disruption(pod, name)
    if disrupted is not None:
        found.append(disrupted)
    for diag in (_admission_refused(pod, name), _unschedulable(pod, name, now, deadline)):
        if diag is not None:
            found.append((diag, False))
    # A pod being deleted (graceful deletion after a suspend, a stop, a disruption) ends with
    # its containers killed: 137/143 then is the deletion, not the run.
    ending = bool(Meta(pod).deletion_timestamp) or disrupted is not None
    for cs in _container_statuses(pod):
        image = text(cs, "image")
        for diag in (
            _waiting(pod, cs, image, now, graces),
            _terminated(name, cs, dig(cs, "state", "terminated"), image, restarted=False),
            _terminated(name, cs, dig(cs, "lastState", "terminated"), image, restarted=True),
        ):
            if diag is None:
                continue
            if ending and diag.reason is Reason.EXIT_CODE and diag.exit_code in KILLED_CODES:
                continue
            if Meta(pod).deletion_timestamp and diag.reason in STUCK_OR_WAITING:
                continue
            found.append((diag, False))
    return found


STUCK_OR_WAITING = frozenset({*STUCK_WAITING.values(), *WARNING_WAITING.values()})


def summarize_pods(
    pods: Sequence[object],
    now: datetime,
    deadline: timedelta,
    *,
    graces: Graces = IMMEDIATE,
    main: MainContainer = NO_MAIN,
) -> PodSummary:
    """What a run's pods say, independent of the order they are given in."""
    running = False
    stuck: list[tuple[Diagnosis, int]] = []
    disruptions: list[tuple[Diagnosis, int]] = []
    every: list[tuple[Diagnosis, int]] = []
    own: list[tuple[Diagnosis, int]] = []
    started = False
    for pod in _sorted_pods(pods):
        if text(pod, "status", "phase") == "Running" and not Meta(pod).deletion_timestamp:
            running = True
        started = started or running or any(_ran(cs) for cs in _container_statuses(pod))
        roles = _roles(pod, main)
        found = _diagnose_pod(pod, now, deadline, graces)
        pod_disrupted = any(infra for _, infra in found)
        for diag, infra in found:
            ranked = (diag, _role(roles, diag, main))
            every.append(ranked)
            if diag.terminal:
                stuck.append(ranked)
            if infra:
                disruptions.append(ranked)
            elif not pod_disrupted and diag.reason in _FAILURE_RANK:
                own.append(ranked)
    return PodSummary(
        running=running,
        stuck=_best(stuck),
        disruption=_best(disruptions),
        failure=_best([r for r in every if r[0].reason in _FAILURE_RANK]),
        warnings=_unique([d for d, _ in sorted(every, key=_rank_key)]),
        own_failure=_best(own),
        started=started,
    )


def _ran(cs: Mapping[str, Any]) -> bool:
    return any(
        dig(cs, *path) is not None
        for path in (
            ("state", "running"),
            ("state", "terminated", "startedAt"),
            ("lastState", "terminated", "startedAt"),
        )
    )


def _rank_key(ranked: tuple[Diagnosis, int]) -> tuple[int, int, int, int, int, str, str]:
    # Terminal first, then the main container before others and sidecars, then by how well the
    # reason explains a failure, a real exit code before the kill of a pod's ending, the code as
    # a number, then stably by text.
    diag, role = ranked
    code = diag.exit_code if diag.exit_code is not None else -1
    return (
        0 if diag.terminal else 1,
        role,
        _FAILURE_RANK.get(diag.reason, 9),
        1 if code in KILLED_CODES else 0,
        code,
        diag.key,
        diag.message,
    )


def _best(diags: list[tuple[Diagnosis, int]]) -> Diagnosis | None:
    return min(diags, key=_rank_key)[0] if diags else None


def _unique(diags: list[Diagnosis]) -> tuple[Diagnosis, ...]:
    seen: set[str] = set()
    out: list[Diagnosis] = []
    for diag in diags:
        if diag.key not in seen:
            seen.add(diag.key)
            out.append(diag)
    return tuple(out)


def _one_line(value: str, limit: int = 400) -> str:
    return one_line(value, limit)


def _duration(delta: timedelta) -> str:
    seconds = max(0, int(delta.total_seconds()))
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"
