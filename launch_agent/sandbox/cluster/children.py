"""Helpers shared by the workload controllers: pod and Job state, creating named children."""

from __future__ import annotations

import hashlib
from collections import Counter
from datetime import datetime

from launch_agent.sandbox.cluster.common import (
    Ctx,
    has_condition,
    pod_from_template,
)
from launch_agent.sandbox.kube.store import Obj

RUN_FOREVER = {"sandbox.launch-agent.io/outcome": "run"}


def pod_phase(pod: Obj) -> str:
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_ready(pod: Obj) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def suffix(obj: Obj) -> str:
    return hashlib.sha256(obj["metadata"]["uid"].encode()).hexdigest()[:5]


def served(ctx: Ctx, resource: str) -> bool:
    return ctx.store.registry.find(resource) is not None


def ensure_pod(
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


def job_counts(jobs: list[Obj]) -> dict[str, int]:
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


def finished(job: Obj) -> bool:
    return has_condition(job, "Complete") or has_condition(job, "Failed")


def elapsed(ctx: Ctx, stamp: str) -> float:
    """Seconds of simulated time since an RFC 3339 timestamp written by the cluster."""
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=ctx.clock.now().tzinfo)
    return (ctx.clock.now() - moment).total_seconds()
