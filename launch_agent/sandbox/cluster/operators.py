"""PyTorchJob, LeaderWorkerSet, RayJob and Volcano Job controllers; see `workloads`."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from launch_agent.sandbox.cluster.children import (
    ensure_pod,
    is_ready,
    pod_phase,
)
from launch_agent.sandbox.cluster.common import (
    Ctx,
    condition,
    has_condition,
    merge_conditions,
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
