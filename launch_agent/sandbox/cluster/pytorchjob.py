"""The Kubeflow training-operator PyTorchJob controller (kubeflow.org/v1); see `workloads`.

Follows kubeflow/training-operator v1.9 (branch release-1.9): `pkg/controller.v1/common/job.go`
(`ReconcileJobs`: suspend, the backoff limit), `common/pod.go` (`ReconcilePods`: a failed pod is
deleted and recreated when its replica's restartPolicy is OnFailure / Always, or ExitCode with a
retryable exit code, 128 or more, read from the container named `pytorch`), and
`pytorch/pytorchjob_controller.go` (`UpdateJobStatus`: Running / Restarting / Succeeded /
Failed and their messages). `pkg/util/status.go` keeps Running and Restarting exclusive.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from weakref import WeakKeyDictionary

from launch_agent.sandbox.cluster.children import ensure_pod, pod_phase
from launch_agent.sandbox.cluster.common import Ctx, condition, has_condition
from launch_agent.sandbox.kube.store import Obj, Store

KIND = "PyTorchJob"
SOURCE = "pytorchjob-controller"
DEFAULT_CONTAINER = "pytorch"  # PyTorchJobReconciler.GetDefaultContainerName
NO_EXIT_CODE = 0xBEEF  # ReconcilePods' "magic number" when that container has not terminated
# The operator counts a job's retries in its workqueue (NumRequeues), in memory as here: per
# store (uids repeat across sandboxes), by job uid.
_RETRIES: WeakKeyDictionary[Store, dict[str, int]] = WeakKeyDictionary()


def _retries(ctx: Ctx) -> dict[str, int]:
    return _RETRIES.setdefault(ctx.store, {})


def reconcile_pytorchjob(ctx: Ctx, job: Obj) -> None:
    if has_condition(job, "Succeeded") or has_condition(job, "Failed"):
        return
    _Reconcile(ctx, job).run()


class _Reconcile:
    """One ReconcileJobs pass; `conditions` is the job's list as UpdateJobConditions edits it."""

    def __init__(self, ctx: Ctx, job: Obj) -> None:
        self.ctx, self.job, self.now = ctx, job, ctx.ts()
        self.name = job["metadata"]["name"]
        self.status = dict(job.get("status") or {})
        self.conditions: list[dict[str, Any]] = list(self.status.get("conditions") or [])

    def run(self) -> None:
        ctx, job, name, status = self.ctx, self.job, self.name, self.status
        if not self.conditions:
            message = f"{KIND} {name} is created."
            self.update("Created", True, "Created", message)
            ctx.event(job, "Normal", f"{KIND}Created", message, SOURCE)
        replicas: dict[str, Any] = job["spec"].get("pytorchReplicaSpecs") or {}
        pods = [p for p in ctx.children(job, "Pod") if not p["metadata"].get("deletionTimestamp")]
        if (job["spec"].get("runPolicy") or {}).get("suspend"):
            for pod in pods:
                ctx.delete(pod)
            message = f"{KIND} {name} is suspended."
            self.update("Running", False, "Suspended", message)
            self.update("Suspended", True, "Suspended", message)
            status["replicaStatuses"] = _replica_status(name, replicas, [])
            self.write()
            return
        if any(c["type"] == "Suspended" and c["status"] == "True" for c in self.conditions):
            self.update("Suspended", False, "Resumed", f"{KIND} {name} is resumed.")
        status.setdefault("startTime", self.now)
        failure = _backoff_exceeded(job, replicas, pods, status, _retries(ctx))
        if failure is not None:
            ctx.event(job, "Normal", f"{KIND}Failed", failure, SOURCE)
            self.update("Failed", True, "Failed", failure)
            self.write()
            return
        by_name = {p["metadata"]["name"]: p for p in pods}
        for rtype, rspec in sorted(replicas.items()):
            for i in range(int(rspec.get("replicas", 1))):
                found = by_name.get(f"{name}-{rtype.lower()}-{i}")
                if found is None:
                    _create_pod(ctx, job, rtype, i, rspec)
                elif pod_phase(found) == "Failed":
                    self.failed_pod(found, rtype, str(rspec.get("restartPolicy", "Never")))
        status["replicaStatuses"] = _replica_status(name, replicas, pods)
        self.update_job_status(replicas, status["replicaStatuses"])
        self.write()

    def write(self) -> None:
        status = self.status
        if any(
            c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in self.conditions
        ):
            status.setdefault("completionTime", self.now)
        status["conditions"] = self.conditions
        before = {
            k: v for k, v in (self.job.get("status") or {}).items() if k != "lastReconcileTime"
        }
        if {k: v for k, v in status.items() if k != "lastReconcileTime"} != before:
            status["lastReconcileTime"] = self.now
            self.ctx.set_status(self.job, status)

    def failed_pod(self, pod: Obj, rtype: str, policy: str) -> None:
        """ReconcilePods for a failed pod: restart it (delete; recreated next pass) or fail."""
        ctx, job, name = self.ctx, self.job, self.name
        retryable = _exit_code(pod) >= 128  # train_util.IsRetryableExitCode
        if policy in ("OnFailure", "Always") or (policy == "ExitCode" and retryable):
            ctx.delete(pod)
            uid, retries = job["metadata"]["uid"], _retries(ctx)
            retries[uid] = retries.get(uid, 0) + 1
            message = f"job {name} is restarting because {rtype} replica(s) failed."
            ctx.event(job, "Warning", f"{KIND}Restarting", message, SOURCE)
            self.update("Restarting", True, "Restarting", message)
        elif policy == "ExitCode":
            message = f'job "{name}" is failing because "{rtype}" replica(s) failed.'
            ctx.event(job, "Warning", f"{KIND}Failed", message, SOURCE)
            self.update("Failed", True, "Failed", message)

    def update_job_status(
        self, replicas: dict[str, Any], statuses: dict[str, dict[str, Any]]
    ) -> None:
        """PyTorchReconciler.UpdateJobStatus, replica by replica (Master decides when present;
        Go's map order is random, here Master comes first and the first failure's words stay)."""
        ctx, job, name = self.ctx, self.job, self.name
        ns = job["metadata"]["namespace"]
        has_master = "Master" in replicas
        for rtype, rspec in sorted(replicas.items()):
            st = statuses[rtype]
            count = int(rspec.get("replicas", 1))
            running, succeeded, failed = st["active"], st["succeeded"], st["failed"]
            expected = count - succeeded
            if has_master and rtype == "Master":
                if running > 0:
                    self.update("Running", True, "Running", f"{KIND} {name} is running.")
                if expected == 0:
                    message = f"{KIND} {name} is successfully completed."
                    ctx.event(job, "Normal", f"{KIND}Succeeded", message, SOURCE)
                    self.update("Succeeded", True, "Succeeded", message)
                    return
            elif not has_master and rtype == "Worker":
                if expected == 0:
                    message = f"{KIND} {ns}/{name} successfully completed."
                    ctx.event(job, "Normal", f"{KIND}Succeeded", message, SOURCE)
                    self.update("Succeeded", True, "Succeeded", message)
                elif running > 0:
                    self.update("Running", True, "Running", f"{KIND} {ns}/{name} is running.")
            if failed > 0 and count > succeeded + running:
                if rspec.get("restartPolicy", "Never") != "Never":
                    message = (
                        f"{KIND} {name} is restarting because {failed} {rtype} replica(s) failed."
                    )
                    ctx.event(job, "Warning", f"{KIND}Restarting", message, SOURCE)
                    self.update("Restarting", True, "Restarting", message)
                elif not any(c["type"] == "Failed" for c in self.conditions):
                    message = f"{KIND} {name} is failed because {failed} {rtype} replica(s) failed."
                    ctx.event(job, "Normal", f"{KIND}Failed", message, SOURCE)
                    self.update("Failed", True, "Failed", message)

    def update(self, kind: str, status: bool, reason: str, message: str) -> None:
        """util.UpdateJobConditions / filterOutCondition: replace the type; Running and
        Restarting exclude each other; Failed or Succeeded turn Running False."""
        new = condition(kind, status, f"{KIND}{reason}", message, self.now, lastUpdateTime=self.now)
        for old in self.conditions:
            if old["type"] != kind:
                continue
            if (old["status"], old["reason"], old["message"]) == (
                new["status"],
                new["reason"],
                new["message"],
            ):
                return
            if old["status"] == new["status"]:
                new["lastTransitionTime"] = old["lastTransitionTime"]
        kept = []
        for old in self.conditions:
            if old["type"] == kind or {old["type"], kind} == {"Running", "Restarting"}:
                continue
            running_off = kind in ("Failed", "Succeeded") and old["type"] == "Running"
            kept.append({**old, "status": "False"} if running_off else old)
        self.conditions = [*kept, new]


def _backoff_exceeded(
    job: Obj,
    replicas: dict[str, Any],
    pods: list[Obj],
    status: dict[str, Any],
    retried: dict[str, int],
) -> str | None:
    """ReconcileJobs: exceedsBackoffLimit (a new failure past the retries) or PastBackoffLimit
    (in-place container restarts of running pods reaching the limit)."""
    limit = (job["spec"].get("runPolicy") or {}).get("backoffLimit")
    if limit is None:
        return None
    failed = sum(1 for p in pods if pod_phase(p) == "Failed")
    previous = sum(int(s.get("failed", 0)) for s in (status.get("replicaStatuses") or {}).values())
    total = sum(int(r.get("replicas", 1)) for r in replicas.values())
    active = sum(1 for p in pods if pod_phase(p) in ("Pending", "Running"))
    retries = retried.get(job["metadata"]["uid"], 0)
    exceeds = failed > previous and active != total and retries + 1 > int(limit)
    restarts = 0
    for rtype, rspec in replicas.items():
        if rspec.get("restartPolicy", "Never") not in ("OnFailure", "Always", "ExitCode"):
            continue
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get("training.kubeflow.org/replica-type") != rtype.lower():
                continue
            if pod_phase(pod) != "Running":
                continue
            pstatus = pod.get("status") or {}
            for cs in (pstatus.get("initContainerStatuses") or []) + (
                pstatus.get("containerStatuses") or []
            ):
                restarts += int(cs.get("restartCount", 0))
    past = restarts > 0 if int(limit) == 0 else restarts >= int(limit)
    if exceeds or past:
        name = job["metadata"]["name"]
        return f"Job {name} has failed because it has reached the specified backoff limit"
    return None


def _exit_code(pod: Obj) -> int:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (cs.get("state") or {}).get("terminated")
        if cs.get("name") == DEFAULT_CONTAINER and terminated:
            return int(terminated.get("exitCode", 0))
    return NO_EXIT_CODE


def _create_pod(ctx: Ctx, job: Obj, rtype: str, index: int, rspec: dict[str, Any]) -> None:
    name = job["metadata"]["name"]
    template = dict(rspec.get("template") or {})
    pspec = dict(template.get("spec") or {})
    policy = rspec.get("restartPolicy", "Never")
    # setRestartPolicy: ExitCode pods never restart in place (the operator recreates them).
    pspec["restartPolicy"] = "Never" if policy == "ExitCode" else policy
    labels = {
        "training.kubeflow.org/job-name": name,
        "training.kubeflow.org/operator-name": SOURCE,
        "training.kubeflow.org/replica-type": rtype.lower(),
        "training.kubeflow.org/replica-index": str(index),
    }
    if rtype == "Master":
        labels["training.kubeflow.org/job-role"] = "master"
    ensure_pod(
        ctx, job, {}, f"{name}-{rtype.lower()}-{index}", {**template, "spec": pspec}, labels=labels
    )


def _replica_status(
    name: str, replicas: dict[str, Any], pods: list[Obj]
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for rtype in sorted(replicas):
        counts = Counter[str]()
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get("training.kubeflow.org/replica-type") != rtype.lower():
                continue
            phase = pod_phase(pod)
            key = {"Succeeded": "succeeded", "Failed": "failed"}.get(phase, "active")
            counts[key] += 1
        out[rtype] = {
            "active": counts["active"],
            "succeeded": counts["succeeded"],
            "failed": counts["failed"],
            "selector": ",".join(
                [
                    f"training.kubeflow.org/job-name={name}",
                    f"training.kubeflow.org/operator-name={SOURCE}",
                    f"training.kubeflow.org/replica-type={rtype.lower()}",
                ]
            ),
        }
    return out
