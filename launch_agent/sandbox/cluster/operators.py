"""The LeaderWorkerSet controller; see `workloads` (the other operators have a module each)."""

from __future__ import annotations

import hashlib
from typing import Any

from launch_agent.sandbox.cluster.children import ensure_pod, is_ready, pod_phase
from launch_agent.sandbox.cluster.common import Ctx, condition
from launch_agent.sandbox.kube.store import Obj

# --- LeaderWorkerSet --------------------------------------------------------------------------
# kubernetes-sigs/lws v0.10 `pkg/controllers/leaderworkerset_controller.go` (updateConditions,
# setCondition) and `pod_controller.go` (handleRestartPolicy). The leader and worker
# StatefulSets are not objects here: the pods are the LeaderWorkerSet's children.

LWS_SOURCE = "leaderworkerset-controller"


def reconcile_lws(ctx: Ctx, lws: Obj) -> None:
    spec, status = lws["spec"], dict(lws.get("status") or {})
    name = lws["metadata"]["name"]
    lwt = spec.get("leaderWorkerTemplate") or {}
    size, groups = int(lwt.get("size", 1)), int(spec.get("replicas", 1))
    worker = lwt.get("workerTemplate") or {}
    leader = lwt.get("leaderTemplate") or worker
    # The CRD defaults restartPolicy to RecreateGroupOnPodRestart.
    policy = lwt.get("restartPolicy") or "RecreateGroupOnPodRestart"
    pods = ctx.children(lws, "Pod")
    existing = {p["metadata"]["name"]: p for p in pods}
    ready_groups = 0
    for g in range(groups):
        names = [f"{name}-{g}" if w == 0 else f"{name}-{g}-{w}" for w in range(size)]
        if policy in ("RecreateGroupOnPodRestart", "RecreateGroupAfterStart"):
            broken = next(
                (existing[n] for n in names if n in existing and _restarted(existing[n])), None
            )
            if broken is not None:
                _recreate_group(ctx, lws, [existing[n] for n in names if n in existing], broken, g)
                continue
        if any(existing.get(n, {}).get("metadata", {}).get("deletionTimestamp") for n in names):
            continue  # the group is going; it is recreated once its pods are gone
        members = []
        for w, pod_name in enumerate(names):
            labels = {
                "leaderworkerset.sigs.k8s.io/name": name,
                "leaderworkerset.sigs.k8s.io/group-index": str(g),
                "leaderworkerset.sigs.k8s.io/worker-index": str(w),
                "leaderworkerset.sigs.k8s.io/group-key": hashlib.sha256(
                    f"{name}-{g}".encode()
                ).hexdigest()[:40],
            }
            annotations = {"leaderworkerset.sigs.k8s.io/size": str(size)}
            members.append(
                ensure_pod(
                    ctx,
                    lws,
                    existing,
                    pod_name,
                    leader if w == 0 else worker,
                    labels=labels,
                    annotations=annotations,
                )
            )
        if all(is_ready(p) and pod_phase(p) == "Running" for p in members):
            ready_groups += 1
    # updateConditions: Available when every group is ready, Progressing otherwise; only the
    # true one is written, the other turned False (setCondition, exclusiveConditionTypes).
    if ready_groups == groups:
        kind, reason, message = "Available", "AllGroupsReady", "All replicas are ready"
    else:
        kind, reason, message = "Progressing", "GroupsProgressing", "Replicas are progressing"
    conditions, changed = _set_true(status.get("conditions") or [], kind, reason, message, ctx.ts())
    if changed:
        ctx.event(
            lws,
            "Normal",
            reason,
            f"{message}, with {ready_groups} groups ready of total {groups} groups",
            LWS_SOURCE,
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


def _restarted(pod: Obj) -> bool:
    """podutils.ContainerRestarted (a Running or Pending pod with a restarted container), or a
    pod that failed for good (the StatefulSet would replace it: the group restarts too)."""
    if pod["metadata"].get("deletionTimestamp"):
        return False
    phase = pod_phase(pod)
    if phase == "Failed":
        return True
    if phase not in ("Running", "Pending"):
        return False
    pstatus = pod.get("status") or {}
    return any(
        int(cs.get("restartCount", 0)) > 0
        for cs in (pstatus.get("initContainerStatuses") or [])
        + (pstatus.get("containerStatuses") or [])
    )


def _recreate_group(ctx: Ctx, lws: Obj, members: list[Obj], broken: Obj, group: int) -> None:
    """handleRestartPolicy: the leader is deleted (foreground, its workers with it)."""
    leader = next(
        (p for p in members if p["metadata"]["name"] == f"{lws['metadata']['name']}-{group}"), None
    )
    for pod in members:
        ctx.delete(pod, propagation="Foreground")
    leader_name = leader["metadata"]["name"] if leader else f"{lws['metadata']['name']}-{group}"
    ctx.event(
        lws,
        "Normal",
        "RecreateGroup",
        f"Worker pod {broken['metadata']['name']} failed, deleted leader pod {leader_name}"
        f" to recreate group {group}",
        LWS_SOURCE,
    )


def _set_true(
    conditions: list[dict[str, Any]], kind: str, reason: str, message: str, now: str
) -> tuple[list[dict[str, Any]], bool]:
    out: list[dict[str, Any]] = []
    found, changed = False, False
    exclusive = {"Available", "Progressing"}
    for old in conditions:
        if old.get("type") == kind:
            found = True
            if old.get("status") != "True":
                out.append(condition(kind, True, reason, message, now))
                changed = True
                continue
        elif old.get("status") == "True" and {old.get("type"), kind} <= exclusive:
            out.append({**old, "status": "False", "lastTransitionTime": now})
            changed = True
            continue
        out.append(dict(old))
    if not found:
        out.append(condition(kind, True, reason, message, now))
        changed = True
    return out, changed
