"""The KubeRay RayCluster controller (ray.io/v1): the head and worker pods of a RayJob's cluster.

Follows ray-project/kuberay `ray-operator/controllers/ray/raycluster_controller.go`:
`reconcilePods` creates the head pod (`createHeadPod`, generateName `<cluster>-head-`,
`utils.PodName`) and then each worker group's missing pods (`createWorkerPod`,
`<cluster>-<group>-worker-`); a refused create is a Warning Event on the RayCluster
(`FailedToCreateHeadPod` "Failed to create head Pod <ns>/<name>, <err>", where the name is
still empty because the pod was to be named by the API server, or `FailedToCreateWorkerPod`
"Failed to create worker Pod for the cluster <ns>/<cluster>, <err>") and the reconcile error
`utils.ErrFailedCreateHeadPod` / `ErrFailedCreateWorkerPod` joined with the API error, which
`calculateStatus` turns into the condition `ReplicaFailure` (reason `FailedCreateHeadPod`,
message the joined error) and clears on the next clean pass. A refused head pod stops the
pass: no worker is created before the head. `calculateStatus` sets `state: ready` once every
pod (workers + 1 head) runs, the conditions `HeadPodReady` (the head's PodReady, or
`HeadPodNotFound`), `RayClusterProvisioned` (False `RayClusterPodsProvisioning` until every
pod is ready the first time, then True `AllPodRunningAndReadyFirstTime` for good),
`RayClusterSuspended` / `RayClusterSuspending`, the replica counts and `head.podName`.
`spec.suspend` deletes every pod (`deleteAllPods`), then `state: suspended`.

The controller is retried with the API back-off after a refusal (controller-runtime requeues a
reconcile error rate-limited); client-go's recorder folds the repeated Event into one with a
growing `count`. `lastUpdateTime` is written only with another change, as
`updateRayClusterStatus` skips an update that differs in nothing else
(`inconsistentRayClusterStatus`).
"""

from __future__ import annotations

from typing import Any
from weakref import WeakKeyDictionary

from launch_agent.sandbox.cluster.children import RUN_FOREVER, is_ready, pod_phase
from launch_agent.sandbox.cluster.common import (
    Ctx,
    condition,
    merge_conditions,
    owner_ref,
    pod_from_template,
)
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.store import Obj, Store

SOURCE = "raycluster-controller"
RESOURCE = "rayclusters.ray.io"
API_BACKOFF, MAX_API_BACKOFF = 1.0, 60.0
# ray-operator/controllers/ray/common/pod.go: AutoscalerContainerName, BuildAutoscalerContainer.
AUTOSCALER = "autoscaler"
AUTOSCALER_IMAGE = "quay.io/kuberay/autoscaler:v1.4.2"
# store -> RayCluster uid -> (refusals in a row, when the next attempt may run).
_REFUSED: WeakKeyDictionary[Store, dict[str, tuple[int, float]]] = WeakKeyDictionary()


def cluster_for(rj: Obj, name: str) -> Obj:
    """rayjob_controller.go `constructRayClusterForRayJob`: the RayJob's labels plus the
    originated-from labels, its annotations, its `rayClusterSpec`, owned by the RayJob."""
    meta = rj["metadata"]
    labels = {
        **(meta.get("labels") or {}),
        "ray.io/originated-from-cr-name": meta["name"],
        "ray.io/originated-from-crd": "RayJob",
        "ray.io/job-submission-mode": rj["spec"].get("submissionMode", "K8sJobMode"),
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_ref(rj)],
        },
        "spec": dict(rj["spec"].get("rayClusterSpec") or {}),
    }


def head_pod(ctx: Ctx, rc: Obj) -> Obj | None:
    return next((p for p in _live(ctx, rc) if _node_type(p) == "head"), None)


def reconcile_raycluster(ctx: Ctx, rc: Obj) -> None:
    if rc["metadata"].get("deletionTimestamp"):
        return  # its pods go by ownerReference GC
    spec = rc["spec"]
    failure: tuple[str, str] | None = None
    if spec.get("suspend"):
        for pod in _live(ctx, rc):
            ctx.delete(pod)
    else:
        failure = _reconcile_pods(ctx, rc)
    _calculate_status(ctx, rc, failure)


def _reconcile_pods(ctx: Ctx, rc: Obj) -> tuple[str, str] | None:
    """reconcilePods; the reconcile error as (ReplicaFailure reason, message), if any."""
    uid = rc["metadata"]["uid"]
    refused = _REFUSED.setdefault(ctx.store, {})
    count, retry_at = refused.get(uid, (0, 0.0))
    if count and retry_at > ctx.t:
        ctx.wake_at(retry_at)
        current = _condition(rc, "ReplicaFailure")
        return (str(current["reason"]), str(current["message"])) if current else None
    spec, ns, name = rc["spec"], rc["metadata"]["namespace"], rc["metadata"]["name"]
    pods = _live(ctx, rc)
    base = {
        "ray.io/cluster": name,
        "ray.io/is-ray-node": "yes",
        "app.kubernetes.io/created-by": "kuberay-operator",
        "app.kubernetes.io/name": "kuberay",
    }
    failure: tuple[str, str] | None = None
    if not any(_node_type(p) == "head" for p in pods):
        template = (spec.get("headGroupSpec") or {}).get("template") or {}
        labels = {**base, "ray.io/node-type": "head", "ray.io/group": "headgroup"}
        try:
            created = _create(ctx, rc, _with_autoscaler(spec, template), f"{name}-head-", labels)
        except ApiError as exc:
            ctx.event(
                rc,
                "Warning",
                "FailedToCreateHeadPod",
                f"Failed to create head Pod {ns}/, {exc.message}",
                SOURCE,
            )
            failure = ("FailedCreateHeadPod", f"FailedCreateHeadPod\n{exc.message}")
        else:
            message = f"Created head Pod {ns}/{created['metadata']['name']}"
            ctx.event(rc, "Normal", "CreatedHeadPod", message, SOURCE)
    if failure is None:
        failure = _reconcile_workers(ctx, rc, pods, base)
    if failure is None:
        refused.pop(uid, None)
    else:
        delay = min(API_BACKOFF * 2**count, MAX_API_BACKOFF)
        refused[uid] = (count + 1, ctx.t + delay)
        ctx.wake_at(ctx.t + delay)
    return failure


def _reconcile_workers(
    ctx: Ctx, rc: Obj, pods: list[Obj], base: dict[str, str]
) -> tuple[str, str] | None:
    ns, name = rc["metadata"]["namespace"], rc["metadata"]["name"]
    for group in rc["spec"].get("workerGroupSpecs") or []:
        gname = str(group.get("groupName", "workers"))
        have = sum(
            1 for p in pods if _node_type(p) == "worker" and _labels(p).get("ray.io/group") == gname
        )
        labels = {**base, "ray.io/node-type": "worker", "ray.io/group": gname}
        for _ in range(have, _desired(group)):
            try:
                created = _create(
                    ctx, rc, group.get("template") or {}, f"{name}-{gname}-worker-", labels
                )
            except ApiError as exc:
                ctx.event(
                    rc,
                    "Warning",
                    "FailedToCreateWorkerPod",
                    f"Failed to create worker Pod for the cluster {ns}/{name}, {exc.message}",
                    SOURCE,
                )
                return ("FailedCreateWorkerPod", f"FailedCreateWorkerPod\n{exc.message}")
            ctx.event(
                rc,
                "Normal",
                "CreatedWorkerPod",
                f"Created worker Pod {ns}/{created['metadata']['name']}",
                SOURCE,
            )
    return None


def _with_autoscaler(spec: dict[str, Any], template: Obj) -> Obj:
    """common/pod.go `BuildAutoscalerContainer`: with in-tree autoscaling the head pod gets an
    `autoscaler` sidecar container."""
    if not spec.get("enableInTreeAutoscaling"):
        return template
    pspec = dict(template.get("spec") or {})
    containers = list(pspec.get("containers") or [])
    if not any(c.get("name") == AUTOSCALER for c in containers):
        containers.append(
            {
                "name": AUTOSCALER,
                "image": AUTOSCALER_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["/bin/bash", "-lc", "--"],
                "args": [
                    "ray kuberay-autoscaler --cluster-name $(RAY_CLUSTER_NAME)"
                    " --cluster-namespace $(RAY_CLUSTER_NAMESPACE)"
                ],
            }
        )
    return {**template, "spec": {**pspec, "containers": containers}}


def _create(ctx: Ctx, rc: Obj, template: Obj, generate: str, labels: dict[str, str]) -> Obj:
    pod = pod_from_template(template, rc, generate=generate, labels=labels, annotations=RUN_FOREVER)
    return ctx.create("pods", rc["metadata"]["namespace"], pod)


def _calculate_status(ctx: Ctx, rc: Obj, failure: tuple[str, str] | None) -> None:
    old = dict(rc.get("status") or {})
    status = {k: v for k, v in old.items() if k != "lastUpdateTime"}
    now = ctx.ts()
    pods = _live(ctx, rc)
    workers = [p for p in pods if _node_type(p) == "worker"]
    groups = rc["spec"].get("workerGroupSpecs") or []
    desired = sum(_desired(g) for g in groups)
    ready_workers = sum(1 for w in workers if pod_phase(w) == "Running" and is_ready(w))
    status.update(
        readyWorkerReplicas=ready_workers,
        availableWorkerReplicas=sum(1 for w in workers if pod_phase(w) == "Running"),
        desiredWorkerReplicas=desired,
        minWorkerReplicas=sum(int(g.get("minReplicas", 0)) for g in groups),
        maxWorkerReplicas=sum(int(g.get("maxReplicas", _desired(g))) for g in groups),
        observedGeneration=int(rc["metadata"].get("generation") or 1),
    )
    all_running = bool(pods) and all(pod_phase(p) == "Running" and is_ready(p) for p in pods)
    if failure is None and len(pods) == desired + 1 and all_running:
        status["state"] = "ready"
        status.pop("reason", None)
    conditions = [dict(c) for c in status.get("conditions") or []]
    if failure is not None:
        conditions = merge_conditions(
            conditions, [condition("ReplicaFailure", True, failure[0], failure[1], now)]
        )
    else:
        conditions = [c for c in conditions if c.get("type") != "ReplicaFailure"]
    head = head_pod(ctx, rc)
    new = [_head_ready(head, now)]
    suspend = bool(rc["spec"].get("suspend"))
    provisioned = _condition({"status": {"conditions": conditions}}, "RayClusterProvisioned")
    if not (provisioned and provisioned.get("status") == "True") and not suspend:
        if all_running:
            new.append(
                condition(
                    "RayClusterProvisioned",
                    True,
                    "AllPodRunningAndReadyFirstTime",
                    "All Ray Pods are ready for the first time",
                    now,
                )
            )
        else:
            new.append(
                condition(
                    "RayClusterProvisioned",
                    False,
                    "RayClusterPodsProvisioning",
                    "RayCluster Pods are being provisioned for first time",
                    now,
                )
            )
    new.append(
        condition("RayClusterSuspended", suspend and not pods, "RayClusterSuspended", "", now)
    )
    new.append(
        condition("RayClusterSuspending", suspend and bool(pods), "RayClusterSuspending", "", now)
    )
    status["conditions"] = merge_conditions(conditions, new)
    if suspend and not pods:
        status["state"] = "suspended"
    if head is not None:
        status["head"] = {
            "podName": head["metadata"]["name"],
            "podIP": (head.get("status") or {}).get("podIP", ""),
        }
    if old.get("state") != status.get("state") and status.get("state"):
        status["stateTransitionTimes"] = {
            **(old.get("stateTransitionTimes") or {}),
            status["state"]: now,
        }
    if status != {k: v for k, v in old.items() if k != "lastUpdateTime"}:
        status["lastUpdateTime"] = now
        ctx.set_status(rc, status)


def _head_ready(head: Obj | None, now: str) -> dict[str, Any]:
    """utils.FindHeadPodReadyCondition, or HeadPodNotFound."""
    if head is None:
        return condition("HeadPodReady", False, "HeadPodNotFound", "Head Pod not found", now)
    for cond in (head.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            ready = cond.get("status") == "True"
            reason = cond.get("reason") or ("HeadPodRunningAndReady" if ready else "Unknown")
            return condition("HeadPodReady", ready, reason, cond.get("message", ""), now)
    return condition("HeadPodReady", False, "Unknown", "", now)


def _desired(group: dict[str, Any]) -> int:
    return int(group.get("replicas", group.get("minReplicas", 0)))


def _live(ctx: Ctx, rc: Obj) -> list[Obj]:
    return [p for p in ctx.children(rc, "Pod") if not p["metadata"].get("deletionTimestamp")]


def _labels(pod: Obj) -> dict[str, str]:
    return dict(pod["metadata"].get("labels") or {})


def _node_type(pod: Obj) -> str:
    return _labels(pod).get("ray.io/node-type", "")


def _condition(obj: Obj, kind: str) -> dict[str, Any] | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None
