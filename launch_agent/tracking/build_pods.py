"""A Kaniko build Job and its pods -> succeeded, failed (why, and what to change), or running.

A build Job's own conditions say only "BackoffLimitExceeded" or "DeadlineExceeded", and the
second one comes after `activeDeadlineSeconds` (30 minutes by default) for a pod that never
started. The pods say why much sooner, so the builder fails the build on them:

- the executor image cannot be pulled (ImagePullBackOff, InvalidImageName): name the image and
  `builder.kaniko-image`;
- a Secret the pod needs is missing (CreateContainerConfigError): name the Secret;
- the executor was OOMKilled: name its memory limit (the Job has `backoffLimit: 0`, so the
  first OOM is final);
- the pod stayed unschedulable past `tracking.unschedulable_timeout_seconds`: the scheduler's
  message and what the pod requests.

`ErrImagePull` alone is not final: the kubelet retries, and a missing image turns into
`ImagePullBackOff` seconds later. The pod diagnosis itself is `tracking.pods.diagnose_pod`'s;
this module only picks the ones that end a build and words them for the builder's settings.

How long a pod has been unschedulable is the caller's measure (`waited`, seconds per pod
name), not the pods' timestamps: the builder counts from when it first saw the pod
unschedulable, on its own monotonic clock, so a skew between the agent's and the API server's
clocks cannot fail a build early. `unschedulable_pods` tells it which pods to count for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from launch_agent.model.digest_record import is_digest
from launch_agent.model.run_state import Diagnosis, Reason
from launch_agent.tracking.fields import dig, mappings, name_of, text
from launch_agent.tracking.pods import diagnose_pod
from launch_agent.tracking.views import creation_order

# `diagnose_pod` needs a clock for its own unschedulable deadline, which is not used here
# (unschedulable is judged on `waited`); any fixed instant gives the same other diagnoses.
_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
_NEVER = timedelta(days=36500)
_SECRET = re.compile(r'secret "([^"]+)"')


class BuildState(Enum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class BuildContext:
    """What the failure messages name: the settings a person would change."""

    kaniko_image: str
    container: str = "kaniko"
    docker_config_secret: str | None = None


@dataclass(frozen=True, slots=True)
class BuildStatus:
    state: BuildState
    reason: str = ""
    # The executor ran, so its log is worth reading (False for a pod that never started).
    ran: bool = True
    # Seconds until an unschedulable pod passes the deadline: assess again then, as no event
    # will come for a pod that just stays Pending.
    recheck_in: float | None = None
    # The reason names what to change (a setting, a Secret, a limit); a bare Job failure does
    # not, and its log tail is the explanation.
    explained: bool = False


RUNNING = BuildStatus(BuildState.RUNNING)


def job_outcome(job: Mapping[str, Any]) -> str | None:
    """ "succeeded", a failure reason, or None while the Job runs (by its conditions)."""
    for cond in mappings(job, "status", "conditions"):
        if cond.get("status") != "True":
            continue
        if cond.get("type") in ("Complete", "SuccessCriteriaMet"):
            return "succeeded"
        if cond.get("type") in ("Failed", "FailureTarget"):
            reason = cond.get("reason") or "Failed"
            message = cond.get("message") or ""
            return f"{reason}: {message}" if message else str(reason)
    return None


def unschedulable_pods(pods: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Pod name -> the scheduler's message, for pods the scheduler cannot place now."""
    found: dict[str, str] = {}
    for pod in pods:
        if text(pod, "status", "phase") not in (None, "Pending"):
            continue
        for cond in mappings(pod, "status", "conditions"):
            if (
                cond.get("type") == "PodScheduled"
                and cond.get("status") == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                found[name_of(pod)] = str(cond.get("message") or "")
    return found


def assess_build(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    waited: Mapping[str, float],
    deadline: float,
    ctx: BuildContext,
) -> BuildStatus:
    """The build's state from its Job and pods; `waited[pod]` seconds unschedulable so far."""
    outcome = job_outcome(job)
    if outcome == "succeeded":
        return BuildStatus(BuildState.SUCCEEDED)
    ordered = sorted(pods, key=creation_order)
    oom: BuildStatus | None = None
    for pod in ordered:
        for diag in diagnose(pod):
            if diag.reason is Reason.OOM_KILLED:
                oom = oom or BuildStatus(BuildState.FAILED, _oom(pod, diag, ctx), explained=True)
            elif diag.terminal:
                return BuildStatus(
                    BuildState.FAILED, _stuck(pod, diag, ctx), ran=False, explained=True
                )
    if oom is not None:
        return oom
    if outcome is not None:
        return BuildStatus(BuildState.FAILED, f"the build Job failed: {outcome}")
    recheck: float | None = None
    for name, message in unschedulable_pods(ordered).items():
        so_far = waited.get(name, 0.0)
        if so_far >= deadline:
            pod = next(p for p in ordered if name_of(p) == name)
            return BuildStatus(
                BuildState.FAILED,
                _unschedulable(pod, message, so_far, deadline),
                ran=False,
                explained=True,
            )
        left = deadline - so_far
        recheck = left if recheck is None else min(recheck, left)
    return BuildStatus(BuildState.RUNNING, recheck_in=recheck)


def diagnose(pod: Mapping[str, Any]) -> list[Diagnosis]:
    """The pod's problems from the run tracker's diagnosis, unschedulable left out."""
    return [d for d in diagnose_pod(pod, _EPOCH, _NEVER) if d.reason is not Reason.UNSCHEDULABLE]


def _container(pod: Mapping[str, Any], name: str | None) -> Mapping[str, Any]:
    for container in mappings(pod, "spec", "containers"):
        if container.get("name") == name:
            return container
    return {}


def _stuck(pod: Mapping[str, Any], diag: Diagnosis, ctx: BuildContext) -> str:
    name = name_of(pod)
    detail = f": {' '.join(diag.detail.split())}" if diag.detail else ""
    executor = diag.container == ctx.container
    if diag.reason in (Reason.IMAGE_PULL, Reason.INVALID_IMAGE_NAME) and executor:
        image = diag.image or ctx.kaniko_image
        what = "cannot be pulled" if diag.reason is Reason.IMAGE_PULL else "is not a valid name"
        return (
            f"the Kaniko executor image {image} {what} (pod {name}{detail}); check"
            f" builder.kaniko-image (now {ctx.kaniko_image}) and that the cluster can pull it"
        )
    if diag.reason is Reason.CREATE_CONTAINER_CONFIG_ERROR:
        found = _SECRET.search(diag.detail or "")
        namespace = text(pod, "metadata", "namespace") or "the Kaniko namespace"
        if found is None:
            return f"the build pod {name} cannot start{detail}; check the Secrets it mounts"
        secret = found.group(1)
        role = ""
        if secret == ctx.docker_config_secret:
            role = " (the registry's docker config Secret, kaniko_docker_config_secret)"
        return (
            f"the build pod {name} cannot start: Secret {secret}{role} is missing in namespace"
            f" {namespace}{detail}; create it there or fix the name"
        )
    return f"the build pod cannot start: {diag.message}"


def _oom(pod: Mapping[str, Any], diag: Diagnosis, ctx: BuildContext) -> str:
    container = _container(pod, diag.container)
    limit = text(container, "resources", "limits", "memory")
    what = f"its memory limit {limit}" if limit else "the node's free memory (no limit is set)"
    where = (
        "the Kaniko executor" if diag.container == ctx.container else f"container {diag.container}"
    )
    return (
        f"{where} in pod {name_of(pod)} was OOMKilled: the build used more than {what}; raise"
        " the limit in builder.kaniko-config (spec.template.spec.containers[0].resources)"
    )


def _unschedulable(pod: Mapping[str, Any], message: str, waited: float, deadline: float) -> str:
    requests = dig(_first_container(pod), "resources", "requests")
    asked = ""
    if isinstance(requests, Mapping) and requests:
        asked = "; it requests " + ", ".join(f"{k} {v}" for k, v in sorted(requests.items()))
    said = f": {' '.join(message.split())}" if message else ""
    return (
        f"the build pod {name_of(pod)} could not be scheduled for {int(waited)}s"
        f" (tracking.unschedulable_timeout_seconds is {deadline:g}){said}{asked}; lower the"
        " Kaniko resources in builder.kaniko-config or add capacity to the cluster"
    )


def _first_container(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return next(iter(mappings(pod, "spec", "containers")), {})


def pushed_digest(pods: Sequence[Mapping[str, Any]], container: str) -> str | None:
    """The image digest the Kaniko executor wrote (`--digest-file=/dev/termination-log`, which
    kubelet reports as the terminated state's `message`), from the newest pod whose executor
    exited 0; None when no such pod says a `sha256:` digest."""
    for pod in sorted(pods, key=creation_order, reverse=True):
        for status in mappings(pod, "status", "containerStatuses"):
            if status.get("name") != container:
                continue
            done = dig(status, "state", "terminated")
            if not isinstance(done, Mapping) or done.get("exitCode") != 0:
                continue
            message = done.get("message")
            digest = message.strip().lower() if isinstance(message, str) else ""
            if is_digest(digest):
                return digest
    return None
