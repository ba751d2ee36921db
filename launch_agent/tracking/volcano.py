"""Which tasks of a failed Volcano Job fell short of their own `minAvailable`.

volcano-sh/volcano `pkg/controllers/job/state/running.go` (`runningState.Execute`, SyncJob):
once every pod has finished, and the job's `minAvailable` is at least the sum of its tasks'
(`state/util.go`, `TotalTaskMinAvailable`), a task counted in `status.taskStatusCount` with
fewer Succeeded pods than its own `minAvailable` fails the job, however many pods of the other
tasks succeeded. The mutating webhook (`pkg/webhooks/admission/jobs/mutate/mutate_job.go`,
`mutateSpec`, `patchDefaultMinAvailable`) defaults a task's `minAvailable` to its `replicas`
and the job's to the sum of its tasks', so a dump taken before or after the webhook reads the
same. The pods of such a task are what explain the failure: a pod of another task may have
failed too, within what that task allows, and must not take the blame.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from launch_agent.tracking.fields import dig, integer, mappings, optional_int, text

TASK_LABEL = "volcano.sh/task-spec"


@dataclass(frozen=True, slots=True)
class Shortfall:
    task: str
    succeeded: int
    min_available: int

    def sentence(self) -> str:
        pods = "pod" if self.succeeded == 1 else "pods"
        return (
            f"task {self.task} had {self.succeeded} succeeded {pods},"
            f" fewer than its minAvailable {self.min_available}"
        )


def _task_min(task: Mapping[str, Any]) -> int:
    value = optional_int(task, "minAvailable")
    replicas = optional_int(task, "replicas")
    return value if value is not None else (1 if replicas is None else replicas)


def shortfalls(job: Mapping[str, Any]) -> tuple[Shortfall, ...]:
    """The tasks whose shortfall failed this Volcano Job, in spec order (empty if none did)."""
    tasks = list(mappings(job, "spec", "tasks"))
    total = sum(_task_min(t) for t in tasks)
    job_min = integer(job, "spec", "minAvailable") or total
    if not tasks or job_min < total:
        return ()
    counted = dig(job, "status", "taskStatusCount")
    found = []
    for task in tasks:
        name = text(task, "name") or ""
        if not isinstance(counted, Mapping) or not isinstance(counted.get(name), Mapping):
            continue  # running.go skips a task with no entry
        succeeded = integer(counted[name], "phase", "Succeeded")
        if succeeded < _task_min(task):
            found.append(Shortfall(name, succeeded, _task_min(task)))
    return tuple(found)


def pods_of(tasks: tuple[Shortfall, ...], pods: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    names = {s.task for s in tasks}
    return [p for p in pods if text(p, "metadata", "labels", TASK_LABEL) in names]


def tracked_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The spec fields `shortfalls` reads, for the informers' slim cache (which keeps no spec
    otherwise): a Volcano Job's `minAvailable` and its tasks' names, replicas, minAvailable."""
    if (text(obj, "apiVersion") or "").rpartition("/")[0] != "batch.volcano.sh":
        return {}
    kept: dict[str, Any] = {}
    spec = dig(obj, "spec")
    if isinstance(spec, Mapping) and "minAvailable" in spec:
        kept["minAvailable"] = spec["minAvailable"]
    keys = ("name", "replicas", "minAvailable")
    kept["tasks"] = [{k: t[k] for k in keys if k in t} for t in mappings(obj, "spec", "tasks")]
    return kept
