"""Shared by the simulated controllers: the reconcile context, owner references, conditions
and Events.

A controller never holds state that Kubernetes would not: it reads objects from the store,
writes status through the `/status` rules and creates children with a controller
ownerReference, so that everything it does is visible to the agent exactly as in a cluster.
The context collects the next instant at which a controller wants to run again
(`wake_at`), which is how the clock-driven loop knows how far it may jump.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from datetime import timedelta
from typing import Any

from launch_agent.sandbox.cluster.clock import Clock
from launch_agent.sandbox.kube.store import Obj, Store, timestamp

Conditions = list[dict[str, Any]]
# store -> Event identity -> the name of the stored Event it aggregates into.
_AGGREGATED: weakref.WeakKeyDictionary[Store, dict[tuple[str, ...], str]] = (
    weakref.WeakKeyDictionary()
)
_SIMILAR: weakref.WeakKeyDictionary[Store, dict[tuple[str, ...], int]] = weakref.WeakKeyDictionary()
AGGREGATE_MAX_EVENTS = 10


class Ctx:
    def __init__(self, store: Store, clock: Clock) -> None:
        self.store, self.clock = store, clock
        self.wakeups: list[float] = []
        self.writes = 0

    @property
    def t(self) -> float:
        return self.clock.seconds()

    def ts(self, seconds: float | None = None) -> str:
        if seconds is None:
            return timestamp(self.clock.now())
        return timestamp(self.clock.now() + timedelta(seconds=seconds - self.t))

    def wake_at(self, seconds: float) -> None:
        if seconds > self.t:
            self.wakeups.append(seconds)

    # --- writes that count (the loop runs until a pass writes nothing) ---------------------

    def create(self, resource: str, namespace: str, body: Obj) -> Obj:
        self.writes += 1
        return self.store.create(self.store.rt(resource), namespace, body)

    def set_status(self, obj: Obj, status: dict[str, Any]) -> Obj:
        if obj.get("status") == status:
            return obj
        rt = self.store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rt is not None
        meta = obj["metadata"]
        current = self.store.find(rt, meta.get("namespace", ""), meta["name"])
        if current is None:
            return obj
        self.writes += 1
        return self.store.update(
            rt, meta.get("namespace", ""), meta["name"], {"status": status}, subresource="status"
        )

    def update(self, obj: Obj) -> Obj:
        rt = self.store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rt is not None
        meta = obj["metadata"]
        before = self.store.find(rt, meta.get("namespace", ""), meta["name"])
        if before is None:
            return obj
        body = {
            **obj,
            "metadata": {**meta, "resourceVersion": before["metadata"]["resourceVersion"]},
        }
        after = self.store.update(rt, meta.get("namespace", ""), meta["name"], body)
        if after is not before:
            self.writes += 1
        return after

    def delete(self, obj: Obj, propagation: str = "Background") -> None:
        rt = self.store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rt is not None
        meta = obj["metadata"]
        current = self.store.find(rt, meta.get("namespace", ""), meta["name"])
        if current is None or current["metadata"].get("deletionTimestamp"):
            return
        self.writes += 1
        self.store.delete(rt, meta.get("namespace", ""), meta["name"], propagation=propagation)

    def confirm_deleted(self, pod: Obj) -> None:
        """The kubelet's final delete of a pod whose containers stopped (grace period 0)."""
        rt = self.store.rt("pods")
        meta = pod["metadata"]
        current = self.store.find(rt, meta["namespace"], meta["name"])
        if current is None or current["metadata"].get("deletionGracePeriodSeconds") == 0:
            return
        self.writes += 1
        self.store.delete(rt, meta["namespace"], meta["name"], grace_period=0)

    def event(self, involved: Obj, kind: str, reason: str, message: str, source: str) -> None:
        """Record a core/v1 Event about `involved` (what `kubectl describe` shows).

        Repeats are correlated as client-go's recorder does
        (`staging/src/k8s.io/client-go/tools/record/events_cache.go`): the same Event (object,
        type, reason, message, source) updates the stored one, `count` + 1 and a new
        `lastTimestamp` (`eventLogger.eventObserve`); from the 10th similar one (same but the
        message, `EventAggregator`, `defaultAggregateMaxEvents`) on, they go into one Event whose
        message is `(combined from similar events): <latest message>`. So a controller retrying a
        refused create leaves a handful of Events, not thousands. (The aggregator's 10-minute
        window is not modelled: similar Events are combined for the life of the store.)
        """
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        now = self.ts()
        rt = self.store.rt("events")
        similar = (namespace, str(meta["uid"]), kind, reason, source)
        counts = _SIMILAR.setdefault(self.store, {})
        counts[similar] = counts.get(similar, 0) + 1
        combined = counts[similar] >= AGGREGATE_MAX_EVENTS
        if combined:
            message = f"(combined from similar events): {message}"
        key = (*similar, "" if combined else message)
        seen = _AGGREGATED.setdefault(self.store, {})
        previous = seen.get(key)
        current = self.store.find(rt, namespace, previous) if previous else None
        if current is not None:
            self.writes += 1
            updated = self.store.update(
                rt,
                namespace,
                current["metadata"]["name"],
                {
                    **current,
                    "message": message,
                    "count": int(current.get("count") or 1) + 1,
                    "lastTimestamp": now,
                },
            )
            self._mirror(updated)
            return
        created = self.create(
            "events",
            namespace,
            {
                "metadata": {"generateName": f"{meta['name']}."},
                "involvedObject": {
                    "apiVersion": involved["apiVersion"],
                    "kind": involved["kind"],
                    "name": meta["name"],
                    "namespace": namespace,
                    "uid": meta["uid"],
                },
                "reason": reason,
                "message": message,
                "type": kind,
                "source": {"component": source},
                "reportingComponent": source,
                "firstTimestamp": now,
                "lastTimestamp": now,
                "count": 1,
            },
        )
        seen[key] = created["metadata"]["name"]
        self._mirror(created)

    def _mirror(self, event: Obj) -> None:
        """The events.k8s.io/v1 view of a core/v1 Event, as `pkg/apis/events/v1/conversion.go`
        maps it: `regarding`, `note`, `reportingController`, `deprecatedCount`,
        `deprecatedFirstTimestamp` / `deprecatedLastTimestamp`, `deprecatedSource`."""
        rt = self.store.rt("events.events.k8s.io")
        meta = event["metadata"]
        body = {
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "eventTime": None,
            "reportingController": event.get("reportingComponent") or "",
            "reportingInstance": "",
            "action": "",
            "reason": event.get("reason"),
            "regarding": event.get("involvedObject"),
            "note": event.get("message"),
            "type": event.get("type"),
            "deprecatedSource": event.get("source"),
            "deprecatedFirstTimestamp": event.get("firstTimestamp"),
            "deprecatedLastTimestamp": event.get("lastTimestamp"),
            "deprecatedCount": event.get("count"),
        }
        current = self.store.find(rt, meta["namespace"], meta["name"])
        if current is None:
            self.store.create(rt, meta["namespace"], body)
        else:
            self.store.update(
                rt, meta["namespace"], meta["name"], {**body, "metadata": current["metadata"]}
            )

    def children(self, owner: Obj, kind: str) -> list[Obj]:
        return [
            obj
            for _, obj in self.store.dependents(owner["metadata"]["uid"])
            if obj["kind"] == kind and is_controlled_by(obj, owner)
        ]


def owner_ref(owner: Obj) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def is_controlled_by(obj: Obj, owner: Obj) -> bool:
    return any(
        ref.get("uid") == owner["metadata"]["uid"] and ref.get("controller")
        for ref in obj["metadata"].get("ownerReferences") or []
    )


def condition(
    kind: str, status: bool, reason: str, message: str, now: str, **extra: Any
) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        **extra,
    }


def merge_conditions(
    old: Iterable[dict[str, Any]] | None, new: Iterable[dict[str, Any]]
) -> Conditions:
    """Replace conditions by type, keeping lastTransitionTime when the status did not change."""
    merged = [dict(c) for c in old or []]
    for cond in new:
        for i, existing in enumerate(merged):
            if existing.get("type") == cond["type"]:
                keep: dict[str, Any] = {
                    k: existing[k] for k in ("lastTransitionTime", "lastProbeTime") if k in existing
                }
                same = existing.get("status") == cond["status"]
                merged[i] = {**cond, **keep} if same else dict(cond)
                break
        else:
            merged.append(dict(cond))
    return merged


def has_condition(obj: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def pod_from_template(
    template: Obj,
    owner: Obj,
    *,
    name: str | None = None,
    generate: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: list[str] | None = None,
) -> Obj:
    tmeta = template.get("metadata") or {}
    meta: dict[str, Any] = {
        "labels": {**(tmeta.get("labels") or {}), **(labels or {})},
        "annotations": {**(tmeta.get("annotations") or {}), **(annotations or {})},
        "ownerReferences": [owner_ref(owner)],
    }
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = generate or f"{owner['metadata']['name']}-"
    if finalizers:
        meta["finalizers"] = finalizers
    return {"metadata": meta, "spec": dict(template.get("spec") or {})}
