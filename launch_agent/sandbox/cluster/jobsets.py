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
)
from launch_agent.sandbox.kube.store import Obj

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
        rj_status.append({"name": rj["name"], **job_counts(mine)})
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
            if not finished(job):
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


# --- TrainJob ---------------------------------------------------------------------------------


def reconcile_trainjob(ctx: Ctx, tj: Obj) -> None:
    spec, status, now = tj["spec"], dict(tj.get("status") or {}), ctx.ts()
    name, ns = tj["metadata"]["name"], tj["metadata"]["namespace"]
    if has_condition(tj, "Complete") or has_condition(tj, "Failed"):
        return
    if not served(ctx, "jobsets.jobset.x-k8s.io"):
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
