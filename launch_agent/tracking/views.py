"""Typed views of the Kubernetes objects the agent reads: the one place their shape is written.

Objects arrive as the plain JSON the API server (or a controller we do not own) returned, and
stay plain dicts: the informers cache them as they came, tracking reads them, the runtime
rebuilds its records from them. Two things are here:

- TypedDicts (`ObjectBody`, `ObjectMeta`, `OwnerReference`, `Condition`, `PodStatus`,
  `ContainerStatus`, `EventBody`): the fields the agent reads, as the API documents them, for
  annotations and for the reader of this code. They describe, they do not validate: JSON from a
  CRD without status validation can hold anything.
- `Meta`, the reader of `metadata` that every layer uses (tracking, the runtime's run records,
  the informers' cache, the image builder): it never raises, a missing or mistyped field reads
  as absent (`""`, None or an empty mapping), as the helpers of `fields.py` do for the rest.

Workload and pod status have their readers next to what they decide (`workloads.py`:
`workload_status`, `pods.py`: `summarize_pods`); they read through `fields.py` too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from launch_agent.tracking.fields import dig, mappings, text

__all__ = [
    "Condition",
    "ContainerStatus",
    "EventBody",
    "Meta",
    "ObjectBody",
    "ObjectMeta",
    "OwnerReference",
    "PodStatus",
    "creation_order",
]


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    uid: str
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    managedFields: list[dict[str, Any]]


class Condition(TypedDict, total=False):
    type: str
    status: str  # "True", "False", "Unknown"
    reason: str
    message: str
    lastTransitionTime: str


class ContainerStatus(TypedDict, total=False):
    name: str
    image: str
    restartCount: int
    state: dict[str, dict[str, Any]]  # waiting / running / terminated
    lastState: dict[str, dict[str, Any]]


class PodStatus(TypedDict, total=False):
    phase: str
    reason: str
    message: str
    conditions: list[Condition]
    initContainerStatuses: list[ContainerStatus]
    containerStatuses: list[ContainerStatus]


class ObjectBody(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: dict[str, Any]


class EventBody(TypedDict, total=False):
    """A core/v1 Event, as the tracker reads a pod's warnings."""

    type: str  # Normal, Warning
    reason: str
    message: str
    involvedObject: dict[str, str]
    lastTimestamp: str


_EMPTY: Mapping[str, str] = {}


class Meta:
    """`metadata` of any object, read safely: `Meta(obj).name`, `.annotations`, ..."""

    __slots__ = ("_meta",)

    def __init__(self, obj: object) -> None:
        meta = dig(obj, "metadata")
        self._meta: Mapping[str, Any] = meta if isinstance(meta, Mapping) else _EMPTY

    @property
    def present(self) -> bool:
        """False when the object has no `metadata` mapping at all."""
        return self._meta is not _EMPTY

    def _text(self, key: str) -> str:
        value = self._meta.get(key)
        return value if isinstance(value, str) else ""

    @property
    def name(self) -> str:
        return self._text("name")

    @property
    def namespace(self) -> str:
        return self._text("namespace")

    @property
    def uid(self) -> str:
        return self._text("uid")

    @property
    def resource_version(self) -> str:
        return self._text("resourceVersion")

    @property
    def creation_timestamp(self) -> str:
        return self._text("creationTimestamp")

    @property
    def deletion_timestamp(self) -> str:
        return self._text("deletionTimestamp")

    @property
    def labels(self) -> Mapping[str, Any]:
        value = self._meta.get("labels")
        return value if isinstance(value, Mapping) else _EMPTY

    @property
    def annotations(self) -> Mapping[str, Any]:
        value = self._meta.get("annotations")
        return value if isinstance(value, Mapping) else _EMPTY

    def label(self, key: str) -> str | None:
        """A label's value, None when absent, empty or not a string."""
        return text(self.labels, key)

    def annotation(self, key: str) -> str | None:
        """An annotation's value, None when absent, empty or not a string."""
        return text(self.annotations, key)

    def controller(self, kind: str) -> str | None:
        """The name of the controlling owner of `kind` (a pod's Job), if it has one."""
        for ref in mappings(self._meta, "ownerReferences"):
            if ref.get("kind") == kind and ref.get("controller"):
                return str(ref.get("name"))
        return None


def creation_order(obj: object) -> tuple[str, str]:
    """Sort key of objects by creation, then name ("?" when it has none): oldest first."""
    meta = Meta(obj)
    return (meta.creation_timestamp, meta.name or "?")
