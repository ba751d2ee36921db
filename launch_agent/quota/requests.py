"""From a rendered workload and its queue spec to what the admission engine needs. Pure.

The agent (`quota.mode: agent`) hands the engine one `RunSpec` per run. This module computes
it and the few facts the cluster keeps for a restart:

- **Requests.** A pod's request per resource follows the Kubernetes rule for the effective
  request: the sum over its containers and sidecars (init containers with `restartPolicy:
  Always`), or the largest single init container if that is larger, plus `overhead`. A
  container's `limits` stand in for a missing `requests` entry, as the API server defaults
  them. A run's pod sets are the kind's `(replicas, pod template)` pairs
  (`render.pipeline.pod_sets`); the engine sums `count · perPod` (GPUs included) and adds 1 of
  the count resource `runs`.
- **Leaves.** A W&B queue is tied to a leaf by its queue spec's `spec.quota.leaf`, or by the
  tree's own `queues` lists (the `quota simulate` format). The engine's queue for a leaf is
  `@<leaf>` (`engine_queue`), added to each leaf by `agent_tree`, so the same tree serves every
  queue the specs tie to it.
- **The stamp.** A pending run lives in the cluster as a suspended workload; its annotation
  `launch-agent.io/quota` (`QuotaStamp`) records the leaf, priority, enqueue time and pod sets,
  and `launch-agent.io/quota-admitted` the admission time, so a restarted agent rebuilds the
  same order and usage without re-rendering anything.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from launch_agent.model.labels import PREFIX
from launch_agent.model.quantity import QuantityError, parse_quantity, to_nanos
from launch_agent.model.safe_load import load_json
from launch_agent.quota.runs import PodSet, RunSpec

STAMP = PREFIX + "quota"
ADMITTED = PREFIX + "quota-admitted"
LEAF_QUEUE_PREFIX = "@"


class RequestError(ValueError):
    """A workload whose requests cannot be read; `path` says where in the manifest."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def _add(total: dict[str, int], more: Mapping[str, int]) -> None:
    for resource, amount in more.items():
        total[resource] = total.get(resource, 0) + amount


def container_requests(container: Mapping[str, Any], path: str) -> dict[str, int]:
    """One container's requests in nanounits; `limits` fill in what `requests` leaves out."""
    resources = container.get("resources")
    resources = {} if resources is None else resources
    if not isinstance(resources, Mapping):
        raise RequestError(f"{path}.resources", "must be a mapping")
    out: dict[str, int] = {}
    for key in ("limits", "requests"):  # requests last: they win over limits
        values = resources.get(key)
        values = {} if values is None else values
        if not isinstance(values, Mapping):
            raise RequestError(f"{path}.resources.{key}", "must be a mapping")
        for resource, value in values.items():
            try:
                amount = to_nanos(parse_quantity(value))
            except QuantityError as exc:
                raise RequestError(f"{path}.resources.{key}.{resource}", str(exc)) from None
            if amount < 0:
                raise RequestError(f"{path}.resources.{key}.{resource}", "must not be negative")
            out[str(resource)] = amount
    return out


def pod_requests(template: Mapping[str, Any], path: str = "template") -> dict[str, int]:
    """The effective request of one pod of a PodTemplateSpec (see the module docstring)."""
    spec = template.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise RequestError(f"{path}.spec", "must be a mapping")
    running: dict[str, int] = {}
    for i, container in enumerate(spec.get("containers") or []):
        if isinstance(container, Mapping):
            _add(running, container_requests(container, f"{path}.spec.containers[{i}]"))
    peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        if not isinstance(container, Mapping):
            continue
        own = container_requests(container, f"{path}.spec.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            _add(sidecars, own)  # a sidecar runs beside everything started after it
            continue
        # A plain init container runs alone, next to the sidecars started before it.
        for resource, amount in own.items():
            alone = amount + sidecars.get(resource, 0)
            peak[resource] = max(peak.get(resource, 0), alone)
    _add(running, sidecars)
    for resource, amount in peak.items():
        running[resource] = max(running.get(resource, 0), amount)
    overhead = spec.get("overhead") or {}
    if isinstance(overhead, Mapping) and overhead:
        _add(running, container_requests({"resources": {"requests": overhead}}, f"{path}.spec"))
    return {r: n for r, n in running.items() if n}


def run_pod_sets(pod_sets: Iterable[tuple[int, Mapping[str, Any]]]) -> tuple[PodSet, ...]:
    """`render.pipeline.pod_sets(manifest)` → the engine's pod sets (pods with no request
    and empty sets are dropped: they cannot change any sum)."""
    out = []
    for i, (count, template) in enumerate(pod_sets):
        if count < 0:
            raise RequestError(f"podSets[{i}]", f"replica count {count} is negative")
        requests = pod_requests(template, f"podSets[{i}].template")
        if count and requests:
            out.append(PodSet(count, requests))
    return tuple(out)


def total_request(pod_sets: Sequence[PodSet]) -> dict[str, int]:
    """Σ count · perPod, the quantity a gang is admitted for (before the tree's filter)."""
    total: dict[str, int] = {}
    for pod_set in pod_sets:
        _add(total, {r: pod_set.count * n for r, n in pod_set.requests.items()})
    return total


def priority_of(run_spec: Mapping[str, Any]) -> int:
    """The engine priority (higher first) of a run.

    W&B's pop answer carries no priority (`popFromRunQueue` returns the item id and run spec);
    a run spec may name W&B's `priority` (0 critical … 4 lowest), which maps to `4 − p`.
    Anything else is priority 0, so the leaf's order is plain FIFO.
    """
    value = run_spec.get("priority")
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 4:
        return 4 - value
    return 0


def engine_queue(leaf: str) -> str:
    return LEAF_QUEUE_PREFIX + leaf


def leaf_names(tree: Mapping[str, Any]) -> dict[str, list[str]]:
    """Every leaf of a tree mapping with the W&B queues the tree itself lists under it."""
    out: dict[str, list[str]] = {}

    def walk(node: object) -> None:
        if not isinstance(node, Mapping):
            return
        children = node.get("children") or []
        if children and isinstance(children, list):
            for child in children:
                walk(child)
        elif isinstance(node.get("name"), str):
            queues = node.get("queues") or []
            out[node["name"]] = [q for q in queues if isinstance(q, str)]

    walk(tree.get("root"))
    return out


def agent_tree(tree: Mapping[str, Any], max_jobs: int) -> dict[str, Any]:
    """The tree the agent's engine runs: each leaf also serves `@<leaf>`, and W&B's
    `max_jobs` (unless -1) becomes the root's `runs` when the tree does not name `runs`.

    The additions go at the end of lists, so problem paths still point into the admin's file.
    """
    out = copy.deepcopy(dict(tree))
    root = out.get("root")
    if not isinstance(root, dict):
        return out

    def walk(node: dict[str, Any]) -> None:
        children = node.get("children")
        if isinstance(children, list) and children:
            for child in children:
                if isinstance(child, dict):
                    walk(child)
        elif isinstance(node.get("name"), str):
            queues = node.get("queues")
            node["queues"] = [*(queues if isinstance(queues, list) else [])]
            node["queues"].append(engine_queue(node["name"]))

    walk(root)
    maxes = root.get("max")
    if max_jobs != -1 and (not isinstance(maxes, dict) or "runs" not in maxes):
        root["max"] = {**(maxes if isinstance(maxes, dict) else {}), "runs": max_jobs}
    return out


def resolve_leaf(
    queue: str, spec_leaf: str | None, leaves: Mapping[str, Sequence[str]]
) -> tuple[str | None, str]:
    """The leaf serving a W&B queue, or None and the reason (for the item's failure)."""
    listed = [leaf for leaf, queues in leaves.items() if queue in queues]
    if spec_leaf is not None:
        if spec_leaf not in leaves:
            known = ", ".join(sorted(leaves)) or "none"
            return None, (
                f"spec.quota.leaf: {spec_leaf!r} is not a leaf of quota.tree (leaves: {known})"
            )
        if listed and listed[0] != spec_leaf:
            return None, (
                f"spec.quota.leaf: {spec_leaf!r}, but quota.tree lists queue {queue!r}"
                f" under leaf {listed[0]!r}"
            )
        return spec_leaf, ""
    if listed:
        return listed[0], ""
    return None, (
        f"queue {queue!r} is tied to no quota leaf: set spec.quota.leaf in its queue spec"
        " (quota.mode is agent)"
    )


@dataclass(frozen=True)
class QuotaStamp:
    """What the workload records for the engine (annotation `launch-agent.io/quota`)."""

    leaf: str
    priority: int
    enqueued: Fraction  # engine clock, seconds
    pod_sets: tuple[PodSet, ...]
    scheduler: bool = False

    def spec(self, run_id: str) -> RunSpec:
        return RunSpec(
            run_id,
            engine_queue(self.leaf),
            self.pod_sets,
            priority=self.priority,
            scheduler=self.scheduler,
            ready_on_admission=False,
        )

    def dump(self) -> str:
        return json.dumps(
            {
                "leaf": self.leaf,
                "priority": self.priority,
                "enqueued": str(self.enqueued),
                "scheduler": self.scheduler,
                "podSets": [
                    {"count": p.count, "requests": dict(sorted(p.requests.items()))}
                    for p in self.pod_sets
                ],
            },
            separators=(",", ":"),
        )

    @classmethod
    def load(cls, text: object) -> QuotaStamp:
        """Parse the annotation; `ValueError` says which field is wrong."""
        if not isinstance(text, str):
            raise ValueError(f"annotation {STAMP} is missing")
        try:
            data = load_json(text)
        except ValueError as exc:
            raise ValueError(f"annotation {STAMP} is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError(f"annotation {STAMP} is not an object")
        leaf, priority, scheduler = data.get("leaf"), data.get("priority"), data.get("scheduler")
        if not isinstance(leaf, str) or not leaf:
            raise ValueError(f"annotation {STAMP}: leaf must be a non-empty string")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError(f"annotation {STAMP}: priority must be an integer")
        return cls(
            leaf,
            priority,
            load_time(data.get("enqueued"), f"annotation {STAMP}: enqueued"),
            _load_pod_sets(data.get("podSets")),
            scheduler is True,
        )


def load_time(value: object, what: str) -> Fraction:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string of seconds")
    try:
        return Fraction(value)
    except (ValueError, ZeroDivisionError):
        raise ValueError(f"{what}: {value!r} is not a number of seconds") from None


def _load_pod_sets(value: object) -> tuple[PodSet, ...]:
    where = f"annotation {STAMP}: podSets"
    if not isinstance(value, list):
        raise ValueError(f"{where} must be a list")
    out = []
    for i, item in enumerate(value):
        count = item.get("count") if isinstance(item, dict) else None
        requests = item.get("requests") if isinstance(item, dict) else None
        if not isinstance(count, int) or count < 0 or not isinstance(requests, dict):
            raise ValueError(f"{where}[{i}] needs a count >= 0 and a requests mapping")
        if not all(isinstance(n, int) and n >= 0 for n in requests.values()):
            raise ValueError(f"{where}[{i}].requests: nanounits must be integers >= 0")
        out.append(PodSet(count, {str(k): int(n) for k, n in requests.items()}))
    return tuple(out)
