"""Whether a JobSet is still bringing up its replicatedJobs one after the other.

kubernetes-sigs/jobset `pkg/controllers/jobset_controller.go` (`reconcileReplicatedJobs`):
with `startupPolicy.startupPolicyOrder: InOrder` a replicatedJob's Jobs are created only once
every earlier replicatedJob has all its Jobs ready, succeeded or failed (`startup_policy.go`,
`allReplicasStarted`), the condition `StartupPolicyInProgress` True meanwhile and
`StartupPolicyCompleted` True at the end; with `dependsOn` (`depends_on.go`,
`dependencyReachedStatus`) a replicatedJob is created only once each dependency is `Ready`
(ready + succeeded + failed Jobs = its replicas) or `Complete` (succeeded = its replicas).
Until then the run's main work has not started, whatever pods of an earlier stage (a driver, an
initializer) are running: the run is starting, and the start deadline counts. Read from the
spec (the slim cache keeps these fields, `tracked_spec`) and `status.replicatedJobsStatus`.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import pairwise
from typing import Any

from launch_agent.tracking.fields import condition, dig, integer, mappings, optional_int, text


def _replicas(rj: Mapping[str, Any]) -> int:
    value = optional_int(rj, "replicas")
    return 1 if value is None else value  # the CRD's default


def _counts(js: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {
        name: row
        for row in mappings(js, "status", "replicatedJobsStatus")
        if (name := text(row, "name")) is not None
    }


def _started(row: Mapping[str, Any] | None) -> int:
    if row is None:
        return 0
    return sum(integer(row, k) for k in ("ready", "succeeded", "failed"))


def waiting(js: Mapping[str, Any]) -> str | None:
    """What the JobSet's startup waits for, in words; None when nothing holds a replicatedJob
    back (or the workload is not a JobSet)."""
    if text(js, "kind") != "JobSet":
        return None
    rjs = [rj for rj in mappings(js, "spec", "replicatedJobs") if text(rj, "name")]
    counts = _counts(js)
    in_order = text(js, "spec", "startupPolicy", "startupPolicyOrder") == "InOrder"
    if in_order and condition(js, "StartupPolicyCompleted") is None:
        for rj, following in pairwise(rjs):
            started = _started(counts.get(str(rj["name"])))
            if started < _replicas(rj):
                return (
                    f"startupPolicy InOrder: replicatedJob {following['name']} is created once"
                    f" {rj['name']} has all {_replicas(rj)} Jobs ready ({started} are)"
                )
        if not rjs and condition(js, "StartupPolicyInProgress") is not None:
            return "startupPolicy InOrder is in progress"
    replicas_of: dict[str, int] = {}
    for rj in rjs:
        replicas_of[str(rj["name"])] = _replicas(rj)
        for dep in mappings(rj, "dependsOn"):
            name, wanted = text(dep, "name") or "", text(dep, "status") or ""
            row = counts.get(name)
            if wanted == "Complete":
                have = integer(row, "succeeded") if row is not None else 0
                word = "succeeded"
            else:
                have, word = _started(row), "ready"
            if name not in replicas_of or have != replicas_of[name]:
                total = replicas_of.get(name, 0)
                return (
                    f"replicatedJob {rj['name']} dependsOn {name} being {wanted}"
                    f" ({have} of {total} Jobs {word})"
                )
    return None


def tracked_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The spec fields `waiting` reads, for the informers' slim cache."""
    if (text(obj, "apiVersion") or "").rpartition("/")[0] != "jobset.x-k8s.io":
        return {}
    kept: dict[str, Any] = {}
    policy = dig(obj, "spec", "startupPolicy")
    if isinstance(policy, Mapping):
        kept["startupPolicy"] = dict(policy)
    keys = ("name", "replicas", "dependsOn")
    kept["replicatedJobs"] = [
        {k: rj[k] for k in keys if k in rj} for rj in mappings(obj, "spec", "replicatedJobs")
    ]
    return kept
