"""An informer's local cache and the events that bring it up to date (pure).

The cache maps (namespace, name) to the latest object seen. Two operations change it:

- `apply_event`: one watch event (ADDED / MODIFIED / DELETED) -> the event to deliver, or None
  when it carries nothing new (an object replayed with a resourceVersion the cache already has,
  or a DELETED for an object never seen).
- `reconcile_list`: a full list after (re)connecting -> the differences as events. This is what
  makes a 410 or a long disconnection safe: an object that changed while the watch was down
  arrives as MODIFIED with its latest status (so a terminal state is never missed), and one that
  was deleted meanwhile arrives as DELETED carrying the last state the cache knew.

Events are compared by `metadata.resourceVersion` only, which the API server changes on every
write; objects are never compared field by field.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from launch_agent.tracking import jobset_startup, volcano
from launch_agent.tracking.views import Meta

Obj = dict[str, Any]
Key = tuple[str, str]
EventType = Literal["ADDED", "MODIFIED", "DELETED"]


@dataclass(frozen=True, slots=True)
class CacheEvent:
    type: EventType
    obj: Obj
    # True for events synthesised from a list (initial sync or relist), not seen on a watch.
    from_list: bool = False


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = Meta(obj)
    return (meta.namespace, meta.name)


def version_of(obj: Mapping[str, Any]) -> str:
    return Meta(obj).resource_version


def apply_event(cache: dict[Key, Obj], etype: str, obj: Obj) -> CacheEvent | None:
    """Update `cache` with one watch event; the event to deliver, or None if nothing changed."""
    key = key_of(obj)
    old = cache.get(key)
    if etype == "DELETED":
        if old is None:
            return None
        del cache[key]
        return CacheEvent("DELETED", obj)
    if etype not in ("ADDED", "MODIFIED"):
        return None
    if old is not None and version_of(old) == version_of(obj) and version_of(obj):
        return None
    cache[key] = obj
    return CacheEvent("MODIFIED" if old is not None else "ADDED", obj)


def reconcile_list(cache: dict[Key, Obj], items: Iterable[Obj]) -> list[CacheEvent]:
    """Replace the cache's content with a fresh list; the differences, as events.

    Order: additions and modifications in list order, then deletions sorted by key, so the
    result is deterministic for a given cache and list.
    """
    events: list[CacheEvent] = []
    seen: set[Key] = set()
    for obj in items:
        key = key_of(obj)
        seen.add(key)
        old = cache.get(key)
        if old is None:
            events.append(CacheEvent("ADDED", obj, from_list=True))
        elif version_of(old) != version_of(obj) or not version_of(obj):
            events.append(CacheEvent("MODIFIED", obj, from_list=True))
        cache[key] = obj
    for key in sorted(set(cache) - seen):
        events.append(CacheEvent("DELETED", cache.pop(key), from_list=True))
    return events


def strip_managed_fields(obj: Obj) -> Obj:
    """The informers' default transform: `metadata.managedFields` is often half an object's
    size and nothing in the agent reads it (client-go informers drop it the same way)."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


# A dotted path into an object, split: ("spec", "runPolicy", "suspend").
Path = tuple[str, ...]
# The suspend flags of the built-in kinds (`render/kinds.py`), kept whatever the caller passes.
BUILTIN_SUSPEND_PATHS: tuple[Path, ...] = (("spec", "suspend"), ("spec", "runPolicy", "suspend"))


def tracking_view(obj: Obj, suspend_paths: Iterable[Path] = BUILTIN_SUSPEND_PATHS) -> Obj:
    """Only what tracking and adoption read: kind, metadata, status and the suspend flags.

    A pod's spec (containers, volumes, env) or a JobSet's templates are most of their size and
    tracking reads none of it; at 10,000 runs this is the difference between caching the
    cluster's manifests and caching their states. `suspend_paths` are the flags to keep: the
    built-in kinds' and every custom kind's `suspendPath` (a held run whose flag is dropped
    reads as resumed by hand after a restart, and the quota engine charges it).
    """
    strip_managed_fields(obj)
    spec = obj.get("spec")
    slim: Obj = {k: v for k, v in obj.items() if k != "spec"}
    if isinstance(spec, dict) and obj.get("kind") == "Pod":
        slim["spec"] = _pod_spec_view(spec)
    elif isinstance(spec, dict):
        kept: Obj = {}
        for path in (*BUILTIN_SUSPEND_PATHS, *suspend_paths):
            if len(path) >= 2 and path[0] == "spec":  # metadata and status are kept whole
                _copy_path(spec, kept, path[1:])
        # The few spec fields the judgement reads (a Volcano Job's task minAvailable, a
        # JobSet's startup order and dependsOn).
        kept.update(volcano.tracked_spec(obj))
        kept.update(jobset_startup.tracked_spec(obj))
        slim["spec"] = kept
    return slim


def _copy_path(source: Obj, target: Obj, path: Path) -> None:
    """Copy the leaf at `path` from `source` into `target`, creating the mappings on the way."""
    node: Any = source
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return
    if path[-1] not in node:
        return
    dest = target
    for key in path[:-1]:
        child = dest.get(key)
        if not isinstance(child, dict):
            child = dest[key] = {}
        dest = child
    dest[path[-1]] = node[path[-1]]


def _pod_spec_view(spec: Obj) -> Obj:
    """What the judgement reads of a pod's spec (tracking/pods.py): which container is the
    run's (names and images), which are native sidecars (an init container's restartPolicy),
    and the node a refusal names; not the env, volumes or commands that make up its size."""
    kept: Obj = {}
    for key, fields in (
        ("containers", ("name", "image")),
        ("initContainers", ("name", "image", "restartPolicy")),
    ):
        items = spec.get(key)
        if isinstance(items, list):
            kept[key] = [
                {f: c[f] for f in fields if f in c} if isinstance(c, dict) else c for c in items
            ]
    if "nodeName" in spec:
        kept["nodeName"] = spec["nodeName"]
    return kept
