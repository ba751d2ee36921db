"""PyTorchJob, LeaderWorkerSet, RayJob and Volcano Job controllers; see `workloads`."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from launch_agent.sandbox.cluster.children import (
    RUN_FOREVER,
    elapsed,
    ensure_pod,
    is_ready,
    pod_phase,
    suffix,
)
from launch_agent.sandbox.cluster.common import (
    Ctx,
    condition,
    has_condition,
    merge_conditions,
    owner_ref,
)
from launch_agent.sandbox.kube.store import Obj

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
            pod = ensure_pod(
                ctx, job, existing, pod_name, {**template, "spec": pspec}, labels=labels
            )
            phase = pod_phase(pod)
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
    elif any(pod_phase(p) == "Running" for p in ctx.children(job, "Pod")):
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
            pod = ensure_pod(
                ctx,
                lws,
                existing,
                pod_name,
                leader if w == 0 else worker,
                labels=labels,
                annotations=annotations,
            )
            members.append(pod)
        if all(is_ready(p) for p in members):
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
    cluster = status.get("rayClusterName") or f"{name}-{suffix(rj)}"
    status.update(rayClusterName=cluster, jobId=status.get("jobId") or f"{name}-{suffix(rj)[::-1]}")
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
    head = ensure_pod(
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
                ensure_pod(
                    ctx,
                    rj,
                    existing,
                    f"{cluster}-{group.get('groupName', 'workers')}-worker-{i}",
                    group.get("template") or {},
                    labels=labels,
                    annotations=RUN_FOREVER,
                )
            )
    ready = is_ready(head) and all(is_ready(w) for w in workers)
    status["rayClusterStatus"] = {
        "state": "ready" if ready else "",
        "desiredWorkerReplicas": desired,
        "availableWorkerReplicas": sum(1 for w in workers if is_ready(w)),
        "readyWorkerReplicas": sum(1 for w in workers if is_ready(w)),
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
    elif deadline is not None and started is not None and elapsed(ctx, started) >= float(deadline):
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
        ctx.wake_at(ctx.t + float(deadline) - elapsed(ctx, started))
    ctx.set_status(rj, status)


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
            pod = ensure_pod(
                ctx,
                job,
                existing,
                f"{name}-{tname}-{i}",
                {**template, "spec": pspec},
                labels=labels,
                annotations=annotations,
            )
            phase = pod_phase(pod)
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
