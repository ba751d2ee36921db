"""`kube.objects`: seed and inspect the API server's objects from Python.

Tests and the simulated cluster use this instead of HTTP when they play the part of something
*inside* the cluster (a controller, an admin with kubectl). Every call goes through the same
store methods as the HTTP handlers, so resourceVersions, events, watches, `/status` rules and
garbage collection behave exactly as if the write had come over the wire. Resources are named
the way kubectl accepts them: plural (`jobs`), `plural.group` (`pytorchjobs.kubeflow.org`),
kind (`PyTorchJob`) or short name. Returned objects are copies; change them freely.
"""

from __future__ import annotations

import copy
from typing import Any, Literal

from launch_agent.sandbox.kube.patch import json_patch, merge_patch, strategic_merge_patch
from launch_agent.sandbox.kube.selectors import parse_field_selector, parse_label_selector
from launch_agent.sandbox.kube.store import Obj, Store

Objs = list[Obj]
Lines = list[str]
PatchType = Literal["merge", "strategic", "json"]


class Objects:
    def __init__(self, store: Store) -> None:
        self._store = store

    def create(self, resource: str, body: Obj, namespace: str = "default") -> Obj:
        rt = self._store.rt(resource)
        ns = (body.get("metadata") or {}).get("namespace") or namespace
        return copy.deepcopy(self._store.create(rt, ns if rt.namespaced else "", body))

    def backdate(self, resource: str, seconds: float) -> int:
        """Move every object's `creationTimestamp` `seconds` into the past, with no event and no
        new resourceVersion (a harness's shortcut: the API server never changes it; benchmarks
        use it to have an agent adopt runs that started long ago). Returns how many."""
        return self._store.backdate(self._store.rt(resource), seconds)

    def get(self, resource: str, name: str, namespace: str = "default") -> Obj:
        return copy.deepcopy(self._store.get(self._store.rt(resource), namespace, name))

    def find(self, resource: str, name: str, namespace: str = "default") -> Obj | None:
        found = self._store.find(self._store.rt(resource), namespace, name)
        return copy.deepcopy(found) if found is not None else None

    def list(
        self,
        resource: str,
        namespace: str | None = None,
        label_selector: str = "",
        field_selector: str = "",
    ) -> Objs:
        rt = self._store.rt(resource)
        labels = parse_label_selector(label_selector)
        fields = parse_field_selector(field_selector, rt.plural)
        return copy.deepcopy(self._store.list(rt, namespace, labels, fields))

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str = "default",
        *,
        patch_type: PatchType = "merge",
        subresource: str | None = None,
    ) -> Obj:
        rt = self._store.rt(resource)
        current = self._store.get(rt, namespace, name)
        apply = {"merge": merge_patch, "strategic": strategic_merge_patch, "json": json_patch}
        new = apply[patch_type](current, patch)
        return copy.deepcopy(self._store.update(rt, namespace, name, new, subresource=subresource))

    def patch_status(
        self, resource: str, name: str, status: Obj, namespace: str = "default"
    ) -> Obj:
        """Merge-patch `.status` through the status subresource (what a controller does)."""
        return self.patch(resource, name, {"status": status}, namespace, subresource="status")

    def replace(
        self,
        resource: str,
        name: str,
        body: Obj,
        namespace: str = "default",
        subresource: str | None = None,
    ) -> Obj:
        rt = self._store.rt(resource)
        return copy.deepcopy(self._store.update(rt, namespace, name, body, subresource=subresource))

    def delete(
        self, resource: str, name: str, namespace: str = "default", propagation: str | None = None
    ) -> Obj:
        rt = self._store.rt(resource)
        obj, _ = self._store.delete(rt, namespace, name, propagation=propagation)
        return copy.deepcopy(obj)

    def logs(self, pod: str, container: str, namespace: str = "default") -> Lines:
        """What a pod's container has printed so far (written by the simulated kubelet)."""
        return [line for _, line in self._store.pod_logs.get((namespace, pod, container), [])]
