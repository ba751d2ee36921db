"""The Job controller (batch/v1), as the launch agent observes it.

Per Job: create pods from the template (named `<job>-<suffix>`, labelled `job-name` and
`controller-uid` by the API server's defaulting, with a controller ownerReference and the
`batch.kubernetes.io/job-tracking` finalizer that lets the controller count a pod even after
it was deleted); count `active`, `ready`, `succeeded`, `failed`, `terminating`; recreate
failed pods after the 10 s doubling back-off until `backoffLimit` (for `restartPolicy:
OnFailure`, container restarts count instead); finish with `SuccessCriteriaMet` + `Complete`
or `FailureTarget` + `Failed` (reasons `BackoffLimitExceeded`, `DeadlineExceeded`); honour
`suspend` (active pods are deleted, condition `Suspended`) and `activeDeadlineSeconds`;
delete a finished Job `ttlSecondsAfterFinished` later. A `podFailurePolicy` decides, rule by
rule, what a Failed pod does (`match_pod_failure_policy`): `FailJob` fails the Job with reason
`PodFailurePolicy` in the controller's words, `Ignore` does not count it; under a policy a pod
counts, and is replaced, only once it is Failed (`onlyReplaceFailedPods`).

Versions (`pkg/controller/job/job_controller.go`, `delayTerminalCondition`, true from 1.31 with
the `JobManagedBy` / `JobPodReplacementPolicy` feature gates): on 1.31+ a Job that meets its
failure or success criteria gets the interim `FailureTarget` / `SuccessCriteriaMet` condition
first, and `Failed` / `Complete` (and `completionTime`) only once none of its pods is still
terminating (`enactJobFinished`); pods deleted gracefully take their grace period to end. On
1.30 `Failed` / `Complete` come at once, while the pods may still be running.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from launch_agent.sandbox.cluster.common import (
    Ctx,
    condition,
    has_condition,
    merge_conditions,
    pod_from_template,
    seconds_of,
)
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.store import Obj

TRACKING = "batch.kubernetes.io/job-tracking"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
# job_controller.go: `DefaultJobApiBackOff` and `MaxJobApiBackOff`, the re-sync delays after a
# failed API call (a refused pod create).
API_BACKOFF, MAX_API_BACKOFF = 1.0, 60.0


def _finished(job: Obj) -> str | None:
    for kind in ("Complete", "Failed"):
        if has_condition(job, kind):
            return kind
    return None


def _version(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    try:
        return int(major), int(minor.split(".")[0] or 0)
    except ValueError:
        raise ValueError(f"kubernetes version {text!r}: expected MAJOR.MINOR like 1.31") from None


class JobController:
    def __init__(
        self, on_pod_created: Callable[[Obj, Obj], None] | None = None, version: str = "1.31"
    ) -> None:
        self.delay_terminal = _version(version) >= (1, 31)
        self._last_failure: dict[str, float] = {}
        # Job uid -> (refused creates in a row, when to try again).
        self._refused: dict[str, tuple[int, float]] = {}
        self._on_pod_created = on_pod_created

    def reconcile(self, ctx: Ctx) -> None:
        rt_pods = ctx.store.rt("pods")
        self._release_orphans(ctx, ctx.store.list(rt_pods, None))
        for job in ctx.store.list(ctx.store.rt("jobs"), None):
            if not job["metadata"].get("deletionTimestamp"):
                self._job(ctx, job)

    def _release_orphans(self, ctx: Ctx, pods: list[Obj]) -> None:
        """Drop the tracking finalizer of pods whose Job is gone (deleted or orphaned them)."""
        for pod in pods:
            meta = pod["metadata"]
            if TRACKING not in (meta.get("finalizers") or []):
                continue
            refs = [r for r in meta.get("ownerReferences") or [] if r.get("kind") == "Job"]
            owner = ctx.store.by_uid(refs[0]["uid"]) if refs else None
            if owner is None or owner[1]["metadata"].get("deletionTimestamp"):
                self._untrack(ctx, pod)

    def _untrack(self, ctx: Ctx, pod: Obj) -> None:
        finalizers = [f for f in pod["metadata"].get("finalizers") or [] if f != TRACKING]
        ctx.update({**pod, "metadata": {**pod["metadata"], "finalizers": finalizers}})

    def _job(self, ctx: Ctx, job: Obj) -> None:
        spec, status = job["spec"], dict(job.get("status") or {})
        uid, now = job["metadata"]["uid"], ctx.ts()
        pods = ctx.children(job, "Pod")
        done = _finished(job)
        if done:
            self._ttl(ctx, job, spec)
            for pod in pods:
                if TRACKING in (pod["metadata"].get("finalizers") or []):
                    self._untrack(ctx, pod)
            return
        succeeded, failed = int(status.get("succeeded", 0)), int(status.get("failed", 0))
        policy = spec.get("podFailurePolicy")
        # `onlyReplaceFailedPods`: with a pod failure policy, a pod counts (and is replaced)
        # only once it is Failed, so the policy can read its final conditions and exit codes.
        only_failed = policy is not None or spec.get("podReplacementPolicy") == "Failed"
        fail_job: str | None = None
        for pod in pods:
            phase = (pod.get("status") or {}).get("phase")
            tracked = TRACKING in (pod["metadata"].get("finalizers") or [])
            deleted = bool(pod["metadata"].get("deletionTimestamp")) and not only_failed
            if tracked and (phase in ("Succeeded", "Failed") or deleted):
                if phase == "Succeeded":
                    succeeded += 1
                else:
                    message, counts = match_pod_failure_policy(policy, pod)
                    if counts:
                        failed += 1
                        self._last_failure[uid] = ctx.t
                    fail_job = fail_job or message
                self._untrack(ctx, pod)
        active = [
            p
            for p in pods
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
            and not p["metadata"].get("deletionTimestamp")
        ]
        restarts = sum(
            int(cs.get("restartCount", 0))
            for p in pods
            for cs in (p.get("status") or {}).get("containerStatuses") or []
        )
        done_indexes = _succeeded_indexes(spec, status, pods)
        if done_indexes is not None:
            # `trackJobStatusAndRemoveFinalizers`: an Indexed Job counts succeeded indexes,
            # not pods, and lists them in `completedIndexes`.
            succeeded = len(done_indexes)
            status["completedIndexes"] = intervals(done_indexes)
        conditions = list(status.get("conditions") or [])
        if spec.get("suspend"):
            # `manageJob` -> `deleteJobPods`: the tracking finalizer goes first, so pods
            # removed by a suspension are not counted as failed.
            for pod in active:
                self._untrack(ctx, pod)
                _delete_pod(ctx, job, pod)
            if not has_condition(job, "Suspended"):
                # `syncJob`, on the change only.
                ctx.event(job, "Normal", "Suspended", "Job suspended", "job-controller")
            conditions = merge_conditions(
                conditions,
                [
                    condition(
                        "Suspended", True, "JobSuspended", "Job suspended", now, lastProbeTime=now
                    )
                ],
            )
            status.update(
                active=0,
                ready=0,
                terminating=len(active) + _terminating(pods),
                conditions=conditions,
                uncountedTerminatedPods={},
            )
            status.pop("startTime", None)
            ctx.set_status(job, {k: v for k, v in status.items() if v is not None})
            return
        if has_condition(job, "Suspended"):
            ctx.event(job, "Normal", "Resumed", "Job resumed", "job-controller")
            conditions = merge_conditions(
                conditions,
                [
                    condition(
                        "Suspended", False, "JobResumed", "Job resumed", now, lastProbeTime=now
                    )
                ],
            )
        start = status.get("startTime") or now
        status["startTime"] = start
        completions = spec.get("completions")
        parallelism = int(spec.get("parallelism", 1))
        backoff = int(spec.get("backoffLimit", 6))
        failure: tuple[str, str] | None = None
        if fail_job is not None:
            failure = ("PodFailurePolicy", fail_job)
        over = restarts if spec["template"]["spec"].get("restartPolicy") == "OnFailure" else failed
        if failure is None and over > backoff:
            failure = ("BackoffLimitExceeded", "Job has reached the specified backoff limit")
        deadline = spec.get("activeDeadlineSeconds")
        started = seconds_of(ctx, start)
        if failure is None and deadline is not None and started is not None:
            if ctx.t >= started + deadline:
                failure = ("DeadlineExceeded", "Job was active longer than specified deadline")
            else:
                ctx.wake_at(started + deadline)
        complete = (
            (succeeded >= completions)
            if completions is not None
            else (succeeded >= 1 and not active)
        )
        target = _interim(job)
        if failure or complete or target is not None:
            self._finish(
                ctx,
                job,
                status=status,
                conditions=conditions,
                pods=pods,
                active=active,
                failure=failure,
                target=target,
            )
            status.update(succeeded=succeeded, failed=failed)
            ctx.set_status(job, status)
            if spec.get("ttlSecondsAfterFinished") is not None and _finished_in(status):
                ctx.wake_at(ctx.t + float(spec["ttlSecondsAfterFinished"]))
            return
        wanted = parallelism if completions is None else min(parallelism, completions - succeeded)
        if completions is None and succeeded:
            wanted = 0
        # `manageJob`: pods still terminating are not replaced yet when only failed ones are.
        waiting = _terminating(pods) if only_failed else 0
        missing, created = wanted - len(active) - waiting, 0
        if missing > 0:
            retry_at = self._retry_at(uid, failed)
            refused = self._refused.get(uid)
            if refused is not None and (retry_at is None or refused[1] > retry_at):
                retry_at = refused[1]
            if retry_at is not None and ctx.t < retry_at:
                ctx.wake_at(retry_at)
            else:
                for index in _next_indexes(job, pods, missing, active, done_indexes or set()):
                    if not self._create_pod(ctx, job, index):
                        break
                    created += 1
        status.update(
            active=len(active) + created,
            ready=sum(1 for p in active if _ready(p)),
            succeeded=succeeded,
            failed=failed,
            terminating=_terminating(pods),
            uncountedTerminatedPods={},
        )
        if conditions:
            status["conditions"] = conditions
        ctx.set_status(job, status)

    def _finish(
        self,
        ctx: Ctx,
        job: Obj,
        *,
        status: dict[str, Any],
        conditions: list[dict[str, Any]],
        pods: list[Obj],
        active: list[Obj],
        failure: tuple[str, str] | None,
        target: dict[str, Any] | None,
    ) -> None:
        """`syncJob` once the Job met its criteria: delete the active pods (`deleteActivePods`),
        record the interim condition, and the terminal one when `enactJobFinished` allows."""
        now = ctx.ts()
        for pod in active:
            _delete_pod(ctx, job, pod)
        if target is not None:
            failing = target["type"] == "FailureTarget"
            reason, message = str(target.get("reason") or ""), str(target.get("message") or "")
        elif failure is not None:
            failing, (reason, message) = True, failure
        else:
            failing = False
            reason, message = "CompletionsReached", "Reached expected number of succeeded pods"
        interim, final = (
            ("FailureTarget", "Failed") if failing else ("SuccessCriteriaMet", "Complete")
        )
        # The pods just deleted, and earlier ones still in their grace period.
        terminating = len(active) + _terminating(pods)
        if not any(c.get("type") == interim for c in conditions):
            conditions = merge_conditions(
                conditions, [condition(interim, True, reason, message, now, lastProbeTime=now)]
            )
        if not self.delay_terminal or terminating == 0:
            conditions = merge_conditions(
                conditions, [condition(final, True, reason, message, now, lastProbeTime=now)]
            )
            if failing:
                ctx.event(job, "Warning", reason, message, "job-controller")
            else:
                status["completionTime"] = now
                ctx.event(job, "Normal", "Completed", "Job completed", "job-controller")
        status.update(
            active=0,
            ready=0,
            terminating=terminating if self.delay_terminal else 0,
            conditions=conditions,
            uncountedTerminatedPods={},
        )

    def _retry_at(self, uid: str, failed: int) -> float | None:
        if not failed or uid not in self._last_failure:
            return None
        return float(self._last_failure[uid] + min(10.0 * 2 ** (failed - 1), 360.0))

    def _create_pod(self, ctx: Ctx, job: Obj, index: int) -> bool:
        """Create one pod; False when the API server refused it.

        A refusal (admission: quota, service account, PodSecurity; or validation) leaves only a
        Warning Event `FailedCreate` on the Job, worded as `pkg/controller/controller_utils.go`
        (`RealPodControl.createPods`) writes it: `Error creating: <the API server's message>`.
        The Job stays active without pods and `manageJob` is retried after the API back-off
        (`job_controller.go`, `syncJob` returning the error, requeued rate-limited), so the
        refusal repeats (one Event, its `count` rising) until the cause is removed.
        """
        template = job["spec"]["template"]
        uid = job["metadata"]["uid"]
        if job["spec"].get("completionMode") == "Indexed":
            pod = _indexed_pod(template, job, index)
        else:
            pod = pod_from_template(template, job, finalizers=[TRACKING])
        try:
            created = ctx.create("pods", job["metadata"]["namespace"], pod)
        except ApiError as exc:
            ctx.event(
                job, "Warning", "FailedCreate", f"Error creating: {exc.message}", "job-controller"
            )
            count = self._refused.get(uid, (0, 0.0))[0] + 1
            delay = min(API_BACKOFF * 2 ** (count - 1), MAX_API_BACKOFF)
            self._refused[uid] = (count, ctx.t + delay)
            ctx.wake_at(ctx.t + delay)
            return False
        self._refused.pop(uid, None)
        ctx.event(
            job,
            "Normal",
            "SuccessfulCreate",
            f"Created pod: {created['metadata']['name']}",
            "job-controller",
        )
        if self._on_pod_created is not None:
            self._on_pod_created(job, created)
        return True

    def _ttl(self, ctx: Ctx, job: Obj, spec: dict[str, Any]) -> None:
        ttl = spec.get("ttlSecondsAfterFinished")
        if ttl is None:
            return
        finished_at = max(
            (
                seconds_of(ctx, c.get("lastTransitionTime")) or 0.0
                for c in job["status"].get("conditions") or []
                if c.get("type") in ("Complete", "Failed")
            ),
            default=0.0,
        )
        if ctx.t >= finished_at + float(ttl):
            ctx.delete(job, propagation="Foreground")
        else:
            ctx.wake_at(finished_at + float(ttl))


def _interim(job: Obj) -> dict[str, Any] | None:
    """The Job's `FailureTarget` or `SuccessCriteriaMet` condition, if it has one."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("FailureTarget", "SuccessCriteriaMet") and c.get("status") == "True":
            return dict(c)
    return None


def _succeeded_indexes(spec: Obj, status: Obj, pods: list[Obj]) -> set[int] | None:
    """An Indexed Job's succeeded indexes: those already listed, and those of its Succeeded
    pods; None for a Job of another completion mode."""
    if spec.get("completionMode") != "Indexed":
        return None
    done = parse_intervals(status.get("completedIndexes"))
    for pod in pods:
        index = completion_index(pod)
        if index is not None and (pod.get("status") or {}).get("phase") == "Succeeded":
            done.add(index)
    return done


def _next_indexes(
    job: Obj, pods: list[Obj], missing: int, active: list[Obj], done: set[int]
) -> list[int]:
    """Which pods `manageJob` creates next: a number per pod (its index when Indexed, the
    lowest indexes neither succeeded nor running, `firstPendingIndexes`)."""
    if job["spec"].get("completionMode") != "Indexed":
        return [len(pods) + i for i in range(missing)]
    running = {completion_index(p) for p in active}
    completions = int(job["spec"].get("completions") or 0)
    free = [i for i in range(completions) if i not in done and i not in running]
    return free[:missing]


def _indexed_pod(template: Obj, job: Obj, index: int) -> Obj:
    """`manageJob` for an Indexed Job (`pkg/controller/job/job_controller.go`,
    `indexed_job_utils.go`): the index as annotation and label, the env var read from that
    label, `hostname` `<job>-<index>` and generateName `<job>-<index>-`."""
    name = job["metadata"]["name"]
    key = COMPLETION_INDEX
    pod = pod_from_template(
        template,
        job,
        generate=f"{name}-{index}-",
        labels={key: str(index)},
        annotations={key: str(index)},
        finalizers=[TRACKING],
    )
    spec = pod["spec"]
    spec["hostname"] = f"{name}-{index}"
    for field in ("initContainers", "containers"):
        if isinstance(spec.get(field), list):
            spec[field] = [_with_index_env(c) for c in spec[field]]
    return pod


def _with_index_env(container: Any) -> Any:
    if not isinstance(container, dict):
        return container
    env = list(container.get("env") or [])
    if any(isinstance(e, dict) and e.get("name") == "JOB_COMPLETION_INDEX" for e in env):
        return container
    field_path = f"metadata.labels['{COMPLETION_INDEX}']"
    env.append(
        {"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {"fieldPath": field_path}}}
    )
    return {**container, "env": env}


def completion_index(pod: Obj) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(COMPLETION_INDEX)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def parse_intervals(text: Any) -> set[int]:
    """`parseIndexesFromString`: "0,2-4" -> {0, 2, 3, 4}; what does not parse is skipped."""
    out: set[int] = set()
    for part in str(text or "").split(","):
        first, _, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if last else lo
        except ValueError:
            continue
        out.update(range(lo, hi + 1))
    return out


def intervals(indexes: set[int]) -> str:
    """`orderedIntervals.String`: runs of three or more as `a-b`, a run of two as `a,b`."""
    parts: list[str] = []
    ordered = sorted(indexes)
    start = 0
    while start < len(ordered):
        end = start
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        first, last = ordered[start], ordered[end]
        if last == first:
            parts.append(str(first))
        elif last == first + 1:
            parts.append(f"{first},{last}")
        else:
            parts.append(f"{first}-{last}")
        start = end + 1
    return ",".join(parts)


def _delete_pod(ctx: Ctx, job: Obj, pod: Obj) -> None:
    """`RealPodControl.DeletePod` (`pkg/controller/controller_utils.go`): the delete, and its
    Event on the Job."""
    ctx.delete(pod)
    name = pod["metadata"]["name"]
    ctx.event(job, "Normal", "SuccessfulDelete", f"Deleted pod: {name}", "job-controller")


def _terminating(pods: list[Obj]) -> int:
    """`controller.CountTerminatingPods`: deleted, not yet in a terminal phase."""
    return sum(
        1
        for p in pods
        if p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    )


def _finished_in(status: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def match_pod_failure_policy(policy: Any, pod: Obj) -> tuple[str | None, bool]:
    """kubernetes `pkg/controller/job/pod_failure_policy.go` (`matchPodFailurePolicy`): the
    first rule a failed pod matches decides; (the Job's failure message for `FailJob`, whether
    the pod counts towards `backoffLimit`). `Ignore` does not count; `Count`, `FailJob` and no
    match do. A rule whose action this controller does not know (`FailIndex`, which needs
    `backoffLimitPerIndex`, not modelled) is skipped, as the API tells clients to."""
    rules = policy.get("rules") if isinstance(policy, dict) else None
    if not isinstance(rules, list):
        return None, True
    meta, status = pod["metadata"], pod.get("status") or {}
    for index, rule in enumerate(rules):
        action = rule.get("action")
        if action not in ("Ignore", "Count", "FailJob"):
            continue
        if rule.get("onExitCodes") is not None:
            container = _on_exit_codes(status, rule["onExitCodes"])
            if container is None:
                continue
            code = container["state"]["terminated"]["exitCode"]
            said = (
                f"Container {container['name']} for pod {meta['namespace']}/{meta['name']}"
                f" failed with exit code {code} matching {action} rule at index {index}"
            )
        elif rule.get("onPodConditions") is not None:
            found = _on_pod_conditions(status, rule["onPodConditions"])
            if found is None:
                continue
            said = (
                f"Pod {meta['namespace']}/{meta['name']} has condition {found} matching"
                f" {action} rule at index {index}"
            )
        else:
            continue
        if action == "Ignore":
            return None, False
        return (said if action == "FailJob" else None), True
    return None, True


def _on_exit_codes(status: dict[str, Any], requirement: dict[str, Any]) -> dict[str, Any] | None:
    """`matchOnExitCodes`: the first terminated container, app containers before init ones,
    that exited non-zero with a code the operator accepts."""
    name = requirement.get("containerName")
    values = set(requirement.get("values") or [])
    negate = requirement.get("operator") == "NotIn"
    if requirement.get("operator") not in ("In", "NotIn"):
        return None
    for key in ("containerStatuses", "initContainerStatuses"):
        for cs in status.get(key) or []:
            terminated = (cs.get("state") or {}).get("terminated")
            if terminated is None or (name is not None and cs.get("name") != name):
                continue
            code = terminated.get("exitCode", 0)
            if code != 0 and (code in values) != negate:
                return dict(cs)
    return None


def _on_pod_conditions(status: dict[str, Any], patterns: list[dict[str, Any]]) -> str | None:
    """`matchOnPodConditions`: the type of the first pod condition (in the pod's order) that
    some pattern names with its status; the API server defaults a pattern's status to True."""
    for cond in status.get("conditions") or []:
        for pattern in patterns:
            want = pattern.get("status") or "True"
            if cond.get("type") == pattern.get("type") and cond.get("status") == want:
                return str(cond["type"])
    return None
