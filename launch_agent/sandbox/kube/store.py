"""The API server's state: objects, one global resourceVersion counter, event logs, watchers.

All methods are synchronous and run on the event loop thread, so each write is atomic with
respect to every reader and watcher: a write bumps the counter, replaces the stored object
(stored objects are never mutated, a write stores a new dict) and pushes the event to the log
and to the open watchers in one step. The HTTP layer (`server.py`) and the simulated cluster
both go through these methods, so they obey the same rules: optimistic concurrency,
`/status` split, generation bumps on spec changes only, no event for a no-op write, finalizers
and ownerReference garbage collection.
"""

from __future__ import annotations

import copy
import logging
import random
import types
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from launch_agent.sandbox.kube import errors
from launch_agent.sandbox.kube.admission import admit_pod
from launch_agent.sandbox.kube.defaults import ADMISSION, SERIALIZED_STATUS
from launch_agent.sandbox.kube.objectmeta import validate_meta
from launch_agent.sandbox.kube.resources import CrdError, Registry, ResourceType, crd_resource_types
from launch_agent.sandbox.kube.selectors import FieldSelector, LabelSelector
from launch_agent.sandbox.kube.watch import EventLog, Watcher, WatchEvent

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)
Listener = Callable[[str, str, Obj], None]
Objs = list[Obj]
Typed = list[tuple[ResourceType, Obj]]
Watchers = list[Watcher]
Types = list[ResourceType]
CRD_STORAGE = "apiextensions.k8s.io/customresourcedefinitions"
_PRECONDITION = {"uid": "UID", "resourceVersion": "ResourceVersion"}
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what kube-apiserver's generateName uses


def timestamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _load_cel() -> types.ModuleType | None:
    try:
        from launch_agent.sandbox.kube import cel
    except ModuleNotFoundError as exc:
        logging.getLogger(__name__).warning(
            "CRD x-kubernetes-validations are not applied: %s (pip install cel-python)", exc
        )
        return None
    return cel


# Imported with this module, never on a running event loop: cel-python's imports read
# time-zone files and build its parser (about 100 ms).
_CEL = _load_cel()


def cel_rules() -> types.ModuleType | None:
    """`cel.py`, or None (logged once) without cel-python: the sandbox then runs no CRD rule,
    as a cluster whose CRDs had none, rather than refusing every custom resource."""
    return _CEL


def _pod_grace(pod: Obj, requested: int | None) -> int:
    """`CheckGracefulDelete` for pods: the grace period this delete gets."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
        return 0
    grace = requested if requested is not None else spec.get("terminationGracePeriodSeconds", 30)
    return max(int(grace or 0), 0)


def _drop_empty_meta(meta: Obj) -> None:
    """ObjectMeta's maps and lists are `omitempty`: kube-apiserver serves no `labels: {}` or
    `finalizers: []` (the last finalizer removed leaves no key)."""
    for key in ("labels", "annotations", "finalizers", "ownerReferences"):
        if key in meta and not meta[key]:
            del meta[key]


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    def __init__(
        self,
        registry: Registry | None = None,
        *,
        event_log_size: int = 10_000,
        seed: int = 0,
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.registry = registry or Registry()
        self.rv = 1
        self.event_log_size = event_log_size
        self.now: Callable[[], datetime] = now or (lambda: datetime.now(UTC))
        self._rng = random.Random(seed)
        self._objects: dict[str, dict[Key, Obj]] = {}
        self._logs: dict[str, EventLog] = {}
        self._compacted = 0
        self._watchers: dict[str, set[Watcher]] = {}
        self._by_uid: dict[str, tuple[str, Key]] = {}
        self._dependents: dict[str, set[tuple[str, Key]]] = {}
        self.listeners: list[Listener] = []
        # (namespace, pod, container) -> (timestamp, line) the container "printed", written by
        # the simulated kubelet and served by pods/log.
        self.pod_logs: dict[tuple[str, str, str], list[tuple[str, str]]] = {}
        for ns in ("default", "kube-system", "kube-public"):
            self.create(self.rt("namespaces"), "", {"metadata": {"name": ns}})

    # --- lookups ------------------------------------------------------------------------------

    def rt(self, name: str) -> ResourceType:
        found = self.registry.find(name)
        if found is None:
            raise KeyError(f"no resource {name!r} is served (register its CRD first)")
        return found

    def _table(self, rt: ResourceType) -> dict[Key, Obj]:
        return self._objects.setdefault(rt.storage, {})

    def log(self, storage: str) -> EventLog:
        if storage not in self._logs:
            # Nothing of this resource was logged since every log was last compacted.
            self._logs[storage] = EventLog(self.event_log_size, floor=self._compacted)
        return self._logs[storage]

    def backdate(self, rt: ResourceType, seconds: float) -> int:
        """See `Objects.backdate`. New dicts, not edits: earlier watch events hold the old."""
        table = self._table(rt)
        for key, obj in table.items():
            meta = obj["metadata"]
            created = datetime.fromisoformat(meta["creationTimestamp"].replace("Z", "+00:00"))
            moved = timestamp(created - timedelta(seconds=seconds))
            table[key] = {**obj, "metadata": {**meta, "creationTimestamp": moved}}
        return len(table)

    def get(self, rt: ResourceType, namespace: str, name: str) -> Obj:
        obj = self._table(rt).get((namespace if rt.namespaced else "", name))
        if obj is None:
            raise errors.not_found(rt, name)
        return obj

    def find(self, rt: ResourceType, namespace: str, name: str) -> Obj | None:
        return self._table(rt).get((namespace if rt.namespaced else "", name))

    def list(
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector | None = None,
        fields: FieldSelector | None = None,
    ) -> Objs:
        """Matching objects sorted by (namespace, name), like etcd's key order."""
        out = []
        for (ns, _), obj in sorted(self._table(rt).items()):
            if namespace is not None and ns != namespace:
                continue
            meta = obj["metadata"]
            if labels is not None and not labels.matches(meta.get("labels")):
                continue
            if fields is not None and not fields.matches(obj):
                continue
            out.append(obj)
        return out

    def count(self, rt: ResourceType) -> int:
        return len(self._table(rt))

    def by_uid(self, uid: str) -> tuple[ResourceType, Obj] | None:
        where = self._by_uid.get(uid)
        if where is None:
            return None
        rt = self.registry.by_storage(where[0])
        obj = self._objects.get(where[0], {}).get(where[1])
        return (rt, obj) if rt is not None and obj is not None else None

    def dependents(self, uid: str) -> Typed:
        out = []
        for storage, key in sorted(self._dependents.get(uid, ())):
            rt = self.registry.by_storage(storage)
            obj = self._objects.get(storage, {}).get(key)
            if rt is not None and obj is not None:
                out.append((rt, obj))
        return out

    # --- events -------------------------------------------------------------------------------

    def _emit(self, rt: ResourceType, kind: str, obj: Obj, old: Obj | None = None) -> None:
        event = WatchEvent(self.rv, kind, obj, old)
        self.log(rt.storage).append(event)
        for watcher in list(self._watchers.get(rt.storage, ())):
            watcher.offer(event)
        for listener in list(self.listeners):
            listener(rt.storage, kind, obj)

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def watch(  # noqa: PLR0917
        self,
        rt: ResourceType,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        since: int | None,
        max_pending: int = 10_000,
    ) -> Watcher:
        """Open a watcher; `since=None` replays current state as ADDED, else logged events."""
        watcher = Watcher(rt.storage, namespace, labels, fields, max_pending)
        if since is None:
            for obj in self.list(rt, namespace, labels, fields):
                watcher.pending.append(("ADDED", obj))
            if watcher.pending:
                watcher.wake.set()
        else:
            log = self.log(rt.storage)
            if since < log.floor:
                raise errors.gone(f"too old resource version: {since} ({log.floor})")
            watcher.replay(log.after(since))
        self._watchers.setdefault(rt.storage, set()).add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self._watchers.get(watcher.storage, set()).discard(watcher)

    def watchers(self, storage: str | None = None) -> Watchers:
        if storage is not None:
            return list(self._watchers.get(storage, ()))
        return [w for ws in self._watchers.values() for w in ws]

    def compact(self, storage: str | None = None) -> None:
        """Forget logged events (every resource, or one); older RVs then answer 410."""
        if storage is None:
            self._compacted = self.rv
        for name in [storage] if storage else list(self._logs):
            self.log(name).compact(self.rv)

    # --- writes -------------------------------------------------------------------------------

    def _index(self, storage: str, key: Key, obj: Obj | None, old: Obj | None) -> None:
        if old is not None:
            self._by_uid.pop(old["metadata"]["uid"], None)
            for ref in old["metadata"].get("ownerReferences") or []:
                self._dependents.get(ref.get("uid", ""), set()).discard((storage, key))
        if obj is not None:
            self._by_uid[obj["metadata"]["uid"]] = (storage, key)
            for ref in obj["metadata"].get("ownerReferences") or []:
                self._dependents.setdefault(ref.get("uid", ""), set()).add((storage, key))

    def _put(self, rt: ResourceType, key: Key, obj: Obj | None, old: Obj | None) -> None:
        table = self._table(rt)
        if obj is None:
            table.pop(key, None)
        else:
            table[key] = obj
        self._index(rt.storage, key, obj, old)

    def mirror(self, rt: ResourceType, obj: Obj | None, *, namespace: str, name: str) -> None:
        """Hold (or, with None, drop) an object as another API server holds it: stored as
        given, with no defaulting, admission, resourceVersion of ours, event or listener call.
        For the real-cluster tier's node simulator, whose kubelet plays pods that a real API
        server owns; its own writes then go through the ordinary methods and are seen by
        the listeners, which carry them to that server."""
        key = (namespace if rt.namespaced else "", name)
        self._put(rt, key, obj, self._table(rt).get(key))

    def create(
        self,
        rt: ResourceType,
        namespace: str,
        body: Obj,
        *,
        dry_run: bool = False,
        owned: bool = False,
    ) -> Obj:
        """Store a new object. `owned=True`: the caller hands `body` over (the HTTP layer, with
        a body it just parsed), so it is stored without a defensive copy."""
        if owned:
            obj = body
        elif rt.storage == CRD_STORAGE:
            # A CRD is up to 1.4 MB of schema: deep-copying it would hold the event loop for
            # over 100 ms. Only metadata and status are written here, and stored objects are
            # never mutated, so sharing the caller's schema is safe.
            obj = {**body, "metadata": dict(body.get("metadata") or {})}
        else:
            obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise errors.bad_request("metadata must be an object")
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != namespace:
                raise errors.bad_request(
                    "the namespace of the provided object does not match the namespace sent on"
                    " the request"
                )
            meta["namespace"] = namespace
            if self.find(self.rt("namespaces"), "", namespace) is None:
                raise errors.namespace_not_found(namespace)
        else:
            meta.pop("namespace", None)
        name = meta.get("name")
        if not name:
            prefix = meta.get("generateName")
            if not prefix:
                raise errors.invalid(
                    rt, "", [("metadata.name", "Required value: name or generateName is required")]
                )
            name = prefix + "".join(self._rng.choice(_NAME_ALPHABET) for _ in range(5))
            meta["name"] = name
        causes = validate_meta(rt.kind, meta)
        if causes:
            raise errors.invalid(rt, str(name), causes)
        _drop_empty_meta(meta)
        key = (namespace if rt.namespaced else "", str(name))
        if key in self._table(rt):
            raise errors.already_exists(rt, str(name))
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        for transient in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(transient, None)
        meta["uid"] = str(uuid.UUID(int=self._rng.getrandbits(128), version=4))
        meta["creationTimestamp"] = timestamp(self.now())
        if "spec" in obj or rt.has_status:
            meta["generation"] = 1
        if rt.has_status:
            # Only the /status subresource writes status (a pod's initial phase is defaulted).
            obj["status"] = {}
        self._check_rules(rt, str(name), obj, None)
        admit = ADMISSION.get(rt.storage)
        if admit is not None:
            causes = admit(obj)
            if causes:
                raise errors.invalid(rt, str(name), causes)
        if rt.storage == "pods":
            self._admit_pod(obj, namespace)
        if rt.storage == CRD_STORAGE:
            self._check_crd(obj)
        if dry_run:
            meta["resourceVersion"] = str(self.rv)
            return obj
        meta["resourceVersion"] = self._next_rv()
        self._put(rt, key, obj, None)
        self._emit(rt, "ADDED", obj)
        if rt.storage == CRD_STORAGE:
            self._establish_crd(obj)
            return self.get(rt, "", str(name))
        return obj

    def _check_rules(self, rt: ResourceType, name: str, obj: Obj, old: Obj | None) -> None:
        """A custom resource's `x-kubernetes-validations` (`cel.py`), create or update."""
        if rt.schema is None or (cel := cel_rules()) is None:
            return
        failures = cel.validate(cel.compile_schema(rt.schema), obj, old)
        if failures:
            raise errors.invalid_fields(rt, name, [(f.path, f.type, f.body) for f in failures])

    def _admit_pod(self, pod: Obj, namespace: str) -> None:
        """The validating admission chain for a new pod (`admission.py`)."""
        admit_pod(
            pod,
            namespace=self.find(self.rt("namespaces"), "", namespace),
            has_account=lambda name: (
                self.find(self.rt("serviceaccounts"), namespace, name) is not None
            ),
            quotas=self.list(self.rt("resourcequotas"), namespace),
            pods=lambda: self.list(self.rt("pods"), namespace),
            limit_ranges=self.list(self.rt("limitranges"), namespace),
        )

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        body: Obj,
        *,
        subresource: str | None = None,
        dry_run: bool = False,
        require_rv: bool = False,
    ) -> Obj:
        """Replace an object (PUT, or the result of a PATCH); enforces the write rules."""
        old = self.get(rt, namespace, name)
        meta_in = body.get("metadata") or {}
        if meta_in.get("name") not in (None, name):
            raise errors.bad_request(
                f"the name of the object ({meta_in.get('name')}) does not match the name on"
                f" the URL ({name})"
            )
        sent_rv = meta_in.get("resourceVersion")
        if sent_rv in (None, "") and require_rv:
            raise errors.invalid(
                rt,
                name,
                [
                    (
                        "metadata.resourceVersion",
                        "Invalid value: 0x0: must be specified for an update",
                    )
                ],
            )
        if sent_rv not in (None, "") and str(sent_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(rt, name)
        if subresource == "status":
            # A metadata dict of its own: the new resourceVersion must not leak into `old`,
            # which earlier watch events still hold.
            status = copy.deepcopy(body.get("status") or {})
            serialized = SERIALIZED_STATUS.get(rt.storage)
            new = {
                **old,
                "metadata": dict(old["metadata"]),
                "status": status if serialized is None else serialized(status),
            }
        else:
            new = copy.deepcopy(body)
            meta = new.setdefault("metadata", {})
            for kept in (
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "generation",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ):
                if kept in old["metadata"]:
                    meta[kept] = old["metadata"][kept]
                else:
                    meta.pop(kept, None)
            if rt.has_status:
                if "status" in old:
                    new["status"] = old["status"]
                else:
                    new.pop("status", None)
            if old["metadata"].get("deletionTimestamp"):
                added = set(meta.get("finalizers") or []) - set(
                    old["metadata"].get("finalizers") or []
                )
                if added:
                    raise errors.ApiError(
                        422,
                        "Invalid",
                        f"metadata.finalizers: Forbidden: no new finalizers can be added if the"
                        f" object is being deleted, found new finalizers {sorted(added)}",
                    )
        new["apiVersion"], new["kind"] = old["apiVersion"], old["kind"]
        if subresource != "status":
            causes = validate_meta(rt.kind, new["metadata"], check_name=False)
            if causes:
                raise errors.invalid(rt, name, causes)
            _drop_empty_meta(new["metadata"])
        new["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if new == old:
            return old  # a no-op write: no new resourceVersion, no event
        self._check_rules(rt, name, new, old)
        # A pod's binding (`pods/binding`, `BindingREST.assignPod` in
        # pkg/registry/core/pod/storage/storage.go) sets its node without a new generation.
        bumps = subresource != "binding"
        if bumps and "generation" in old["metadata"] and _spec_part(new) != _spec_part(old):
            new["metadata"]["generation"] = old["metadata"]["generation"] + 1
        if dry_run:
            return new
        deleting = new["metadata"].get("deletionTimestamp")
        # A pod in its grace period stays until its kubelet's final delete, finalizers or not.
        graceful = rt.storage == "pods" and new["metadata"].get("deletionGracePeriodSeconds")
        if deleting and not graceful and not new["metadata"].get("finalizers"):
            return self._remove(rt, new, old)
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._put(rt, (old["metadata"].get("namespace", ""), name), new, old)
        self._emit(rt, "MODIFIED", new, old)
        return new

    def delete(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        *,
        propagation: str | None = None,
        preconditions: dict[str, Any] | None = None,
        dry_run: bool = False,
        grace_period: int | None = None,
    ) -> tuple[Obj, int]:
        """Delete with finalizers and GC; returns (object, HTTP status: 200 gone, 202 pending).

        A pod is deleted gracefully, as `pkg/registry/core/pod/strategy.go`
        (`CheckGracefulDelete`) and `staging/src/k8s.io/apiserver/pkg/registry/rest/delete.go`
        (`BeforeDelete`) do: with a grace period (the request's `gracePeriodSeconds`, else
        `spec.terminationGracePeriodSeconds`) it gets `deletionTimestamp` = now + grace and
        `deletionGracePeriodSeconds`, and stays until its kubelet, once the containers have
        stopped, deletes it again with grace 0. A pod on no node or already terminal goes at
        once; a later delete may only shorten the grace period.
        """
        obj = self.get(rt, namespace, name)
        meta = obj["metadata"]
        for field in ("uid", "resourceVersion"):
            wanted = (preconditions or {}).get(field)
            if wanted and wanted != meta.get(field):
                raise errors.ApiError(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {errors.qualified(rt)} "{name}":'
                    f" Precondition failed: {_PRECONDITION[field]} in precondition: {wanted},"
                    f" {field} in object meta: {meta.get(field)}",
                )
        if propagation not in (None, "Background", "Foreground", "Orphan"):
            raise errors.bad_request(f"unsupported propagationPolicy {propagation!r}")
        # batch/v1 Jobs orphan their pods by default, for backwards compatibility.
        policy = propagation or ("Orphan" if rt.storage == "batch/jobs" else "Background")
        if dry_run:
            return obj, 200
        if policy == "Orphan":
            self._orphan(meta["uid"])
        finalizers = list(meta.get("finalizers") or [])
        if (
            policy == "Foreground"
            and self.dependents(meta["uid"])
            and "foregroundDeletion" not in finalizers
        ):
            finalizers.append("foregroundDeletion")
        if rt.storage == "namespaces":
            self._delete_namespace_contents(name)
        if rt.storage == "pods":
            grace = _pod_grace(obj, grace_period)
            if grace > 0:
                return self._graceful(rt, obj, grace), 200
            if meta.get("deletionGracePeriodSeconds"):
                # The kubelet's final delete: the grace period is over.
                new = copy.deepcopy(obj)
                new["metadata"]["deletionGracePeriodSeconds"] = 0
                if not finalizers:
                    return self._remove(rt, new, obj), 200
                new["metadata"]["resourceVersion"] = self._next_rv()
                self._put(rt, (meta.get("namespace", ""), name), new, obj)
                self._emit(rt, "MODIFIED", new, obj)
                return new, 202
        if not finalizers:
            return self._remove(rt, obj, obj), 200
        if not meta.get("deletionTimestamp") or finalizers != meta.get("finalizers"):
            new = copy.deepcopy(obj)
            new["metadata"]["finalizers"] = finalizers
            new["metadata"].setdefault("deletionTimestamp", timestamp(self.now()))
            new["metadata"].setdefault("deletionGracePeriodSeconds", 0)
            new["metadata"]["resourceVersion"] = self._next_rv()
            self._put(rt, (meta.get("namespace", ""), name), new, obj)
            self._emit(rt, "MODIFIED", new, obj)
            obj = new
        if "foregroundDeletion" in finalizers:
            for dep_rt, dep in self.dependents(meta["uid"]):
                if not dep["metadata"].get("deletionTimestamp"):
                    self.delete(
                        dep_rt,
                        dep["metadata"].get("namespace", ""),
                        dep["metadata"]["name"],
                        propagation="Foreground",
                    )
            self._finish_foreground(meta["uid"])
            current = self.find(rt, namespace, name)
            if current is None:
                return obj, 200
            obj = current
        return obj, 202

    def _graceful(self, rt: ResourceType, obj: Obj, grace: int) -> Obj:
        meta = obj["metadata"]
        deadline = timestamp(self.now() + timedelta(seconds=grace))
        current = meta.get("deletionTimestamp")
        if current and current <= deadline:
            return obj
        new = copy.deepcopy(obj)
        new["metadata"]["deletionTimestamp"] = deadline
        new["metadata"]["deletionGracePeriodSeconds"] = grace
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._put(rt, (meta.get("namespace", ""), meta["name"]), new, obj)
        self._emit(rt, "MODIFIED", new, obj)
        return new

    def _remove(self, rt: ResourceType, obj: Obj, old: Obj) -> Obj:
        meta = obj["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        gone = copy.deepcopy(obj)
        gone["metadata"]["resourceVersion"] = self._next_rv()
        self._put(rt, key, None, old)
        self._emit(rt, "DELETED", gone)
        if rt.kind == "Pod":
            for log_key in [k for k in self.pod_logs if k[:2] == key]:
                del self.pod_logs[log_key]
        if rt.storage == CRD_STORAGE:
            self._retire_crd(gone)
        self._collect(meta["uid"])
        for ref in meta.get("ownerReferences") or []:
            self._finish_foreground(ref.get("uid", ""))
        return gone

    def _collect(self, owner_uid: str) -> None:
        """Background GC: dependents whose every owner is gone are deleted."""
        for dep_rt, dep in self.dependents(owner_uid):
            refs = dep["metadata"].get("ownerReferences") or []
            live = [r for r in refs if r.get("uid") != owner_uid and r.get("uid") in self._by_uid]
            ns, name = dep["metadata"].get("namespace", ""), dep["metadata"]["name"]
            if live:
                self.update(
                    dep_rt,
                    ns,
                    name,
                    {**dep, "metadata": {**dep["metadata"], "ownerReferences": live}},
                )
            elif self.find(dep_rt, ns, name) is not None:
                self.delete(dep_rt, ns, name, propagation="Background")

    def _orphan(self, owner_uid: str) -> None:
        for dep_rt, dep in self.dependents(owner_uid):
            refs = [
                r for r in dep["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid
            ]
            meta = {**dep["metadata"], "ownerReferences": refs}
            if not refs:
                meta.pop("ownerReferences")
            self.update(dep_rt, meta.get("namespace", ""), meta["name"], {**dep, "metadata": meta})

    def _finish_foreground(self, owner_uid: str) -> None:
        found = self.by_uid(owner_uid)
        if found is None:
            return
        rt, owner = found
        finalizers = owner["metadata"].get("finalizers") or []
        if "foregroundDeletion" not in finalizers or not owner["metadata"].get("deletionTimestamp"):
            return
        if self.dependents(owner_uid):
            return
        meta = {
            **owner["metadata"],
            "finalizers": [f for f in finalizers if f != "foregroundDeletion"],
        }
        self.update(rt, meta.get("namespace", ""), meta["name"], {**owner, "metadata": meta})

    def _delete_namespace_contents(self, namespace: str) -> None:
        for rt in self.registry:
            if rt.namespaced and self.registry.by_storage(rt.storage) is rt:
                for obj in self.list(rt, namespace):
                    if self.find(rt, namespace, obj["metadata"]["name"]) is not None:
                        self.delete(
                            rt, namespace, obj["metadata"]["name"], propagation="Background"
                        )

    # --- CRDs ---------------------------------------------------------------------------------

    def _check_crd(self, obj: Obj) -> None:
        try:
            crd_resource_types(obj)
        except CrdError as exc:
            rt = self.rt("customresourcedefinitions")
            raise errors.invalid(
                rt, str(obj["metadata"].get("name")), [(exc.path, exc.reason)]
            ) from None

    def _establish_crd(self, obj: Obj) -> None:
        for rt in crd_resource_types(obj):
            self.registry.add(rt)
        now = timestamp(self.now())
        names = obj["spec"]["names"]
        status = {
            "acceptedNames": {
                k: names[k]
                for k in ("plural", "singular", "kind", "shortNames", "listKind")
                if k in names
            },
            "conditions": [
                {"type": t, "status": "True", "reason": r, "message": m, "lastTransitionTime": now}
                for t, r, m in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ],
            "storedVersions": [v["name"] for v in obj["spec"]["versions"] if v.get("storage")],
        }
        self.update(
            self.rt("customresourcedefinitions"),
            "",
            obj["metadata"]["name"],
            {"status": status},
            subresource="status",
        )

    def _retire_crd(self, obj: Obj) -> None:
        gone = self.registry.remove_crd(obj["metadata"]["name"])
        if gone:
            storage = gone[0].storage
            for key, cr in sorted(self._objects.pop(storage, {}).items()):
                self._index(storage, key, None, cr)
            self._logs.pop(storage, None)
            for watcher in self._watchers.pop(storage, set()):
                watcher.close("the resource's CRD was deleted")

    def register_crd(self, crd: Obj, source: str = "") -> Types:
        """Register (or re-register) a CRD object; raises `CrdError` naming the bad field."""
        types = crd_resource_types(crd, source)
        rt = self.rt("customresourcedefinitions")
        if self.find(rt, "", crd["metadata"]["name"]) is None:
            self.create(rt, "", crd)
        return types
