"""Builders shared by the quota tests: trees, runs and events as the YAML files spell them."""

from __future__ import annotations

from typing import Any

from launch_agent.quota.simulate import simulate


def leaf(name: str, queues: list[str], min_cpu: int, max_cpu: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "min": {"cpu": min_cpu},
        "max": {"cpu": max_cpu},
        "queues": queues,
        **extra,
    }


def ack_tree(**top: Any) -> dict[str, Any]:
    """The ACK worked example (S1/S2): root 40, a and b 20/40, four leaves 10/20."""
    return {
        **top,
        "root": {
            "name": "root",
            "min": {"cpu": 40},
            "max": {"cpu": 40},
            "children": [
                {
                    "name": "root.a",
                    "min": {"cpu": 20},
                    "max": {"cpu": 40},
                    "children": [leaf("a.1", ["q1"], 10, 20), leaf("a.2", ["q2"], 10, 20)],
                },
                {
                    "name": "root.b",
                    "min": {"cpu": 20},
                    "max": {"cpu": 40},
                    "children": [leaf("b.1", ["q3"], 10, 20), leaf("b.2", ["q4"], 10, 20)],
                },
            ],
        },
    }


def ack_tree_within(within: str, **top: Any) -> dict[str, Any]:
    """The ACK tree with every leaf's within-queue preemption policy set to `within` (R8)."""
    tree = ack_tree(**top)
    for group in tree["root"]["children"]:
        for node in group["children"]:
            node["withinQueue"] = within
    return tree


def run(name: str, queue: str, cpu: float = 5, count: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "run": name,
        "queue": queue,
        "pods": [{"count": count, "requests": {"cpu": cpu}}],
        **extra,
    }


def gang(name: str, queue: str, workers: int, cpu: int = 5) -> dict[str, Any]:
    """A PyTorchJob: 1 master + `workers` workers, `cpu` per pod."""
    return {
        "run": name,
        "queue": queue,
        "pods": [
            {"count": 1, "requests": {"cpu": cpu}},
            {"count": workers, "requests": {"cpu": cpu}},
        ],
    }


def submit(*runs: dict[str, Any]) -> dict[str, Any]:
    return {"submit": runs[0]} if len(runs) == 1 else {"submit": {"runs": list(runs)}}


def last(tree: dict[str, Any], events: list[dict[str, Any]]) -> dict[str, Any]:
    return simulate(tree, events)[-1]


def counts(report: dict[str, Any], queues: list[str]) -> dict[str, int]:
    return {q: sum(1 for r in report["running"] if r.startswith(q + "-")) for q in queues}
