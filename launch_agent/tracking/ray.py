"""What a RayJob's RayCluster says about pods it could not create, from the RayJob alone.

ray-project/kuberay `raycluster_controller.go` (`calculateStatus`): a reconcile that failed to
create the head or a worker pod sets the RayCluster condition `ReplicaFailure` (reason
`FailedCreateHeadPod` / `FailedCreateWorkerPod`, `utils/constant.go`; message the joined error
`"<reason>\\n<the API server's refusal>"`), and `rayjob_controller.go` (`Reconcile`,
Initializing) copies the not-ready RayCluster's status into the RayJob's `rayClusterStatus`.
Events say the same (`FailedToCreateHeadPod`), but they expire (kube-apiserver `--event-ttl`,
1 h by default) and an agent that restarts sees only what is left: the condition stays as long
as the refusal does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launch_agent.tracking.fields import mappings, text

CREATE_FAILURES = ("FailedCreateHeadPod", "FailedCreateWorkerPod")


@dataclass(frozen=True, slots=True)
class ReplicaFailure:
    cluster: str
    reason: str
    # The API server's refusal (the joined error without its first line, the reason).
    message: str

    def sentence(self) -> str:
        return f"RayCluster {self.cluster} reports ReplicaFailure ({self.reason}): {self.message}"


def replica_failure(rayjob: Mapping[str, Any]) -> ReplicaFailure | None:
    """The RayCluster's `ReplicaFailure` for a pod it could not create, as the RayJob mirrors
    it; None for other kinds, other failures (deletes) or none."""
    if text(rayjob, "kind") != "RayJob":
        return None
    for cond in mappings(rayjob, "status", "rayClusterStatus", "conditions"):
        reason = text(cond, "reason") or ""
        if cond.get("type") != "ReplicaFailure" or cond.get("status") != "True":
            continue
        if reason not in CREATE_FAILURES:
            continue
        message = text(cond, "message") or ""
        head, _, rest = message.partition("\n")
        said = " ".join((rest if head == reason else message).split())
        return ReplicaFailure(text(rayjob, "status", "rayClusterName") or "", reason, said)
    return None
