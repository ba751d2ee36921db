"""The KubeRay RayJob controller (K8sJobMode, the default submission mode); see `workloads`.

Follows ray-project/kuberay `ray-operator/controllers/ray/rayjob_controller.go`
(`RayJobReconciler.Reconcile`, one `jobDeploymentStatus` state per pass) and the status shape of
`apis/ray/v1/rayjob_types.go`. The RayCluster is a separate object, as upstream
(`getOrCreateRayClusterInstance`, `constructRayClusterForRayJob`): named
`status.rayClusterName` (`utils.GenerateRayClusterName`: `<rayjob>-<5 random>`), owned by the
RayJob (so it goes with it by ownerReference GC), reconciled by `raycluster.py`, which makes
the head and worker pods and reports a refused pod in its own Events and status; the RayJob
waits in Initializing until the RayCluster's `state` is `ready`, copying its status into
`rayClusterStatus` meanwhile. Retrying and Suspending delete the RayCluster
(`deleteClusterResources`); `shutdownAfterJobFinishes` deletes it `ttlSecondsAfterFinished`
after the end (`handleShutdownAfterJobFinishes`), keeping the submitter Job and its logs. The
Ray job itself is played by the submitter Job's pods (the Ray job fails when a submitter pod
exits non-zero, as `ray job submit` does when it tails a failed job).

The Nth submitter pod of a RayJob, across all its retries, plays the Nth attempt of its outcome
(the submitter Job carries `ATTEMPTS_OF`, so the count lives on the RayJob): with
`submitterConfig.backoffLimit: 0`, `fail; succeed` is a first attempt that fails and a retry
(`spec.backoffLimit: 1` or more) that succeeds.
"""

from __future__ import annotations

import hashlib
from typing import Any
from weakref import WeakKeyDictionary

from launch_agent.sandbox.cluster import raycluster
from launch_agent.sandbox.cluster.children import elapsed, pod_phase, served
from launch_agent.sandbox.cluster.common import Ctx, has_condition, owner_ref
from launch_agent.sandbox.cluster.events import warn_once
from launch_agent.sandbox.kube.errors import ApiError
from launch_agent.sandbox.kube.store import Obj, Store

# Read by `SimulatedCluster._outcome_for`: count this object's pods' attempts on another object.
ATTEMPTS_OF = "sandbox.launch-agent.io/attempts-of"
SOURCE = "rayjob-controller"
TERMINAL = ("Complete", "Failed", "ValidationFailed")
REQUEUE_SECONDS = 3.0  # rayjob_controller.go RayJobDefaultRequeueDuration
# When a RayJob's release may next be checked (the operator's requeue), per store and uid.
_REQUEUES: WeakKeyDictionary[Store, dict[str, float]] = WeakKeyDictionary()


def _rand5(rj: Obj, salt: str) -> str:
    """utils.GenerateRayClusterName / GenerateRayJobId append rand.String(5); here a hash of
    the uid and the attempt, so a retry gets new names and a replay gets the same ones."""
    return hashlib.sha256(f"{rj['metadata']['uid']}/{salt}".encode()).hexdigest()[:5]


def _attempt(status: dict[str, Any]) -> int:
    return int(status.get("failed") or 0) + int(status.get("succeeded") or 0)


def reconcile_rayjob(ctx: Ctx, rj: Obj) -> None:
    status = dict(rj.get("status") or {})
    deployment = status.get("jobDeploymentStatus", "")  # JobDeploymentStatusNew is ""
    if deployment in TERMINAL:
        _finished(ctx, rj)
        return
    if deployment == "":
        _init_status(ctx, rj, status)
    elif deployment == "Initializing":
        _initializing(ctx, rj, status)
    elif deployment == "Running":
        _running(ctx, rj, status)
    elif deployment in ("Retrying", "Suspending"):
        _release(ctx, rj, status, deployment)
    elif deployment == "Suspended" and not rj["spec"].get("suspend"):
        status.pop("jobDeploymentStatus", None)
        status.pop("jobStatus", None)
    _check_backoff_limit(rj, status)
    ctx.set_status(rj, status)


def _init_status(ctx: Ctx, rj: Obj, status: dict[str, Any]) -> None:
    """initRayJobStatusIfNeed: new jobId and rayClusterName per attempt, startTime reset (so
    activeDeadlineSeconds counts per attempt, as upstream)."""
    name, attempt = rj["metadata"]["name"], _attempt(status)
    status.setdefault("jobId", f"{name}-{_rand5(rj, f'job-{attempt}')}")
    status.setdefault("rayClusterName", f"{name}-{_rand5(rj, f'cluster-{attempt}')}")
    status.update(jobDeploymentStatus="Initializing", startTime=ctx.ts())
    status.setdefault("failed", 0)
    status.setdefault("succeeded", 0)


def _suspending(rj: Obj, status: dict[str, Any]) -> bool:
    """updateStatusToSuspendingIfNeeded."""
    if not rj["spec"].get("suspend"):
        return False
    status["jobDeploymentStatus"] = "Suspending"
    return True


def _deadline(ctx: Ctx, rj: Obj, status: dict[str, Any]) -> bool:
    """checkActiveDeadlineAndUpdateStatusIfNeeded (message format verbatim)."""
    deadline, started = rj["spec"].get("activeDeadlineSeconds"), status.get("startTime")
    if deadline is None or started is None:
        return False
    left = float(deadline) - elapsed(ctx, started)
    if left > 0:
        ctx.wake_at(ctx.t + left)
        return False
    status.update(
        jobDeploymentStatus="Failed",
        reason="DeadlineExceeded",
        message=(
            f"The RayJob has passed the activeDeadlineSeconds. StartTime: {started}."
            f" ActiveDeadlineSeconds: {int(deadline)}"
        ),
    )
    return True


def _initializing(ctx: Ctx, rj: Obj, status: dict[str, Any]) -> None:
    if _suspending(rj, status) or _deadline(ctx, rj, status):
        return
    rc = _get_or_create_cluster(ctx, rj, status)
    if rc is None:
        return
    head = raycluster.head_pod(ctx, rc)
    if (rc.get("status") or {}).get("state") != "ready" or head is None:
        # "Wait for the RayCluster.Status.State to be ready before submitting the job."
        status["rayClusterStatus"] = dict(rc.get("status") or {})
        return
    ns = rj["metadata"]["namespace"]
    status["dashboardURL"] = f"{status['rayClusterName']}-head-svc.{ns}.svc.cluster.local:8265"
    if not _submitters(ctx, rj):
        _create_submitter(ctx, rj, status, head)
    status["jobDeploymentStatus"] = "Running"


def _running(ctx: Ctx, rj: Obj, status: dict[str, Any]) -> None:
    if _suspending(rj, status) or _deadline(ctx, rj, status):
        return
    rc = _cluster(ctx, rj, status)
    if rc is not None:
        status["rayClusterStatus"] = dict(rc.get("status") or {})
    subs = _submitters(ctx, rj)
    if not subs:
        return
    sub = subs[0]
    pods = ctx.children(sub, "Pod")
    # The Ray job as the dashboard would report it (GetJobInfo), played by the submitter pods.
    failed_exit = next((c for c in (_app_exit_code(p) for p in pods) if c is not None), None)
    if failed_exit is not None:
        status["jobStatus"] = "FAILED"
        status["message"] = (
            # ray dashboard/modules/job/job_supervisor.py, the Ray 2.x wording KubeRay copies.
            f"Job entrypoint command failed with exit code {failed_exit}, last available logs"
            " (truncated to 20,000 chars):\n"
        )
    elif has_condition(sub, "Complete"):
        status["jobStatus"] = "SUCCEEDED"
        status["message"] = "Job finished successfully."
    elif any(pod_phase(p) == "Running" for p in pods):
        status["jobStatus"] = "RUNNING"
    else:
        status.setdefault("jobStatus", "PENDING")
    # checkSubmitterAndUpdateStatusIfNeeded: a failed submitter Job ends the attempt.
    failed = _job_condition(sub, "Failed")
    if failed is not None:
        status["jobDeploymentStatus"] = "Failed"
        status["endTime"] = ctx.ts()
        if status.get("jobStatus") == "FAILED":
            status["reason"] = "AppFailed"
        else:
            status["reason"] = "SubmissionFailed"
            status["message"] = (
                f"Job submission has failed. Reason: {failed.get('reason', '')}."
                f" Message: {failed.get('message', '')}"
            )
        return
    # The Ray job is terminal and the submitter finished (kuberay#1919): Complete or Failed.
    if has_condition(sub, "Complete") and status.get("jobStatus") in ("SUCCEEDED", "FAILED"):
        status["endTime"] = ctx.ts()
        if status["jobStatus"] == "FAILED":
            status.update(jobDeploymentStatus="Failed", reason="AppFailed")
        else:
            status.update(jobDeploymentStatus="Complete")
            status.pop("reason", None)


def _release(ctx: Ctx, rj: Obj, status: dict[str, Any], deployment: str) -> None:
    """The JobDeploymentStatusSuspending / Retrying case: delete the cluster and the submitter,
    reset the Ray job fields, then Suspended or New (the next pass starts a new attempt)."""
    subs = ctx.children(rj, "Job")
    ns = rj["metadata"]["namespace"]
    clusters = ctx.children(rj, "RayCluster") if served(ctx, raycluster.RESOURCE) else []
    _delete_cluster(ctx, rj, clusters)
    for sub in subs:
        if not sub["metadata"].get("deletionTimestamp"):
            ctx.delete(sub, propagation="Background")
            message = f"Deleted submitter K8s Job {ns}/{sub['metadata']['name']}"
            ctx.event(rj, "Normal", "DeletedRayJobSubmitter", message, SOURCE)
    # deleteClusterResources / deleteSubmitterJob report "deleted" only once a Get finds
    # nothing; the pass that issued the deletes found them, so the operator requeues after
    # RayJobDefaultRequeueDuration and the status stays Suspending / Retrying meanwhile.
    requeues = _REQUEUES.setdefault(ctx.store, {})
    uid = rj["metadata"]["uid"]
    if clusters or subs:
        requeues[uid] = ctx.t + REQUEUE_SECONDS
    # Gone is a Get that finds nothing: the RayCluster (its pods still terminating, they go by
    # GC) and the submitter Job, both deleted in the background.
    if any(ctx.store.by_uid(o["metadata"]["uid"]) for o in (*clusters, *subs)) or (
        requeues.get(uid, 0.0) > ctx.t
    ):
        ctx.wake_at(requeues.get(uid, ctx.t + REQUEUE_SECONDS))
        return
    requeues.pop(uid, None)
    for key in ("rayClusterStatus", "rayClusterName", "dashboardURL", "jobId", "message"):
        status.pop(key, None)
    for key in ("reason", "rayJobInfo", "jobStatusCheckFailureStartTime", "jobStatus"):
        status.pop(key, None)
    if deployment == "Suspending":
        status["jobDeploymentStatus"] = "Suspended"
    else:
        status.pop("jobDeploymentStatus", None)  # JobDeploymentStatusNew is "" (omitted)


def _check_backoff_limit(rj: Obj, status: dict[str, Any]) -> None:
    """checkBackoffLimitAndUpdateStatusIfNeeded: count the attempt that just ended; a failure
    with retries left (and not a deadline) becomes Retrying, keeping jobStatus FAILED."""
    deployment = status.get("jobDeploymentStatus")
    before = dict(rj.get("status") or {}).get("jobDeploymentStatus")
    if deployment == before:
        return  # counted once, on the transition (upstream counts on the update it writes)
    if deployment == "Failed":
        status["failed"] = int(status.get("failed") or 0) + 1
    if deployment == "Complete" and status.get("jobStatus") == "SUCCEEDED":
        status["succeeded"] = int(status.get("succeeded") or 0) + 1
    limit = rj["spec"].get("backoffLimit")
    if deployment == "Failed" and limit is not None and status["failed"] < int(limit) + 1:
        if status.get("reason") in ("DeadlineExceeded", "JobStatusCheckTimeoutExceeded"):
            return
        status["jobDeploymentStatus"] = "Retrying"


def _finished(ctx: Ctx, rj: Obj) -> None:
    """handleShutdownAfterJobFinishes: `ttlSecondsAfterFinished` after `endTime` the cluster
    goes (`deleteClusterResources`), the submitter Job stays for its logs."""
    if not rj["spec"].get("shutdownAfterJobFinishes") or not served(ctx, raycluster.RESOURCE):
        return
    ended = (rj.get("status") or {}).get("endTime")
    left = float(rj["spec"].get("ttlSecondsAfterFinished") or 0) - (
        elapsed(ctx, ended) if ended else 0.0
    )
    if left > 0:
        ctx.wake_at(ctx.t + left)
        return
    _delete_cluster(ctx, rj, ctx.children(rj, "RayCluster"))


def _delete_cluster(ctx: Ctx, rj: Obj, clusters: list[Obj]) -> None:
    ns = rj["metadata"]["namespace"]
    for rc in clusters:
        if not rc["metadata"].get("deletionTimestamp"):
            ctx.delete(rc)
            message = f"Deleted cluster {ns}/{rc['metadata']['name']}"
            ctx.event(rj, "Normal", "DeletedRayCluster", message, SOURCE)


def _cluster(ctx: Ctx, rj: Obj, status: dict[str, Any]) -> Obj | None:
    if not served(ctx, raycluster.RESOURCE):
        return None
    name = status.get("rayClusterName")
    return next(
        (
            rc
            for rc in ctx.children(rj, "RayCluster")
            if rc["metadata"]["name"] == name and not rc["metadata"].get("deletionTimestamp")
        ),
        None,
    )


def _get_or_create_cluster(ctx: Ctx, rj: Obj, status: dict[str, Any]) -> Obj | None:
    """getOrCreateRayClusterInstance: the RayCluster `status.rayClusterName`, created if
    missing (Event `CreatedRayCluster`, or Warning `FailedToCreateRayCluster`)."""
    found = _cluster(ctx, rj, status)
    if found is not None:
        return found
    ns, name = rj["metadata"]["namespace"], str(status["rayClusterName"])
    if not served(ctx, raycluster.RESOURCE):
        # The API server's NotFound for a resource it does not serve (KubeRay's RayCluster
        # CRD missing).
        message = (
            f"Failed to create RayCluster {ns}/{name}:"
            " the server could not find the requested resource"
        )
        warn_once(ctx, rj, "FailedToCreateRayCluster", message, SOURCE)
        return None
    try:
        created = ctx.create(raycluster.RESOURCE, ns, raycluster.cluster_for(rj, name))
    except ApiError as exc:
        message = f"Failed to create RayCluster {ns}/{name}: {exc.message}"
        warn_once(ctx, rj, "FailedToCreateRayCluster", message, SOURCE)
        return None
    ctx.event(rj, "Normal", "CreatedRayCluster", f"Created RayCluster {ns}/{name}", SOURCE)
    return created


# --- children ---------------------------------------------------------------------------------


def _submitters(ctx: Ctx, rj: Obj) -> list[Obj]:
    return [j for j in ctx.children(rj, "Job") if not j["metadata"].get("deletionTimestamp")]


def _job_condition(job: Obj, kind: str) -> dict[str, Any] | None:
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind and cond.get("status") == "True":
            return dict(cond)
    return None


def _app_exit_code(pod: Obj) -> int | None:
    """The exit code of a submitter pod whose container ran and failed (the Ray job failed);
    None for a pod that is not done or failed without running (eviction, deadline)."""
    if pod_phase(pod) != "Failed" or (pod.get("status") or {}).get("reason"):
        return None  # a pod-level reason (Evicted, DeadlineExceeded): the pod, not the Ray job
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        code = ((cs.get("state") or {}).get("terminated") or {}).get("exitCode")
        if code:
            return int(code)
    return None


def _create_submitter(ctx: Ctx, rj: Obj, status: dict[str, Any], head: Obj) -> None:
    """createNewK8sJob: a Job named like the RayJob, submitter backoffLimit default 2."""
    spec, name, ns = rj["spec"], rj["metadata"]["name"], rj["metadata"]["namespace"]
    image = ((head.get("spec") or {}).get("containers") or [{}])[0].get(
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
                "labels": {
                    "ray.io/originated-from-cr-name": name,
                    "ray.io/originated-from-crd": "RayJob",
                    "app.kubernetes.io/created-by": "kuberay-operator",
                },
                "annotations": {ATTEMPTS_OF: rj["metadata"]["uid"]},
                "ownerReferences": [owner_ref(rj)],
            },
            "spec": {"backoffLimit": backoff, "template": template},
        },
    )
    ctx.event(rj, "Normal", "CreatedRayJobSubmitter", f"Created Kubernetes Job {ns}/{name}", SOURCE)
