"""A `kubectl get <workload>,pods,events -o json` dump -> the inputs of `assess`.

`launch-agent diagnose` reads the same objects the agent's informers cache, from the cluster or
from a file an admin captured, and hands them to the one judgement the tracker uses. This
module does the pure half: it picks the workload out of a `v1 List` in any order, keeps the
pods that belong to it, the Events (core/v1 with `involvedObject` or events.k8s.io/v1 with
`regarding`) and Kueue's Workload for it. Bad input is a `DumpError` with a precise reason,
never an exception from deep inside.

Which pods belong to a workload: a controller ownerReference chain to it through objects in
the dump (a JobSet's Jobs), the label its operator sets on its pods (below), or the agent's own
`launch-agent.io/run-queue-item` label.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from launch_agent.model.labels import RUN_QUEUE_ITEM
from launch_agent.tracking import kueue as kueue_status
from launch_agent.tracking.fields import mappings, text
from launch_agent.tracking.views import Meta
from launch_agent.tracking.workloads import READERS, group_kind

# Pod labels each operator sets to name the workload (or its child) a pod belongs to.
POD_LABELS = (
    "job-name",
    "batch.kubernetes.io/job-name",
    "jobset.sigs.k8s.io/jobset-name",
    "training.kubeflow.org/job-name",
    "ray.io/cluster",
    "leaderworkerset.sigs.k8s.io/name",
    "volcano.sh/job-name",
)
# --kind values -> (API group, kind).
KINDS: dict[str, tuple[str, str]] = {
    "job": ("batch", "Job"),
    "jobs": ("batch", "Job"),
    "job.batch": ("batch", "Job"),
    "jobset": ("jobset.x-k8s.io", "JobSet"),
    "pytorchjob": ("kubeflow.org", "PyTorchJob"),
    "trainjob": ("trainer.kubeflow.org", "TrainJob"),
    "leaderworkerset": ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    "lws": ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"),
    "rayjob": ("ray.io", "RayJob"),
    "vcjob": ("batch.volcano.sh", "Job"),
    "volcanojob": ("batch.volcano.sh", "Job"),
    "job.batch.volcano.sh": ("batch.volcano.sh", "Job"),
}
# The API version `diagnose NAMESPACE/NAME` asks the cluster for, per kind.
API_VERSIONS: dict[tuple[str, str], str] = {
    ("batch", "Job"): "batch/v1",
    ("jobset.x-k8s.io", "JobSet"): "jobset.x-k8s.io/v1alpha2",
    ("kubeflow.org", "PyTorchJob"): "kubeflow.org/v1",
    ("trainer.kubeflow.org", "TrainJob"): "trainer.kubeflow.org/v1alpha1",
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "leaderworkerset.x-k8s.io/v1",
    ("ray.io", "RayJob"): "ray.io/v1",
    ("batch.volcano.sh", "Job"): "batch.volcano.sh/v1alpha1",
}
KUEUE_GROUP = "kueue.x-k8s.io"


class DumpError(ValueError):
    """The dump cannot be judged: what is wrong with it, in one line."""


@dataclass(frozen=True, slots=True)
class Inputs:
    workload: Mapping[str, Any]
    pods: list[Mapping[str, Any]]
    events: list[Mapping[str, Any]]
    kueue_workload: Mapping[str, Any] | None


def parse_kind(value: str) -> tuple[str, str]:
    """`--kind` -> (group, kind): `Job`, `jobset`, `RayJob`, `Job.batch.volcano.sh`, ..."""
    found = KINDS.get(value.strip().lower())
    if found is None:
        known = ", ".join(sorted({k for _, k in KINDS.values()} | {"vcjob"}))
        raise DumpError(f"unknown kind {value!r}: one of {known}")
    return found


def items_of(document: object) -> list[Mapping[str, Any]]:
    """The objects of a `v1 List`, a typed list (PodList, EventList, JobList), a single object,
    or several of those (a JSON array of them, or documents written one after the other, as
    `kubectl get job X -o json; kubectl get pods -o json` into one file does), each a mapping
    with a kind. A list inside a list is read too. Errors name the path of the bad item."""
    out: list[Mapping[str, Any]] = []
    if isinstance(document, Sequence) and not isinstance(document, str | bytes):
        for i, doc in enumerate(document):
            _collect(doc, f"[{i}].", out)
    else:
        _collect(document, "", out)
    return out


def _is_list(obj: Mapping[str, Any]) -> bool:
    kind = obj.get("kind")
    return "items" in obj and (kind is None or (isinstance(kind, str) and kind.endswith("List")))


def _collect(document: object, path: str, out: list[Mapping[str, Any]], depth: int = 0) -> None:
    where = path.removesuffix(".") or "the input"
    if not isinstance(document, Mapping):
        raise DumpError(
            f"{where}: expected a JSON object (the output of kubectl get ... -o json),"
            f" got {type(document).__name__}"
        )
    if not _is_list(document):
        if not isinstance(document.get("kind"), str):
            raise DumpError(f"{where}: no kind")
        out.append(document)
        return
    raw = document.get("items")
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise DumpError(f"{path}items: expected a list of objects")
    for i, item in enumerate(raw):
        at = f"{path}items[{i}]"
        if isinstance(item, Mapping) and _is_list(item) and depth < _MAX_NESTED_LISTS:
            _collect(item, at + ".", out, depth + 1)
        elif not isinstance(item, Mapping):
            raise DumpError(f"{at}: expected an object, got {type(item).__name__}")
        elif not isinstance(item.get("kind"), str):
            raise DumpError(f"{at}: no kind")
        else:
            out.append(item)


# `jq -s` of a few kubectl outputs nests once; deeper is not a capture.
_MAX_NESTED_LISTS = 2


def _is_event(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Event"


def _is_pod(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Pod" and group_kind(obj)[0] == ""


def _is_kueue(obj: Mapping[str, Any]) -> bool:
    return group_kind(obj) == (KUEUE_GROUP, "Workload")


def _owner_uids(obj: Mapping[str, Any]) -> list[str]:
    return [str(r.get("uid")) for r in mappings(obj, "metadata", "ownerReferences") if r.get("uid")]


def choose_workload(
    items: Sequence[Mapping[str, Any]],
    kind: tuple[str, str] | None = None,
    name: str | None = None,
) -> Mapping[str, Any]:
    """The one workload of the dump: of `kind` and `name` ("NAME" or "NAMESPACE/NAME") when
    given, else the one object that is not a Pod, an Event or a Kueue Workload and is not owned
    by another object of the dump (a JobSet's Jobs, a RayJob's RayCluster); a supported kind
    wins over others."""
    others = [o for o in items if not (_is_event(o) or _is_pod(o) or _is_kueue(o))]
    if name is not None:
        # `kubectl get jobs,pods,events` lists every Job of the namespace: the name picks one.
        namespace, _, wanted = name.rpartition("/")
        others = [
            o
            for o in others
            if Meta(o).name == wanted and (not namespace or Meta(o).namespace == namespace)
        ]
        if not others:
            raise DumpError(f"no workload named {name!r} in the input")
    if kind is not None:
        chosen = [o for o in others if group_kind(o) == kind]
        if not chosen:
            what = f" named {name!r}" if name else ""
            raise DumpError(f"no {kind[1]} ({kind[0] or 'core'}){what} in the input")
    elif name is not None:
        known = [o for o in others if group_kind(o) in READERS]
        chosen = _parents(known or others)
    else:
        uids = {u for o in others if (u := text(o, "metadata", "uid"))}
        top = [o for o in others if not any(u in uids for u in _owner_uids(o))]
        known = [o for o in top if group_kind(o) in READERS]
        chosen = _parents(known or top)
        if not chosen:
            raise DumpError("no workload in the input (only pods and events)")
    if len(chosen) > 1:
        names = ", ".join(_label(o) for o in chosen[:5])
        more = f" and {len(chosen) - 5} more" if len(chosen) > 5 else ""
        raise DumpError(
            f"several workloads in the input ({names}{more}): name one"
            " (diagnose -f FILE [NAMESPACE/]NAME) or pass --kind"
        )
    return chosen[0]


def _label(obj: Mapping[str, Any]) -> str:
    return f"{obj.get('kind')}/{Meta(obj).name or '?'}"


def _parents(objs: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Drop the objects that are another one's children by name or label, for dumps that lost
    their ownerReferences: a JobSet's Job `<jobset>-<replicatedJob>-<index>` carries
    `jobset.sigs.k8s.io/jobset-name`, a RayJob's submitter Job has the RayJob's name."""
    names = {Meta(o).name for o in objs}

    def child(obj: Mapping[str, Any]) -> bool:
        meta = Meta(obj)
        if any(meta.label(key) in names - {meta.name} for key in POD_LABELS):
            return True
        # A child has another kind than its parent: Jobs `train` and `train-2` are siblings.
        kind = group_kind(obj)
        if any(
            meta.name.startswith(Meta(o).name + "-")
            for o in objs
            if Meta(o).name and group_kind(o) != kind
        ):
            return True
        # Same name: the batch Job is the child (RayJob submitter, TrainJob's JobSet's Jobs).
        return group_kind(obj) in _CHILD_KINDS and sum(Meta(o).name == meta.name for o in objs) > 1

    kept = [o for o in objs if not child(o)]
    return kept or objs


# Kinds that other workloads create under their own name (a RayJob's submitter Job, the
# TrainJob's JobSet).
_CHILD_KINDS = frozenset({("batch", "Job"), ("jobset.x-k8s.io", "JobSet")})


def _belongs(
    pod: Mapping[str, Any],
    workload: Mapping[str, Any],
    owned: set[str],
    names: set[str],
) -> bool:
    meta = Meta(pod)
    wmeta = Meta(workload)
    if wmeta.namespace and meta.namespace and meta.namespace != wmeta.namespace:
        return False
    if any(uid in owned for uid in _owner_uids(pod)):
        return True
    item = wmeta.label(RUN_QUEUE_ITEM)
    if item is not None and meta.label(RUN_QUEUE_ITEM) == item:
        return True
    # Exact names only: the operators label every pod with their workload's own name (a
    # JobSet's pods carry `jobset.sigs.k8s.io/jobset-name`, not only their Job's), and a
    # prefix would take the pods of `train-2` for those of `train`.
    return any(meta.label(key) in names for key in POD_LABELS)


def select(
    items: Sequence[Mapping[str, Any]],
    kind: tuple[str, str] | None = None,
    name: str | None = None,
) -> Inputs:
    """The inputs of `assess` for the dump's workload (see `choose_workload`)."""
    workload = choose_workload(items, kind, name)
    meta = Meta(workload)
    uid = text(workload, "metadata", "uid")
    # The workload and, transitively, every object of the dump it owns.
    owned = {uid} if uid else set()
    names = {meta.name} if meta.name else set()
    cluster = text(workload, "status", "rayClusterName")
    if cluster:
        names.add(cluster)
    grew = True
    while grew:
        grew = False
        for obj in items:
            ouid = text(obj, "metadata", "uid")
            if ouid and ouid not in owned and any(u in owned for u in _owner_uids(obj)):
                owned.add(ouid)
                grew = True
    pods = [p for p in items if _is_pod(p) and _belongs(p, workload, owned, names)]
    events = [e for e in items if _is_event(e)]
    candidates = [
        w
        for w in items
        if _is_kueue(w)
        and (
            any(u in owned for u in _owner_uids(w))
            or any(
                r.get("name") == meta.name and r.get("kind") == workload.get("kind")
                for r in mappings(w, "metadata", "ownerReferences")
            )
            # kueue `pkg/controller/jobframework/reconciler.go` (`ConstructWorkload`) labels
            # it with the job's uid: what is left when a trimmed capture lost ownerReferences.
            or (uid is not None and Meta(w).label(kueue_status.JOB_UID_LABEL) == uid)
        )
    ]
    return Inputs(workload, pods, events, max(candidates, key=_kueue_rank) if candidates else None)


# Of several Workloads for one workload (a LeaderWorkerSet has one per group, an old one may
# linger), the one that holds it back explains it: deactivated, then waiting, then the rest.
_KUEUE_ORDER = (
    kueue_status.KueueState.DEACTIVATED,
    *(s for s in kueue_status.KueueState if s.waiting),
)


def _kueue_rank(workload: Mapping[str, Any]) -> tuple[int, str]:
    state = kueue_status.workload_status(workload).state
    rank = len(_KUEUE_ORDER) - _KUEUE_ORDER.index(state) if state in _KUEUE_ORDER else 0
    return rank, Meta(workload).creation_timestamp or ""
