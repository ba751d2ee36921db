"""The admission stage's decisions about one run, as pure input to `render`.

`render(..., decisions=Admission(...))` returns the final manifest: nothing downstream edits it.
What the decisions change, applied by `apply_decisions` after the kind's defaults and before the
security enforcement (so no decision can loosen what enforcement checks):

- `suspended`: the workload is created suspended (the agent's quota tree admits it later);
- `kueue_queue`: the `kueue.x-k8s.io/queue-name` label, and suspended for kinds Kueue admits by
  unsuspending (Kueue's LeaderWorkerSet integration reads only the label). Render already does
  this for the spec's own `spec.kueue.queueName`; the decision carries the agent's default
  LocalQueue (`default_kueue_queue`) for specs that name none;
- `labels`, `annotations`: extra metadata (the runSpec the agent requeues a preempted run from);
- `pod_set_annotations`: metadata computed from the final pod sets (the quota stamp, which
  carries the run's request so a restart can charge it without the pod templates). A pure
  function of the pod sets; it raises `NotAdmitted` when the request cannot be read.

`NotAdmitted` is the admission stage's refusal of a run, with the message W&B shows and the reason
label of the failure metric.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from launch_agent.model import labels as L
from launch_agent.model.queue_spec import QueueSpec
from launch_agent.render.edit import child_map
from launch_agent.render.kinds import KindInfo, PodSet, spec_kind

PodSetAnnotations = Callable[[list[PodSet]], Mapping[str, str]]


class NotAdmitted(Exception):
    """The admission stage will not take this run; `message` says why and what to change."""

    def __init__(self, message: str, reason: str = "quota") -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Admission:
    suspended: bool = False
    kueue_queue: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    pod_set_annotations: PodSetAnnotations | None = None

    def annotated(self, more: Mapping[str, str]) -> Admission:
        """The same decisions with more annotations (the dispatcher's runSpec record)."""
        return Admission(
            self.suspended,
            self.kueue_queue,
            self.labels,
            {**self.annotations, **more},
            self.pod_set_annotations,
        )


# Today's behaviour when the caller decides nothing: the workload as the queue spec renders it.
NO_DECISIONS = Admission()


def default_kueue_queue(spec: QueueSpec, default: str | None) -> str | None:
    """The LocalQueue a spec's runs go to when the agent delegates to Kueue: the spec's own, or
    `default` for a spec that names none and whose kind Kueue can queue."""
    if spec.kueue_queue_name or not default:
        return spec.kueue_queue_name
    info = spec_kind(spec)
    if info is None or info.kueue is None:
        return None
    return default


def can_suspend(spec: QueueSpec) -> str | None:
    """None if the spec's workloads can be created suspended, else why not."""
    info = spec_kind(spec)
    if info is None:
        return f"{spec.api_version} {spec.kind} is not a known kind"
    return info.suspend_refusal


def apply_decisions(manifest: dict[str, Any], info: KindInfo, decisions: Admission) -> None:
    """Apply the admission decisions to a rendered manifest, in place (module docstring)."""
    if decisions == NO_DECISIONS:
        return
    meta = child_map(manifest, "metadata")
    labels = child_map(meta, "labels")
    annotations = child_map(meta, "annotations")
    # The admission stage checked the kind (`can_suspend`) before rendering.
    if decisions.kueue_queue:
        labels[L.KUEUE_QUEUE_NAME] = decisions.kueue_queue
        if info.kueue == "suspend":
            info.set_suspended(manifest, True)
    if decisions.suspended:
        info.set_suspended(manifest, True)
    if decisions.pod_set_annotations is not None:
        annotations.update(decisions.pod_set_annotations(info.pod_sets(manifest)))
    labels.update(decisions.labels)
    annotations.update(decisions.annotations)
