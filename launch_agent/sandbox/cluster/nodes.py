"""Nodes, resource quantities and the scheduler's fit check.

With no nodes configured the cluster has unlimited capacity and every pod is scheduled at
once (on a node called `sandbox-node`). With nodes, a pod is bound to the first node whose free
allocatable covers its requests and whose labels satisfy its `nodeSelector`; otherwise it stays
Pending with the scheduler's own message, e.g.
`0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available:
3 Preemption is not helpful for scheduling.`
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

_QUANTITY = re.compile(r"^([+-]?\d+(?:\.\d+)?)([a-zA-Z]*)$")
_SUFFIX = {
    "": Decimal(1),
    "m": Decimal("0.001"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def quantity(value: Any) -> Decimal:
    """A Kubernetes quantity ("500m", "16Gi", 2) as a number; ValueError if malformed."""
    m = _QUANTITY.match(str(value).strip())
    if m is None or m.group(2) not in _SUFFIX:
        raise ValueError(f"invalid quantity {value!r}")
    return Decimal(m.group(1)) * _SUFFIX[m.group(2)]


def pod_requests(spec: Mapping[str, Any]) -> dict[str, Decimal]:
    """Sum of container requests (limits stand in for missing requests, as in Kubernetes)."""
    total: dict[str, Decimal] = {}
    for container in spec.get("containers") or []:
        resources = container.get("resources") or {}
        merged = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for name, value in merged.items():
            total[name] = total.get(name, Decimal(0)) + quantity(value)
    return total


@dataclass
class Node:
    name: str
    allocatable: dict[str, str] = field(
        default_factory=lambda: {"cpu": "8", "memory": "32Gi", "pods": "110"}
    )
    labels: dict[str, str] = field(default_factory=dict)

    def manifest(self, now: str) -> dict[str, Any]:
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", **self.labels}
        return {
            "metadata": {"name": self.name, "labels": labels},
            "spec": {},
            "status": {
                "capacity": dict(self.allocatable),
                "allocatable": dict(self.allocatable),
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "kubelet is posting ready status",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "nodeInfo": {
                    "kubeletVersion": "v1.33.0-sandbox",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
            },
        }


NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


def fit(
    nodes: Iterable[Node],
    used: Mapping[str, Mapping[str, Decimal]],
    spec: Mapping[str, Any],
) -> tuple[str | None, str]:
    """The node to bind to, or None and the scheduler's FailedScheduling message.

    kube-scheduler's words (`pkg/scheduler/framework/types.go`, FitError.Error): the filter
    reasons counted over the nodes, then DefaultPreemption's PostFilter message
    (`framework/preemption/preemption.go`, `plugins/defaultpreemption/default_preemption.go`).
    A node where the pod can never fit (its selector does not match, or it asks for more than
    the node's allocatable: NodeResourcesFit's `Unresolvable`, `noderesources/fit.go`) is one
    where preemption is not helpful; on any other no lower-priority pod can be preempted,
    since the sandbox has no priority classes (every pod's priority is 0).
    """
    nodes = list(nodes)
    wants = pod_requests(spec)
    selector = spec.get("nodeSelector") or {}
    reasons: Counter[str] = Counter()
    preemption: Counter[str] = Counter()
    for node in nodes:
        labels = {"kubernetes.io/hostname": node.name, **node.labels}
        if any(labels.get(k) != v for k, v in selector.items()):
            reasons["node(s) didn't match Pod's node affinity/selector"] += 1
            preemption[NOT_HELPFUL] += 1
            continue
        short = unresolvable = False
        for resource, amount in wants.items():
            if amount <= 0:
                continue
            allocatable = quantity(node.allocatable.get(resource, 0))
            free = allocatable - used.get(node.name, {}).get(resource, Decimal(0))
            if amount > free:
                reasons[f"Insufficient {resource}"] += 1
                short = True
                unresolvable = unresolvable or amount > allocatable
        if not short:
            return node.name, ""
        preemption[NOT_HELPFUL if unresolvable else NO_VICTIMS] += 1
    n = len(nodes)
    return None, f"{_histogram(n, reasons)} preemption: {_histogram(n, preemption)}"


def _histogram(n: int, reasons: Counter[str]) -> str:
    detail = ", ".join(sorted(f"{count} {reason}" for reason, count in reasons.items()))
    return f"0/{n} nodes are available: {detail}."
