"""Controllers for the custom workload kinds, each writing status in its CRD's shape.

- JobSet (jobset.x-k8s.io/v1alpha2): Jobs `<js>-<replicatedJob>-<i>`; status
  `replicatedJobsStatus`, conditions `Completed` / `Failed` / `Suspended`, `terminalState`,
  `restarts` (honours `failurePolicy.maxRestarts`, `successPolicy`, `suspend`).
- PyTorchJob (kubeflow.org/v1): pods `<job>-master-0`, `<job>-worker-<i>`; conditions
  `Created` / `Running` / `Succeeded` / `Failed` (reasons `PyTorchJob<Type>`),
  `replicaStatuses`, `startTime`, `completionTime` (honours `runPolicy.suspend`).
- TrainJob (trainer.kubeflow.org/v1alpha1): a JobSet of the same name (one `node` job of
  `numNodes` pods); conditions `Complete` / `Failed` / `Suspended`, `jobsStatus`.
- LeaderWorkerSet (leaderworkerset.x-k8s.io/v1): pods `<lws>-<g>` (leader) and `<lws>-<g>-<i>`;
  `replicas`, `readyReplicas`, `updatedReplicas`, conditions `Available` / `Progressing`,
  `hpaPodSelector`.
- RayJob (ray.io/v1): head and worker pods (they run until the job ends), then a submitter Job
  named like the RayJob that plays the outcome; `jobStatus`, `jobDeploymentStatus`,
  `rayClusterName`, `rayClusterStatus`, `startTime`, `endTime`, `succeeded` / `failed`,
  `reason`, `message` (honours `activeDeadlineSeconds`, `shutdownAfterJobFinishes`).
- Volcano Job (batch.volcano.sh/v1alpha1): pods `<job>-<task>-<i>`; `state.phase`,
  `pending` / `running` / `succeeded` / `failed`, `taskStatusCount`, `conditions` (a failed pod
  fails the job: `policies` and `maxRetry` are not modelled).

A controller only runs for kinds whose CRD is registered. The upstream operators do more
(gang scheduling, elastic policies, restarts by exit code); the sandbox models what an agent
reads to decide that a run is queued, running, succeeded or failed, and why.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from launch_agent.sandbox.cluster.common import (
    Ctx,
    condition,
    has_condition,
    merge_conditions,
    owner_ref,
    pod_from_template,
)
from launch_agent.sandbox.kube.store import Obj

RUN_FOREVER = {"sandbox.launch-agent.io/outcome": "run"}


def _phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def _ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _suffix(obj: Obj) -> str:
    return hashlib.sha256(obj["metadata"]["uid"].encode()).hexdigest()[:5]


def _served(ctx: Ctx, resource: str) -> bool:
    return ctx.store.registry.find(resource) is not None


def _ensure_pod(
    ctx: Ctx,
    owner: Obj,
    existing: dict[str, Obj],
    name: str,
    template: Obj,
    *,
    labels: dict[str, str],
    annotations: dict[str, str] | None = None,
) -> Obj:
    if name in existing:
        return existing[name]
    pod = pod_from_template(template, owner, name=name, labels=labels, annotations=annotations)
    created = ctx.create("pods", owner["metadata"]["namespace"], pod)
    ctx.event(
        owner,
        "Normal",
        "SuccessfulCreatePod",
        f"Created pod: {name}",
        f"{owner['kind'].lower()}-controller",
    )
    return created


def _job_counts(jobs: list[Obj]) -> dict[str, int]:
    counts = Counter[str]()
    for job in jobs:
        status = job.get("status") or {}
        if has_condition(job, "Complete"):
            counts["succeeded"] += 1
        elif has_condition(job, "Failed"):
            counts["failed"] += 1
        elif job["spec"].get("suspend"):
            counts["suspended"] += 1
        elif status.get("active"):
            counts["active"] += 1
        parallelism = int(job["spec"].get("parallelism", 1))
        if status.get("ready", 0) + status.get("succeeded", 0) >= parallelism and not has_condition(
            job, "Failed"
        ):
            counts["ready"] += 1
    return {k: counts[k] for k in ("ready", "succeeded", "failed", "active", "suspended")}


# --- JobSet -----------------------------------------------------------------------------------


def reconcile_jobset(ctx: Ctx, js: Obj) -> None:
    spec, status, now = js["spec"], dict(js.get("status") or {}), ctx.ts()
    if status.get("terminalState"):
        return
    name, ns = js["metadata"]["name"], js["metadata"]["namespace"]
    jobs = {j["metadata"]["name"]: j for j in ctx.children(js, "Job")}
    suspend = bool(spec.get("suspend"))
    rj_status, conditions = [], list(status.get("conditions") or [])
    restarts = int(status.get("restarts", 0))
    for rj in spec.get("replicatedJobs") or []:
        mine = []
        for i in range(int(rj.get("replicas", 1))):
            job_name = f"{name}-{rj['name']}-{i}"
            labels = {
                "jobset.sigs.k8s.io/jobset-name": name,
                "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                "jobset.sigs.k8s.io/job-index": str(i),
                "jobset.sigs.k8s.io/replicatedjob-replicas": str(rj.get("replicas", 1)),
                "jobset.sigs.k8s.io/restart-attempt": str(restarts),
            }
            job = jobs.get(job_name)
            if job is None:
                template = rj.get("template") or {}
                jspec = dict(template.get("spec") or {})
                ptemplate = dict(jspec.get("template") or {})
                pmeta = dict(ptemplate.get("metadata") or {})
                pmeta["labels"] = {**(pmeta.get("labels") or {}), **labels}
                jspec["template"] = {**ptemplate, "metadata": pmeta}
                jspec["suspend"] = suspend
                tmeta = template.get("metadata") or {}
                body = {
                    "metadata": {
                        "name": job_name,
                        "labels": {**(tmeta.get("labels") or {}), **labels},
                        "annotations": dict(tmeta.get("annotations") or {}),
                        "ownerReferences": [owner_ref(js)],
                    },
                    "spec": jspec,
                }
                job = ctx.create("jobs", ns, body)
            elif bool(job["spec"].get("suspend")) != suspend:
                job = ctx.update({**job, "spec": {**job["spec"], "suspend": suspend}})
            mine.append(job)
        rj_status.append({"name": rj["name"], **_job_counts(mine)})
    status["replicatedJobsStatus"] = rj_status
    all_jobs = list(ctx.children(js, "Job"))
    failed = [j for j in all_jobs if has_condition(j, "Failed")]
    policy = spec.get("successPolicy") or {}
    targets = policy.get("targetReplicatedJobs") or [
        rj["name"] for rj in spec.get("replicatedJobs") or []
    ]
    target_jobs = [
        j
        for j in all_jobs
        if j["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name") in targets
    ]
    done = [j for j in target_jobs if has_condition(j, "Complete")]
    expected = sum(
        int(rj.get("replicas", 1))
        for rj in spec.get("replicatedJobs") or []
        if rj["name"] in targets
    )
    if failed:
        max_restarts = int((spec.get("failurePolicy") or {}).get("maxRestarts", 0))
        if restarts < max_restarts:
            for job in all_jobs:
                ctx.delete(job, propagation="Foreground")
            status["restarts"] = restarts + 1
            ctx.set_status(js, status)
            return
        reason, message = (
            ("ReachedMaxRestarts", "jobset failed due to reaching max number of restarts")
            if max_restarts
            else ("FailedJobs", "jobset failed due to one or more job failures")
        )
        conditions = merge_conditions(conditions, [condition("Failed", True, reason, message, now)])
        status.update(conditions=conditions, terminalState="Failed")
        for job in all_jobs:
            if not _finished(job):
                ctx.delete(job, propagation="Foreground")
    elif done and (len(done) >= expected if policy.get("operator", "All") == "All" else True):
        conditions = merge_conditions(
            conditions,
            [
                condition(
                    "Completed", True, "AllJobsCompleted", "jobset completed successfully", now
                )
            ],
        )
        status.update(conditions=conditions, terminalState="Completed")
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


def _finished(job: Obj) -> bool:
    return has_condition(job, "Complete") or has_condition(job, "Failed")


# --- PyTorchJob -------------------------------------------------------------------------------


def reconcile_pytorchjob(ctx: Ctx, job: Obj) -> None:
    spec, status, now = job["spec"], dict(job.get("status") or {}), ctx.ts()
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    kind = "PyTorchJob"
    conditions = list(status.get("conditions") or [])
    if has_condition(job, "Succeeded") or has_condition(job, "Failed"):
        return
    if not conditions:
        conditions = [
            _kf_condition("Created", True, f"{kind}Created", f"{kind} {name} is created.", now)
        ]
        ctx.event(
            job, "Normal", f"{kind}Created", f"{kind} {name} is created.", "pytorchjob-controller"
        )
    replicas = spec.get("pytorchReplicaSpecs") or {}
    suspended = bool((spec.get("runPolicy") or {}).get("suspend"))
    existing = {p["metadata"]["name"]: p for p in ctx.children(job, "Pod")}
    replica_status: dict[str, dict[str, Any]] = {}
    for rtype, rspec in sorted(replicas.items()):
        counts = Counter[str]()
        for i in range(int(rspec.get("replicas", 1))):
            pod_name = f"{name}-{rtype.lower()}-{i}"
            if suspended:
                if pod_name in existing:
                    ctx.delete(existing[pod_name])
                continue
            template = dict(rspec.get("template") or {})
            pspec = dict(template.get("spec") or {})
            policy = rspec.get("restartPolicy", "OnFailure")
            pspec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
            labels = {
                "training.kubeflow.org/job-name": name,
                "training.kubeflow.org/operator-name": "pytorchjob-controller",
                "training.kubeflow.org/replica-type": rtype.lower(),
                "training.kubeflow.org/replica-index": str(i),
            }
            if rtype == "Master":
                labels["training.kubeflow.org/job-role"] = "master"
            pod = _ensure_pod(
                ctx, job, existing, pod_name, {**template, "spec": pspec}, labels=labels
            )
            phase = _phase(pod)
            counts[
                "succeeded" if phase == "Succeeded" else "failed" if phase == "Failed" else "active"
            ] += 1
        replica_status[rtype] = {
            "active": counts["active"],
            "succeeded": counts["succeeded"],
            "failed": counts["failed"],
            "selector": ",".join(
                [
                    f"training.kubeflow.org/job-name={name}",
                    "training.kubeflow.org/operator-name=pytorchjob-controller",
                    f"training.kubeflow.org/replica-type={rtype.lower()}",
                ]
            ),
        }
    status["replicaStatuses"] = replica_status
    if suspended:
        conditions = merge_conditions(
            conditions,
            [
                _kf_condition(
                    "Suspended", True, f"{kind}Suspended", f"{kind} {name} is suspended.", now
                )
            ],
        )
        status["conditions"] = conditions
        ctx.set_status(job, status)
        return
    status.setdefault("startTime", now)
    failed = {r: s["failed"] for r, s in replica_status.items() if s["failed"]}
    lead = "Master" if "Master" in replica_status else None
    if lead:
        succeeded = replica_status[lead]["succeeded"] == int(replicas[lead].get("replicas", 1))
    else:
        succeeded = all(
            s["succeeded"] == int(replicas[r].get("replicas", 1)) for r, s in replica_status.items()
        )
    if failed:
        rtype, count = sorted(failed.items())[0]
        message = f"{kind} {ns}/{name} has failed because {count} {rtype} replica(s) failed."
        conditions = merge_conditions(
            conditions,
            [
                _kf_condition("Running", False, f"{kind}Failed", message, now),
                _kf_condition("Failed", True, f"{kind}Failed", message, now),
            ],
        )
        status["completionTime"] = now
        ctx.event(job, "Normal", f"{kind}Failed", message, "pytorchjob-controller")
    elif succeeded:
        message = f"{kind} {ns}/{name} successfully completed."
        conditions = merge_conditions(
            conditions,
            [
                _kf_condition("Running", False, f"{kind}Succeeded", message, now),
                _kf_condition("Succeeded", True, f"{kind}Succeeded", message, now),
            ],
        )
        status["completionTime"] = now
    elif any(_phase(p) == "Running" for p in ctx.children(job, "Pod")):
        conditions = merge_conditions(
            conditions,
            [
                _kf_condition(
                    "Running", True, f"{kind}Running", f"{kind} {ns}/{name} is running.", now
                )
            ],
        )
    status["conditions"] = conditions
    status["lastReconcileTime"] = now
    if status == job.get("status") or _same_but_reconcile_time(status, job.get("status") or {}):
        return
    ctx.set_status(job, status)


def _same_but_reconcile_time(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return {k: v for k, v in a.items() if k != "lastReconcileTime"} == {
        k: v for k, v in b.items() if k != "lastReconcileTime"
    }


def _kf_condition(kind: str, status: bool, reason: str, message: str, now: str) -> dict[str, Any]:
    return condition(kind, status, reason, message, now, lastUpdateTime=now)


# --- TrainJob ---------------------------------------------------------------------------------


def reconcile_trainjob(ctx: Ctx, tj: Obj) -> None:
    spec, status, now = tj["spec"], dict(tj.get("status") or {}), ctx.ts()
    name, ns = tj["metadata"]["name"], tj["metadata"]["namespace"]
    if has_condition(tj, "Complete") or has_condition(tj, "Failed"):
        return
    if not _served(ctx, "jobsets.jobset.x-k8s.io"):
        if "JobSetMissing" not in str(status.get("conditions")):
            message = "the JobSet CRD is not installed; the TrainJob cannot run"
            status["conditions"] = [condition("Created", False, "JobSetMissing", message, now)]
            ctx.event(tj, "Warning", "JobSetMissing", message, "trainjob-controller")
            ctx.set_status(tj, status)
        return
    trainer = spec.get("trainer") or {}
    suspend = bool(spec.get("suspend"))
    jobsets = ctx.children(tj, "JobSet")
    if not jobsets:
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
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": name,
                "labels": dict(tj["metadata"].get("labels") or {}),
                "ownerReferences": [owner_ref(tj)],
            },
            "spec": {
                "suspend": suspend,
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
        ctx.create("jobsets.jobset.x-k8s.io", ns, body)
        status["conditions"] = [
            condition("Created", True, "JobSetCreated", "the JobSet was created", now)
        ]
        ctx.set_status(tj, status)
        return
    js = jobsets[0]
    if bool(js["spec"].get("suspend")) != suspend:
        js = ctx.update({**js, "spec": {**js["spec"], "suspend": suspend}})
    jstatus = js.get("status") or {}
    status["jobsStatus"] = list(jstatus.get("replicatedJobsStatus") or [])
    conditions = list(status.get("conditions") or [])
    if jstatus.get("terminalState") == "Completed":
        conditions = merge_conditions(
            conditions,
            [condition("Complete", True, "JobsCompleted", "jobset completed successfully", now)],
        )
    elif jstatus.get("terminalState") == "Failed":
        message = next(
            (
                c.get("message", "")
                for c in jstatus.get("conditions") or []
                if c.get("type") == "Failed"
            ),
            "",
        )
        conditions = merge_conditions(
            conditions, [condition("Failed", True, "JobsFailed", message, now)]
        )
    elif suspend:
        conditions = merge_conditions(
            conditions, [condition("Suspended", True, "Suspended", "TrainJob is suspended", now)]
        )
    elif any(c.get("type") == "Suspended" for c in conditions):
        conditions = merge_conditions(
            conditions, [condition("Suspended", False, "Resumed", "TrainJob is resumed", now)]
        )
    status["conditions"] = conditions
    ctx.set_status(tj, status)


# --- LeaderWorkerSet --------------------------------------------------------------------------


def reconcile_lws(ctx: Ctx, lws: Obj) -> None:
    spec, status, now = lws["spec"], dict(lws.get("status") or {}), ctx.ts()
    name = lws["metadata"]["name"]
    lwt = spec.get("leaderWorkerTemplate") or {}
    size, groups = int(lwt.get("size", 1)), int(spec.get("replicas", 1))
    worker = lwt.get("workerTemplate") or {}
    leader = lwt.get("leaderTemplate") or worker
    existing = {p["metadata"]["name"]: p for p in ctx.children(lws, "Pod")}
    ready_groups = 0
    for g in range(groups):
        members = []
        for w in range(size):
            pod_name = f"{name}-{g}" if w == 0 else f"{name}-{g}-{w}"
            labels = {
                "leaderworkerset.sigs.k8s.io/name": name,
                "leaderworkerset.sigs.k8s.io/group-index": str(g),
                "leaderworkerset.sigs.k8s.io/worker-index": str(w),
                "leaderworkerset.sigs.k8s.io/group-key": hashlib.sha256(
                    f"{name}-{g}".encode()
                ).hexdigest()[:40],
            }
            annotations = {"leaderworkerset.sigs.k8s.io/size": str(size)}
            pod = _ensure_pod(
                ctx,
                lws,
                existing,
                pod_name,
                leader if w == 0 else worker,
                labels=labels,
                annotations=annotations,
            )
            members.append(pod)
        if all(_ready(p) for p in members):
            ready_groups += 1
    available = ready_groups == groups
    conditions = merge_conditions(
        status.get("conditions"),
        [
            condition(
                "Available",
                available,
                "AllGroupsReady" if available else "GroupsNotReady",
                "All replicas are ready"
                if available
                else f"{ready_groups}/{groups} replicas are ready",
                now,
            ),
            condition(
                "Progressing",
                not available,
                "GroupsProgressing" if not available else "GroupsReady",
                "Replicas are progressing" if not available else "All replicas are ready",
                now,
            ),
        ],
    )
    status.update(
        replicas=groups,
        readyReplicas=ready_groups,
        updatedReplicas=groups,
        conditions=conditions,
        hpaPodSelector=f"leaderworkerset.sigs.k8s.io/name={name},leaderworkerset.sigs.k8s.io/worker-index=0",
        observedGeneration=lws["metadata"].get("generation", 1),
    )
    ctx.set_status(lws, status)


# --- RayJob -----------------------------------------------------------------------------------


def reconcile_rayjob(ctx: Ctx, rj: Obj) -> None:
    spec, status, now = rj["spec"], dict(rj.get("status") or {}), ctx.ts()
    name, ns = rj["metadata"]["name"], rj["metadata"]["namespace"]
    if status.get("jobDeploymentStatus") in ("Complete", "Failed"):
        if spec.get("shutdownAfterJobFinishes"):
            for pod in ctx.children(rj, "Pod"):
                ctx.delete(pod)
        return
    cluster = status.get("rayClusterName") or f"{name}-{_suffix(rj)}"
    status.update(
        rayClusterName=cluster, jobId=status.get("jobId") or f"{name}-{_suffix(rj)[::-1]}"
    )
    status.setdefault("startTime", now)
    status.setdefault("jobStatus", "PENDING")
    status.setdefault("jobDeploymentStatus", "Initializing")
    rcs = spec.get("rayClusterSpec") or {}
    existing = {p["metadata"]["name"]: p for p in ctx.children(rj, "Pod")}
    base = {
        "ray.io/cluster": cluster,
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/created-by": "kuberay-operator",
    }
    head_t = (rcs.get("headGroupSpec") or {}).get("template") or {}
    head = _ensure_pod(
        ctx,
        rj,
        existing,
        f"{cluster}-head",
        head_t,
        labels={**base, "ray.io/node-type": "head", "ray.io/group": "headgroup"},
        annotations=RUN_FOREVER,
    )
    workers, desired = [], 0
    for group in rcs.get("workerGroupSpecs") or []:
        count = int(group.get("replicas", group.get("minReplicas", 0)))
        desired += count
        for i in range(count):
            labels = {
                **base,
                "ray.io/node-type": "worker",
                "ray.io/group": group.get("groupName", "workers"),
            }
            workers.append(
                _ensure_pod(
                    ctx,
                    rj,
                    existing,
                    f"{cluster}-{group.get('groupName', 'workers')}-worker-{i}",
                    group.get("template") or {},
                    labels=labels,
                    annotations=RUN_FOREVER,
                )
            )
    ready = _ready(head) and all(_ready(w) for w in workers)
    status["rayClusterStatus"] = {
        "state": "ready" if ready else "",
        "desiredWorkerReplicas": desired,
        "availableWorkerReplicas": sum(1 for w in workers if _ready(w)),
        "readyWorkerReplicas": sum(1 for w in workers if _ready(w)),
        "head": {
            "podName": head["metadata"]["name"],
            "podIP": (head.get("status") or {}).get("podIP", ""),
        },
    }
    deadline = spec.get("activeDeadlineSeconds")
    if not ready:
        ctx.set_status(rj, status)
        return
    status["dashboardURL"] = f"{cluster}-head-svc.{ns}.svc.cluster.local:8265"
    submitters = ctx.children(rj, "Job")
    if not submitters:
        image = ((head_t.get("spec") or {}).get("containers") or [{}])[0].get(
            "image", "rayproject/ray:latest"
        )
        template = spec.get("submitterPodTemplate") or {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "ray-job-submitter",
                        "image": image,
                        "command": [
                            "ray",
                            "job",
                            "submit",
                            "--address",
                            f"http://{status['dashboardURL']}",
                            "--submission-id",
                            status["jobId"],
                            "--",
                            *str(spec.get("entrypoint", "")).split(),
                        ],
                    }
                ],
            }
        }
        backoff = int((spec.get("submitterConfig") or {}).get("backoffLimit", 2))
        ctx.create(
            "jobs",
            ns,
            {
                "metadata": {
                    "name": name,
                    "labels": {"ray.io/originated-from-crd": "RayJob"},
                    "ownerReferences": [owner_ref(rj)],
                },
                "spec": {"backoffLimit": backoff, "template": template},
            },
        )
        status.update(jobDeploymentStatus="Running", jobStatus="RUNNING")
        ctx.set_status(rj, status)
        return
    sub = submitters[0]
    started = status.get("startTime")
    if has_condition(sub, "Complete"):
        status.update(
            jobDeploymentStatus="Complete",
            jobStatus="SUCCEEDED",
            endTime=now,
            succeeded=1,
            failed=0,
            message="Job finished successfully.",
        )
    elif has_condition(sub, "Failed"):
        status.update(
            jobDeploymentStatus="Failed",
            jobStatus="FAILED",
            endTime=now,
            succeeded=0,
            failed=1,
            reason="AppFailed",
            message="Job submission has failed: the submitter Job reached its backoff limit",
        )
    elif deadline is not None and started is not None and _elapsed(ctx, started) >= float(deadline):
        status.update(
            jobDeploymentStatus="Failed",
            jobStatus="STOPPED",
            endTime=now,
            reason="DeadlineExceeded",
            message=(
                f"The RayJob has passed the activeDeadlineSeconds. StartTime: {started}."
                f" ActiveDeadlineSeconds: {deadline}"
            ),
        )
    elif deadline is not None and started is not None:
        ctx.wake_at(ctx.t + float(deadline) - _elapsed(ctx, started))
    ctx.set_status(rj, status)


def _elapsed(ctx: Ctx, stamp: str) -> float:
    from datetime import datetime

    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=ctx.clock.now().tzinfo)
    return (ctx.clock.now() - moment).total_seconds()


# --- Volcano Job ------------------------------------------------------------------------------


def reconcile_volcano(ctx: Ctx, job: Obj) -> None:
    spec, status, now = job["spec"], dict(job.get("status") or {}), ctx.ts()
    name, ns = job["metadata"]["name"], job["metadata"]["namespace"]
    state = dict(status.get("state") or {})
    if state.get("phase") in ("Completed", "Failed", "Aborted", "Terminated"):
        return
    existing = {p["metadata"]["name"]: p for p in ctx.children(job, "Pod")}
    counts = Counter[str]()
    task_counts: dict[str, dict[str, dict[str, int]]] = {}
    total = 0
    for task in spec.get("tasks") or []:
        tname = task.get("name", "task")
        per = Counter[str]()
        for i in range(int(task.get("replicas", 1))):
            total += 1
            labels = {
                "volcano.sh/job-name": name,
                "volcano.sh/job-namespace": ns,
                "volcano.sh/queue-name": spec.get("queue", "default"),
                "volcano.sh/task-spec": tname,
                "volcano.sh/job-version": "0",
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
            pod = _ensure_pod(
                ctx,
                job,
                existing,
                f"{name}-{tname}-{i}",
                {**template, "spec": pspec},
                labels=labels,
                annotations=annotations,
            )
            phase = _phase(pod)
            per[phase] += 1
            counts[phase] += 1
        task_counts[tname] = {"phase": dict(per)}
    min_available = int(spec.get("minAvailable", total))
    min_success = spec.get("minSuccess")
    if counts["Failed"]:
        phase, reason = "Failed", "PodFailed"
    elif counts["Succeeded"] >= (int(min_success) if min_success is not None else total):
        phase, reason = "Completed", "Completed"
    elif counts["Running"] + counts["Succeeded"] >= min_available:
        phase, reason = "Running", ""
    else:
        phase, reason = "Pending", ""
    if state.get("phase") != phase:
        state = {"phase": phase, "lastTransitionTime": now, "reason": reason, "message": ""}
        status["conditions"] = [
            *(status.get("conditions") or []),
            {"status": phase, "lastTransitionTime": now},
        ]
    status.update(
        state=state,
        minAvailable=min_available,
        pending=counts["Pending"],
        running=counts["Running"],
        succeeded=counts["Succeeded"],
        failed=counts["Failed"],
        terminating=0,
        unknown=0,
        version=0,
        retryCount=0,
        taskStatusCount=task_counts,
    )
    ctx.set_status(job, status)


CONTROLLERS = {
    "jobsets.jobset.x-k8s.io": reconcile_jobset,
    "pytorchjobs.kubeflow.org": reconcile_pytorchjob,
    "trainjobs.trainer.kubeflow.org": reconcile_trainjob,
    "leaderworkersets.leaderworkerset.x-k8s.io": reconcile_lws,
    "rayjobs.ray.io": reconcile_rayjob,
    "jobs.batch.volcano.sh": reconcile_volcano,
}
