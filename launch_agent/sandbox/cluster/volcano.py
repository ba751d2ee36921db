"""The Volcano Job controller (batch.volcano.sh/v1alpha1); see `workloads`.

Follows volcano-sh/volcano `pkg/controllers/job/state/*.go` (one `Execute(action)` per phase),
`job_controller_actions.go` (`killPods`, `syncJob`: counts, `version`, conditions) and
`job_controller_util.go` (`applyPolicies`). Without `policies` a failed pod changes nothing by
itself: the job ends only when succeeded + failed pods reach the replica count, Completed if
`minAvailable` (or `minSuccess`) pods succeeded, Failed otherwise (`runningState.Execute`).
With policies, a pod failure (event `PodFailed`, or a matching `exitCode`) or a finished task
(`TaskCompleted`) triggers the policy's action: `AbortJob` (Aborting, then Aborted once no pod
is alive), `RestartJob` (every pod killed, `retryCount` + 1, Restarting, then Pending, or Failed
once `retryCount` reaches `maxRetry`, default 3), `TerminateJob` (Terminating, Terminated) or
`CompleteJob` (Completing, Completed). Volcano writes no reason or message in `status.state`.

Task-level `minAvailable` (`spec.tasks[].minAvailable`): the mutating webhook
(`pkg/webhooks/admission/jobs/mutate/mutate_job.go`, `patchDefaultMinAvailable` and
`mutateSpec`) defaults a task's to its `replicas` and the job's to the sum of its tasks'; when
every pod has finished and the job's `minAvailable` is at least that sum, a task with fewer
succeeded pods than its own `minAvailable` fails the job, whatever the job-level count says
(`state/running.go`, `Execute`, `TotalTaskMinAvailable` in `state/util.go`).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from launch_agent.sandbox.cluster.children import ensure_pod, pod_phase
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.kube.store import Obj

FINAL = ("Completed", "Failed", "Aborted", "Terminated")
# Action -> the phase it moves to (state/running.go, state/pending.go).
KILL_PHASE = {
    "AbortJob": "Aborting",
    "TerminateJob": "Terminating",
    "CompleteJob": "Completing",
    "RestartJob": "Restarting",
}
# ... and the phase reached once no pod is alive (aborting.go, terminating.go, completing.go).
AFTER_KILL = {"Aborting": "Aborted", "Terminating": "Terminated", "Completing": "Completed"}
DEFAULT_MAX_RETRY = 3  # pkg/webhooks/admission/jobs/mutate/mutate_job.go: DefaultMaxRetry


def _replicas(spec: dict[str, Any]) -> int:
    return sum(int(t.get("replicas", 1)) for t in spec.get("tasks") or [])


def _task_min(task: dict[str, Any]) -> int:
    # mutate_job.go `mutateSpec`: a task without minAvailable gets its replicas.
    value = task.get("minAvailable")
    return int(task.get("replicas", 1)) if value is None else int(value)


def _total_task_min(spec: dict[str, Any]) -> int:
    """state/util.go `TotalTaskMinAvailable`."""
    return sum(_task_min(t) for t in spec.get("tasks") or [])


def _job_min(spec: dict[str, Any]) -> int:
    # mutate_job.go `patchDefaultMinAvailable`: 0 or absent is the sum of the tasks'.
    return int(spec.get("minAvailable") or 0) or _total_task_min(spec)


def _short_task(spec: dict[str, Any], tasks: dict[str, dict[str, dict[str, int]]]) -> bool:
    """running.go: with job minAvailable >= the tasks' sum, a task (counted in
    taskStatusCount) whose succeeded pods are fewer than its minAvailable fails the job."""
    if _job_min(spec) < _total_task_min(spec):
        return False
    for task in spec.get("tasks") or []:
        counted = tasks.get(task.get("name", "task"))
        if counted is not None and counted["phase"].get("Succeeded", 0) < _task_min(task):
            return True
    return False


def reconcile_volcano(ctx: Ctx, job: Obj) -> None:
    spec, status = job["spec"], dict(job.get("status") or {})
    state = dict(status.get("state") or {})
    phase = state.get("phase") or "Pending"
    if phase in FINAL:
        return
    version = int(status.get("version") or 0)
    pods = ctx.children(job, "Pod")
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    action = _triggered_action(job, live) if phase in ("Pending", "Running") else None
    new_phase = phase
    if action in KILL_PHASE:
        # KillJob: Restart kills every pod (PodRetainPhaseNone, but the last retry keeps the
        # finished ones, as killPods does); the others keep Succeeded and Failed pods (Soft).
        retries = int(status.get("retryCount") or 0)
        max_retry = int(spec.get("maxRetry", DEFAULT_MAX_RETRY))
        keep_finished = action != "RestartJob" or retries >= max_retry - 1
        _kill(ctx, live, keep_finished)
        version += 1  # "Job version is bumped only when job is killed"
        new_phase = KILL_PHASE[action]
        if action == "RestartJob":
            status["retryCount"] = retries + 1
    elif phase == "Restarting":
        # restartingState.restartingUpdateStatus
        if int(status.get("retryCount") or 0) >= int(spec.get("maxRetry", DEFAULT_MAX_RETRY)):
            new_phase = "Failed"
        else:
            _kill(ctx, live, keep_finished=False)
            new_phase = "Pending"
    elif phase in AFTER_KILL:
        _kill(ctx, live, keep_finished=True)
    else:
        _sync_pods(ctx, job, version)
    pods = ctx.children(job, "Pod")
    counts, tasks = _count(pods)
    replicas = _replicas(spec)
    min_available = _job_min(spec)
    if new_phase == phase:
        new_phase = _next_phase(
            spec, phase, counts, tasks=tasks, replicas=replicas, min_available=min_available
        )
    if new_phase != phase or not state.get("phase"):
        now = ctx.ts()
        state = {"phase": new_phase, "lastTransitionTime": now}
        status["conditions"] = [
            *(status.get("conditions") or []),
            {"status": new_phase, "lastTransitionTime": now},
        ]
    status.update(
        state=state,
        minAvailable=min_available,
        pending=counts["Pending"],
        running=counts["Running"],
        succeeded=counts["Succeeded"],
        failed=counts["Failed"],
        terminating=counts["Terminating"],
        unknown=0,
        version=version,
        retryCount=int(status.get("retryCount") or 0),
        taskStatusCount=tasks,
    )
    ctx.set_status(job, status)


def _next_phase(
    spec: dict[str, Any],
    phase: str,
    counts: Counter[str],
    *,
    tasks: dict[str, dict[str, dict[str, int]]],
    replicas: int,
    min_available: int,
) -> str:
    alive = counts["Terminating"] + counts["Pending"] + counts["Running"]
    if phase in AFTER_KILL:
        return phase if alive else AFTER_KILL[phase]
    if phase == "Pending":
        # pendingState.Execute, SyncJob
        done = counts["Running"] + counts["Succeeded"] + counts["Failed"]
        return "Running" if min_available <= done else phase
    if phase != "Running":
        return phase
    # runningState.Execute, SyncJob
    min_success = spec.get("minSuccess")
    if min_success is not None and counts["Succeeded"] >= int(min_success):
        return "Completed"
    if counts["Succeeded"] + counts["Failed"] == replicas:
        if _short_task(spec, tasks):
            return "Failed"
        if min_success is not None and counts["Succeeded"] < int(min_success):
            return "Failed"
        return "Completed" if counts["Succeeded"] >= min_available else "Failed"
    if counts["Pending"] > replicas - min_available:
        return "Pending"
    return phase


def _triggered_action(job: Obj, pods: list[Obj]) -> str | None:
    """applyPolicies for the pod events the sandbox produces: a failed pod (`PodFailed`, or
    its exit code) and a task whose pods all succeeded (`TaskCompleted`). Task policies first,
    then the job's; no matching policy is a plain sync (None)."""
    spec = job["spec"]
    by_task: dict[str, list[Obj]] = {}
    for pod in pods:
        task = (pod["metadata"].get("labels") or {}).get("volcano.sh/task-spec", "")
        by_task.setdefault(task, []).append(pod)
    for task in spec.get("tasks") or []:
        mine = by_task.get(task.get("name", "task"), [])
        events: list[tuple[str, int | None]] = [
            ("PodFailed", _exit_code(p)) for p in mine if pod_phase(p) == "Failed"
        ]
        if len(mine) == int(task.get("replicas", 1)) and all(
            pod_phase(p) == "Succeeded" for p in mine
        ):
            events.append(("TaskCompleted", None))
        for event, code in events:
            for policies in (task.get("policies") or [], spec.get("policies") or []):
                action = _match(policies, event, code)
                if action is not None:
                    return action
    return None


def _match(policies: list[dict[str, Any]], event: str, code: int | None) -> str | None:
    for policy in policies:
        wanted = list(policy.get("events") or []) + (
            [policy["event"]] if policy.get("event") else []
        )
        if event in wanted or "*" in wanted:
            return str(policy.get("action", "SyncJob"))
        if policy.get("exitCode") is not None and code == int(policy["exitCode"]):
            return str(policy.get("action", "SyncJob"))
    return None


def _exit_code(pod: Obj) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if terminated:
            return int(terminated.get("exitCode", 0))
    return None


def _kill(ctx: Ctx, pods: list[Obj], keep_finished: bool) -> None:
    for pod in pods:
        if keep_finished and pod_phase(pod) in ("Succeeded", "Failed"):
            continue
        ctx.delete(pod)


def _count(pods: list[Obj]) -> tuple[Counter[str], dict[str, dict[str, dict[str, int]]]]:
    counts = Counter[str]()
    tasks: dict[str, Counter[str]] = {}
    for pod in pods:
        if pod["metadata"].get("deletionTimestamp"):
            counts["Terminating"] += 1
            continue
        phase = pod_phase(pod)
        counts[phase] += 1
        task = (pod["metadata"].get("labels") or {}).get("volcano.sh/task-spec", "")
        tasks.setdefault(task, Counter())[phase] += 1
    return counts, {t: {"phase": dict(c)} for t, c in tasks.items()}


def _sync_pods(ctx: Ctx, job: Obj, version: int) -> None:
    """syncJob: create the missing pods `<job>-<task>-<index>` of the current version."""
    spec = job["spec"]
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    existing = {p["metadata"]["name"]: p for p in ctx.children(job, "Pod")}
    for task in spec.get("tasks") or []:
        tname = task.get("name", "task")
        for i in range(int(task.get("replicas", 1))):
            labels = {
                "volcano.sh/job-name": name,
                "volcano.sh/job-namespace": ns,
                "volcano.sh/queue-name": spec.get("queue", "default"),
                "volcano.sh/task-spec": tname,
                "volcano.sh/job-version": str(version),
            }
            annotations = {
                "volcano.sh/task-index": str(i),
                "scheduling.k8s.io/group-name": f"{name}-{job['metadata']['uid']}",
            }
            template = dict(task.get("template") or {})
            pspec = {
                **(template.get("spec") or {}),
                "schedulerName": spec.get("schedulerName", "volcano"),
            }
            ensure_pod(
                ctx,
                job,
                existing,
                f"{name}-{tname}-{i}",
                {**template, "spec": pspec},
                labels=labels,
                annotations=annotations,
            )
