"""JobSet and TrainJob (Trainer v2 runs a TrainJob as a JobSet); see `workloads`."""

from __future__ import annotations

from typing import Any

from launch_agent.sandbox.cluster.children import (
    finished,
    job_counts,
    served,
)
from launch_agent.sandbox.cluster.common import (
    Ctx,
    condition,
    has_condition,
    merge_conditions,
    owner_ref,
    seconds_of,
)
from launch_agent.sandbox.cluster.events import warn_once
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.store import Obj

# --- JobSet -----------------------------------------------------------------------------------
# kubernetes-sigs/jobset v0.12 `pkg/controllers/jobset_controller.go` (reconcile,
# reconcileReplicatedJobs, createJobs) and `failure_policy.go` (executeFailurePolicy).
# `startup_policy.go` and `depends_on.go`: with `startupPolicy.startupPolicyOrder: InOrder`
# a replicatedJob's Jobs are created only once every earlier one has all its Jobs ready,
# succeeded or failed (`allReplicasStarted`), with the conditions StartupPolicyInProgress then
# StartupPolicyCompleted; a replicatedJob with `dependsOn` is created only once each
# dependency reached `Ready` (ready + succeeded + failed Jobs = replicas) or `Complete`
# (succeeded = replicas). The in-order resume of a suspended JobSet is not modelled.

FAILED_JOBS = ("FailedJobs", "jobset failed due to one or more job failures")
MAX_RESTARTS = ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
FAIL_ACTION = ("FailJobSetFailurePolicyAction", "applying FailJobSet failure policy action")
RESTART_ACTION = (
    "RestartJobSetFailurePolicyAction",
    "applying RestartJobSet failure policy action",
)
RESTART_IGNORING = (
    "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction",
    "applying RestartJobSetAndIgnoreMaxRestarts failure policy action",
)
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
SOURCE = "jobset"


def reconcile_jobset(ctx: Ctx, js: Obj) -> None:
    spec, status, now = js["spec"], dict(js.get("status") or {}), ctx.ts()
    if status.get("terminalState"):
        _ttl_after_finished(ctx, js)
        return
    name = js["metadata"]["name"]
    restarts = int(status.get("restarts", 0))
    suspend = bool(spec.get("suspend"))
    current: list[Obj] = []
    for job in ctx.children(js, "Job"):
        attempt = int((job["metadata"].get("labels") or {}).get(RESTART_ATTEMPT, "0") or 0)
        if attempt < restarts:
            ctx.delete(job, propagation="Foreground")  # "marked for deletion"
        elif not job["metadata"].get("deletionTimestamp"):
            current.append(job)
    jobs = {j["metadata"]["name"]: j for j in ctx.children(js, "Job")}
    rj_status, conditions = [], list(status.get("conditions") or [])
    # calculateReplicatedJobStatuses: the counts the startup rules read, from the Jobs of
    # this attempt as they are at the start of the pass.
    counts = {
        rj["name"]: job_counts([j for j in current if _replicated_job(j) == rj["name"]])
        for rj in spec.get("replicatedJobs") or []
    }
    in_order = (spec.get("startupPolicy") or {}).get("startupPolicyOrder") == "InOrder"
    replicas_of: dict[str, int] = {}
    waiting = False  # an InOrder replicatedJob was created and is not started yet
    for rj in spec.get("replicatedJobs") or []:
        replicas_of[rj["name"]] = int(rj.get("replicas", 1))
        create = (
            not waiting
            and _dependency_reached(rj, replicas_of, counts)
            and not (in_order and not suspend and _all_started(rj, counts))
        )
        mine = []
        for i in range(int(rj.get("replicas", 1))):
            job_name = f"{name}-{rj['name']}-{i}"
            found = jobs.get(job_name)
            if found is None and not create:
                continue  # reconcileReplicatedJobs: not yet (dependsOn, startupPolicy)
            if found is None:
                try:
                    job = ctx.create("jobs", js["metadata"]["namespace"], _child_job(js, rj, i))
                except ApiError as exc:
                    # reconcileReplicatedJobs: Eventf(Warning, JobCreationFailed, err.Error()).
                    warn_once(ctx, js, "JobCreationFailed", exc.message, SOURCE)
                    return
                current.append(job)
            elif found["metadata"].get("deletionTimestamp"):
                continue  # an old attempt's Job still going; its successor waits
            elif bool(found["spec"].get("suspend")) != suspend:
                job = ctx.update({**found, "spec": {**found["spec"], "suspend": suspend}})
            else:
                job = found
            mine.append(job)
        rj_status.append({"name": rj["name"], **job_counts(mine)})
        if create and in_order and not suspend:
            # "return to wait for jobs to be ready" before the next replicatedJob.
            waiting = True
    status["replicatedJobsStatus"] = rj_status
    if in_order and not suspend:
        conditions = _startup_condition(ctx, js, conditions, completed=not waiting, now=now)
        status["conditions"] = conditions
    failed = [j for j in current if has_condition(j, "Failed")]
    policy = spec.get("successPolicy") or {}
    targets = policy.get("targetReplicatedJobs") or [
        rj["name"] for rj in spec.get("replicatedJobs") or []
    ]
    target_jobs = [
        j
        for j in current
        if j["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") in targets
    ]
    done = [j for j in target_jobs if has_condition(j, "Complete")]
    expected = sum(
        int(rj.get("replicas", 1))
        for rj in spec.get("replicatedJobs") or []
        if rj["name"] in targets
    )
    if failed:
        if _execute_failure_policy(ctx, js, status, failed, now):
            for job in current:
                if not finished(job):
                    ctx.delete(job, propagation="Foreground")
        ctx.set_status(js, status)
        return
    if done and (len(done) >= expected if policy.get("operator", "All") == "All" else True):
        message = "jobset completed successfully"
        conditions = merge_conditions(
            conditions, [condition("Completed", True, "AllJobsCompleted", message, now)]
        )
        status.update(conditions=conditions, terminalState="Completed")
        ctx.event(js, "Normal", "AllJobsCompleted", message, SOURCE)
    elif suspend:
        status["conditions"] = merge_conditions(
            conditions, [condition("Suspended", True, "SuspendedJobs", "jobset is suspended", now)]
        )
    elif any(c.get("type") == "Suspended" for c in conditions):
        status["conditions"] = merge_conditions(
            conditions, [condition("Suspended", False, "ResumeJobs", "jobset is resumed", now)]
        )
    status.setdefault("restarts", restarts)
    ctx.set_status(js, status)


def _ttl_after_finished(ctx: Ctx, js: Obj) -> None:
    """`ttl_after_finished.go` (executeTTLAfterFinishedPolicy): a finished JobSet with
    `ttlSecondsAfterFinished` is deleted (Foreground) that long after its Completed or Failed
    condition's lastTransitionTime, else requeued for the rest. The TTL is read from the
    JobSet at each reconcile: the webhook leaves it mutable (`jobset_webhook.go`,
    ValidateUpdate holds only replicatedJobs and managedBy)."""
    ttl = js["spec"].get("ttlSecondsAfterFinished")
    if ttl is None or js["metadata"].get("deletionTimestamp"):
        return
    finished_at = max(
        (
            seconds_of(ctx, c.get("lastTransitionTime")) or 0.0
            for c in (js.get("status") or {}).get("conditions") or []
            if c.get("type") in ("Completed", "Failed") and c.get("status") == "True"
        ),
        default=None,
    )
    if finished_at is None:
        return  # "unable to find the time when the JobSet finished": left alone
    if ctx.t >= finished_at + float(ttl):
        ctx.delete(js, propagation="Foreground")
    else:
        ctx.wake_at(finished_at + float(ttl))


def _replicated_job(job: Obj) -> str:
    return str((job["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name"))


def _all_started(rj: dict[str, Any], counts: dict[str, dict[str, int]]) -> bool:
    """startup_policy.go `allReplicasStarted`: every Job ready, succeeded or failed."""
    got = counts.get(rj["name"]) or {}
    return int(rj.get("replicas", 1)) == got.get("failed", 0) + got.get("ready", 0) + got.get(
        "succeeded", 0
    )


def _dependency_reached(
    rj: dict[str, Any], replicas_of: dict[str, int], counts: dict[str, dict[str, int]]
) -> bool:
    """depends_on.go `dependencyReachedStatus`: `Complete` needs every Job of the dependency
    succeeded, `Ready` every one ready, succeeded or failed."""
    for dep in rj.get("dependsOn") or []:
        got, wanted = counts.get(dep.get("name", "")), replicas_of.get(dep.get("name", ""))
        if got is None or wanted is None:
            return False
        if dep.get("status") == "Complete" and wanted != got["succeeded"]:
            return False
        if (
            dep.get("status") == "Ready"
            and wanted != got["failed"] + got["ready"] + got["succeeded"]
        ):
            return False
    return True


STARTUP = {
    True: (
        "StartupPolicyCompleted",
        "InOrderStartupPolicyCompleted",
        "in order startup policy has completed",
    ),
    False: (
        "StartupPolicyInProgress",
        "InOrderStartupPolicyInProgress",
        "in order startup policy is in progress",
    ),
}


def _startup_condition(
    ctx: Ctx, js: Obj, conditions: list[dict[str, Any]], *, completed: bool, now: str
) -> list[dict[str, Any]]:
    """setInOrderStartupPolicy{InProgress,Completed}Condition through `updateCondition`: the
    two are exclusive (the other one turns False), a change is a Normal Event."""
    kind, reason, message = STARTUP[completed]
    other = STARTUP[not completed][0]
    out = [dict(c) for c in conditions]
    changed = False
    for cond in out:
        if cond.get("type") == other and cond.get("status") == "True":
            cond["status"] = "False"
            changed = True
    existing = next((c for c in out if c.get("type") == kind), None)
    if existing is None:
        out.append(condition(kind, True, reason, message, now))
        changed = True
    elif existing.get("status") != "True":
        existing.update(condition(kind, True, reason, message, now))
        changed = True
    if changed:
        ctx.event(js, "Normal", reason, message, SOURCE)
    return out


def _child_job(js: Obj, rj: dict[str, Any], index: int) -> Obj:
    """constructJob: labels and annotations on the Job and its pod template."""
    name = js["metadata"]["name"]
    labels = {
        "jobset.sigs.k8s.io/jobset-name": name,
        "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
        "jobset.sigs.k8s.io/job-index": str(index),
        "jobset.sigs.k8s.io/replicatedjob-replicas": str(rj.get("replicas", 1)),
        RESTART_ATTEMPT: str(int((js.get("status") or {}).get("restarts", 0))),
    }
    template = rj.get("template") or {}
    jspec = dict(template.get("spec") or {})
    ptemplate = dict(jspec.get("template") or {})
    pmeta = dict(ptemplate.get("metadata") or {})
    pmeta["labels"] = {**(pmeta.get("labels") or {}), **labels}
    jspec["template"] = {**ptemplate, "metadata": pmeta}
    jspec["suspend"] = bool(js["spec"].get("suspend"))
    tmeta = template.get("metadata") or {}
    return {
        "metadata": {
            "name": f"{name}-{rj['name']}-{index}",
            "labels": {**(tmeta.get("labels") or {}), **labels},
            "annotations": dict(tmeta.get("annotations") or {}),
            "ownerReferences": [owner_ref(js)],
        },
        "spec": jspec,
    }


def _first_failed(jobs: list[Obj]) -> Obj:
    """findFirstFailedJob: the earliest Failed condition."""
    return min(jobs, key=lambda j: str(_failed_condition(j).get("lastTransitionTime", "")))


def _failed_condition(job: Obj) -> dict[str, Any]:
    return next(
        (
            dict(c)
            for c in (job.get("status") or {}).get("conditions") or []
            if c.get("type") == "Failed" and c.get("status") == "True"
        ),
        {},
    )


def _execute_failure_policy(
    ctx: Ctx, js: Obj, status: dict[str, Any], failed: list[Obj], now: str
) -> bool:
    """executeFailurePolicy. True when the JobSet failed (its unfinished Jobs go)."""
    policy = js["spec"].get("failurePolicy")
    if policy is None:
        first = _first_failed(failed)["metadata"]["name"]
        _set_failed(ctx, js, status, FAILED_JOBS, first)
        return True
    action, job, rule = "RestartJobSet", _first_failed(failed), None
    for candidate in policy.get("rules") or []:
        matching = [j for j in failed if _rule_applies(candidate, j)]
        if matching:
            action, job, rule = str(candidate.get("action")), _first_failed(matching), candidate
            break
    first = job["metadata"]["name"]
    if action == "FailJobSet":
        _set_failed(ctx, js, status, FAIL_ACTION, first)
        return True
    counted = int(status.get("restartsCountTowardsMax", 0))
    if action == "RestartJobSet" and counted >= int(policy.get("maxRestarts", 0)):
        _set_failed(ctx, js, status, MAX_RESTARTS, first)
        return True
    # failurePolicyRecreateAll: a new attempt; the old attempt's Jobs are deleted next pass.
    event_reason, base = RESTART_ACTION if action == "RestartJobSet" else RESTART_IGNORING
    message = f"{base} (first failed job: {first})"
    status["restarts"] = int(status.get("restarts", 0)) + 1
    if action == "RestartJobSet":
        status["restartsCountTowardsMax"] = counted + 1
    reason = (
        f"FailurePolicy_{rule['name']}" if rule and rule.get("name") else "DefaultFailurePolicy"
    )
    status["conditions"] = merge_conditions(
        status.get("conditions"), [condition("RestartingJobSet", True, reason, message, now)]
    )
    ctx.event(js, "Warning", reason, message, SOURCE)
    ctx.event(js, "Warning", event_reason, message, SOURCE)
    return False


def _rule_applies(rule: dict[str, Any], job: Obj) -> bool:
    """ruleIsApplicable (message patterns not modelled)."""
    reasons = rule.get("onJobFailureReasons") or []
    if reasons and _failed_condition(job).get("reason") not in reasons:
        return False
    targets = rule.get("targetReplicatedJobs") or []
    parent = (job["metadata"].get("labels") or {}).get("jobset.sigs.k8s.io/replicatedjob-name")
    return not targets or parent in targets


def _set_failed(
    ctx: Ctx, js: Obj, status: dict[str, Any], words: tuple[str, str], first: str
) -> None:
    """setJobSetFailedCondition (messageWithFirstFailedJob), and the Warning Event setCondition
    emits with it."""
    reason, message, now = words[0], f"{words[1]} (first failed job: {first})", ctx.ts()
    status["conditions"] = merge_conditions(
        status.get("conditions"), [condition("Failed", True, reason, message, now)]
    )
    status["terminalState"] = "Failed"
    ctx.event(js, "Warning", reason, message, SOURCE)


# --- TrainJob ---------------------------------------------------------------------------------
# kubeflow/trainer `pkg/controller/trainjob_controller.go` (Reconcile, setSuspendedCondition) and
# `pkg/runtime/framework/plugins/jobset/jobset.go` (Build, Status).

JOBSET_API = "jobset.x-k8s.io/v1alpha2"


def reconcile_trainjob(ctx: Ctx, tj: Obj) -> None:
    spec, status, now = tj["spec"], dict(tj.get("status") or {}), ctx.ts()
    if has_condition(tj, "Complete") or has_condition(tj, "Failed"):
        return  # trainjob.IsTrainJobFinished: no more reconcileObjects
    suspend = bool(spec.get("suspend"))
    jobsets = ctx.children(tj, "JobSet") if served(ctx, "jobsets.jobset.x-k8s.io") else []
    if not jobsets:
        error = _create_jobset(ctx, tj)
        if error is not None:
            # "TrainJob resources reconciliation failed: %.950v" (+ " ..." past 950 chars).
            message = f"TrainJob resources reconciliation failed: {error[:950]}"
            if len(error) > 950:
                message += " ..."
            warn_once(ctx, tj, "TrainJobResourcesCreationFailed", message, "trainjob-controller")
        _set_suspended(status, suspend, now)
        ctx.set_status(tj, status)
        return
    js = jobsets[0]
    if bool(js["spec"].get("suspend")) != suspend:
        js = ctx.update({**js, "spec": {**js["spec"], "suspend": suspend}})
    _set_suspended(status, suspend, now)
    jstatus = js.get("status") or {}
    # JobSet.Status: the JobSet's Completed / Failed conditions are copied with their reason,
    # message and time, only the type renamed (Complete / Failed).
    copied = []
    for cond in jstatus.get("conditions") or []:
        if cond.get("status") != "True":
            continue
        if cond.get("type") == "Completed":
            copied.append({**cond, "type": "Complete"})
        elif cond.get("type") == "Failed":
            copied.append(dict(cond))
    status["conditions"] = merge_conditions(status.get("conditions"), copied)
    status["jobsStatus"] = [
        {k: rj.get(k, 0) for k in ("name", "ready", "succeeded", "failed", "active", "suspended")}
        for rj in jstatus.get("replicatedJobsStatus") or []
    ]
    ctx.set_status(tj, status)


def _set_suspended(status: dict[str, Any], suspend: bool, now: str) -> None:
    conditions = status.get("conditions") or []
    if suspend:
        new = condition("Suspended", True, "Suspended", "TrainJob is suspended", now)
    elif any(c.get("type") == "Suspended" and c.get("status") == "True" for c in conditions):
        new = condition("Suspended", False, "Resumed", "TrainJob is resumed", now)
    else:
        return
    status["conditions"] = merge_conditions(conditions, [new])


def _create_jobset(ctx: Ctx, tj: Obj) -> str | None:
    """The JobSet plugin's Build, applied; the API error's text when it cannot be created."""
    if not served(ctx, "jobsets.jobset.x-k8s.io"):
        # controller-runtime's error for an unknown kind (no JobSet CRD installed).
        return f'no matches for kind "JobSet" in version "{JOBSET_API}"'
    spec, name = tj["spec"], tj["metadata"]["name"]
    trainer = spec.get("trainer") or {}
    nodes = int(trainer.get("numNodes", 1))
    container: dict[str, Any] = {
        "name": "node",
        "image": trainer.get("image") or "pytorch/pytorch:latest",
    }
    for key in ("command", "args", "env"):
        if trainer.get(key):
            container[key] = trainer[key]
    if trainer.get("resourcesPerNode"):
        container["resources"] = trainer["resourcesPerNode"]
    labels = {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
    body = {
        "apiVersion": JOBSET_API,
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "labels": dict(tj["metadata"].get("labels") or {}),
            "ownerReferences": [owner_ref(tj)],
        },
        "spec": {
            "suspend": bool(spec.get("suspend")),
            "replicatedJobs": [
                {
                    "name": "node",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "parallelism": nodes,
                            "completions": nodes,
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"labels": labels},
                                "spec": {"restartPolicy": "Never", "containers": [container]},
                            },
                        }
                    },
                }
            ],
        },
    }
    try:
        ctx.create("jobsets.jobset.x-k8s.io", tj["metadata"]["namespace"], body)
    except ApiError as exc:
        return exc.message
    return None
