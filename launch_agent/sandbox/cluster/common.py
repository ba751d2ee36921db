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
from datetime import UTC, datetime, timedelta
from typing import Any

from launch_agent.sandbox.cluster.clock import Clock
from launch_agent.sandbox.kube.defaults import SERIALIZED_STATUS
from launch_agent.sandbox.kube.resources import ResourceType
from launch_agent.sandbox.kube.store import Obj, Store, timestamp

Conditions = list[dict[str, Any]]
# store -> Event identity -> the name of the stored Event it aggregates into.
_AGGREGATED: weakref.WeakKeyDictionary[Store, dict[tuple[str, ...], str]] = (
    weakref.WeakKeyDictionary()
)
_SIMILAR: weakref.WeakKeyDictionary[Store, dict[tuple[str, ...], int]] = weakref.WeakKeyDictionary()
AGGREGATE_MAX_EVENTS = 10
# store -> isomorphic key -> (the stored events.k8s.io Event's name, occurrences).
_SERIES: weakref.WeakKeyDictionary[Store, dict[tuple[str, ...], tuple[str, int]]] = (
    weakref.WeakKeyDictionary()
)
# Components that record through client-go's events.k8s.io/v1 recorder
# (`staging/src/k8s.io/client-go/tools/events`), with the `action` of each reason: kube-scheduler
# (`pkg/scheduler/scheduler.go`, `events.NewEventBroadcasterAdapter`; `schedule_one.go` records
# FailedScheduling with action "Scheduling", Scheduled with "Binding";
# `framework/preemption/preemption.go` Preempted with "Preempting"), KubeRay v1.7
# (`raycluster_controller.go` / `rayjob_controller.go`: `events.EventRecorder`, actions
# `utils.CreateAction` "Create", `DeleteAction` "Delete", ...; `_kuberay_action`) and JobSet
# v0.12 (`jobset_controller.go`: `Record events.EventRecorder`, every Event with action
# "Reconciling").
EVENTS_V1_ACTIONS: dict[str, dict[str, str]] = {
    "default-scheduler": {
        "FailedScheduling": "Scheduling",
        "Scheduled": "Binding",
        "Preempted": "Preempting",
    },
    "raycluster-controller": {},
    "rayjob-controller": {},
    "jobset": {"": "Reconciling"},
}


def seconds_of(ctx: Ctx, stamp: str | None) -> float | None:
    """An RFC 3339 timestamp the cluster wrote, on the cluster's clock (`Ctx.t`)."""
    if not stamp:
        return None
    moment = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=ctx.clock.now().tzinfo)
    return ctx.t + (moment - ctx.clock.now()).total_seconds()


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
        rt = self.store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rt is not None
        serialized = SERIALIZED_STATUS.get(rt.storage)
        if serialized is not None:
            # Compared as the API server will store it, so a pass that changed nothing
            # writes nothing (a Job's zero counters are not stored).
            status = serialized(status)
        if obj.get("status") == status:
            return obj
        meta = obj["metadata"]
        current = self.store.find(rt, meta.get("namespace", ""), meta["name"])
        if current is None:
            return obj
        self.writes += 1
        return self.store.update(
            rt, meta.get("namespace", ""), meta["name"], {"status": status}, subresource="status"
        )

    def update(self, obj: Obj, subresource: str | None = None) -> Obj:
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
        after = self.store.update(
            rt, meta.get("namespace", ""), meta["name"], body, subresource=subresource
        )
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
        """Record an Event about `involved` as its component does: through the events.k8s.io/v1
        recorder for the components in `EVENTS_V1_ACTIONS` (`event_v1`), else core/v1.

        Repeats are correlated as client-go's recorder does
        (`staging/src/k8s.io/client-go/tools/record/events_cache.go`): the same Event (object,
        type, reason, message, source) updates the stored one, `count` + 1 and a new
        `lastTimestamp` (`eventLogger.eventObserve`); from the 10th similar one (same but the
        message, `EventAggregator`, `defaultAggregateMaxEvents`) on, they go into one Event whose
        message is `(combined from similar events): <latest message>`. So a controller retrying a
        refused create leaves a handful of Events, not thousands. (The aggregator's 10-minute
        window is not modelled: similar Events are combined for the life of the store.)
        """
        if source in EVENTS_V1_ACTIONS:
            self.event_v1(involved, kind, reason, message, source)
            return
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

    def event_v1(self, involved: Obj, kind: str, reason: str, note: str, source: str) -> None:
        """An events.k8s.io/v1 Event, as `tools/events` (`recordToSink`, `getKey`) records it.

        Occurrences are folded by their isomorphic key (type, action, reason, reporting
        controller and instance, regarding object) — not by their note: the second one turns
        the stored Event into a series (`series.count` 2, `lastObservedTime`), later ones
        raise the count, and the note stays the first occurrence's. `eventTime` is the first
        occurrence; the deprecated fields stay empty. (Upstream writes the series again only
        every 30 minutes and 6 minutes after its last occurrence, `refreshExistingEventSeries`
        and `finishSeries`; here every occurrence is written.) The core/v1 view the API server
        serves is written beside it (`_core_view`).
        """
        meta = involved["metadata"]
        namespace = meta.get("namespace") or "default"
        actions = EVENTS_V1_ACTIONS[source]
        action = actions.get(reason) or actions.get("") or _kuberay_action(reason)
        instance = f"{source}-sandbox-node"  # NewRecorder: `<controller>-<hostname>`
        key = (namespace, str(meta["uid"]), kind, action, reason, source)
        rt = self.store.rt("events.events.k8s.io")
        series = _SERIES.setdefault(self.store, {})
        now = timestamp_micro(self.clock.now())
        known = series.get(key)
        current = self.store.find(rt, namespace, known[0]) if known else None
        self.writes += 1
        if current is not None and known is not None:
            count = known[1] + 1
            series[key] = (known[0], count)
            body = {**current, "series": {"count": count, "lastObservedTime": now}}
            stored = self.store.update(rt, namespace, known[0], body)
        else:
            # recorderImpl.makeEvent: name `<regarding>.<UnixNano hex>`; the simulated clock
            # stands still within a pass, so the number of Events so far keeps names apart.
            nanos = int(self.clock.now().timestamp() * 1e9) + len(series)
            name = f"{meta['name']}.{nanos:x}"
            stored = self.store.create(
                rt,
                namespace,
                {
                    "metadata": {"name": name, "namespace": namespace},
                    "eventTime": now,
                    "reportingController": source,
                    "reportingInstance": instance,
                    "action": action,
                    "reason": reason,
                    "regarding": {
                        "apiVersion": involved["apiVersion"],
                        "kind": involved["kind"],
                        "name": meta["name"],
                        "namespace": namespace,
                        "uid": meta["uid"],
                    },
                    "note": note,
                    "type": kind,
                },
            )
            series[key] = (name, 1)
        self._core_view(stored)

    def _core_view(self, event: Obj) -> None:
        """The core/v1 view of an events.k8s.io/v1 Event (`pkg/apis/events/v1/conversion.go`,
        `Convert_v1_Event_To_core_Event`): `involvedObject` is `regarding`, `message` the
        `note`, `source` the empty `deprecatedSource`, `firstTimestamp` / `lastTimestamp`
        the empty deprecated ones and `count` the deprecated 0 (omitted); `eventTime`,
        `series`, `action` and the reporting fields as they are."""
        rt = self.store.rt("events")
        meta = event["metadata"]
        body: Obj = {
            "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
            "involvedObject": event.get("regarding"),
            "reason": event.get("reason"),
            "message": event.get("note"),
            "source": {},
            "firstTimestamp": None,
            "lastTimestamp": None,
            "type": event.get("type"),
            "eventTime": event.get("eventTime"),
            "action": event.get("action"),
            "reportingComponent": event.get("reportingController"),
            "reportingInstance": event.get("reportingInstance"),
        }
        if event.get("series"):
            body["series"] = event["series"]
        self._put(rt, meta, body)

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
        self._put(rt, meta, body)

    def _put(self, rt: ResourceType, meta: Obj, body: Obj) -> None:
        """Create the Event object, or replace it keeping the stored metadata (its uid and
        resourceVersion line)."""
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


def _kuberay_action(reason: str) -> str:
    """ray-operator `controllers/ray/utils/constant.go`: the action of a KubeRay Event."""
    for prefix, action in (
        ("Created", "Create"),
        ("FailedToCreate", "Create"),
        ("Deleted", "Delete"),
        ("FailedToDelete", "Delete"),
        ("Updated", "Update"),
        ("FailedToUpdate", "Update"),
    ):
        if reason.startswith(prefix):
            return action
    return "Validate"


def timestamp_micro(moment: datetime) -> str:
    """metav1.MicroTime as JSON (RFC 3339 with microseconds, `RFC3339Micro`)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
