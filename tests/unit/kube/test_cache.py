"""The informer cache: watch events and relist differences (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.adapters.kube.cache import apply_event, key_of, reconcile_list, tracking_view
from launch_agent.tracking import assess
from tests.unit.tracking.shapes import NOW
from tests.unit.tracking.test_properties import OTHER_WORKLOADS, POD_SHAPES, TERMINAL_WORKLOADS


def obj(name: str, rv: int, ns: str = "ml", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns, "resourceVersion": str(rv)},
        "status": status,
    }


@pytest.mark.parametrize(
    ("cache", "etype", "incoming", "delivered"),
    [
        ({}, "ADDED", obj("a", 1), "ADDED"),
        ({("ml", "a"): obj("a", 1)}, "MODIFIED", obj("a", 2), "MODIFIED"),
        ({("ml", "a"): obj("a", 1)}, "ADDED", obj("a", 2), "MODIFIED"),  # re-added after a gap
        ({("ml", "a"): obj("a", 2)}, "MODIFIED", obj("a", 2), None),  # replayed duplicate
        ({}, "MODIFIED", obj("a", 3), "ADDED"),  # first seen as a modification
        ({("ml", "a"): obj("a", 2)}, "DELETED", obj("a", 3), "DELETED"),
        ({}, "DELETED", obj("a", 3), None),  # never seen: nothing to tell
        ({}, "BOOKMARK", obj("a", 3), None),
    ],
    ids=[
        "add",
        "modify",
        "re-add",
        "duplicate",
        "modify unseen",
        "delete",
        "delete unseen",
        "bookmark",
    ],
)
def test_apply_event(
    cache: dict[Any, Any], etype: str, incoming: dict[str, Any], delivered: str | None
) -> None:
    event = apply_event(cache, etype, incoming)
    assert (event.type if event else None) == delivered
    if etype in ("ADDED", "MODIFIED"):
        assert cache[key_of(incoming)] == incoming
    if etype == "DELETED":
        assert key_of(incoming) not in cache


def test_reconcile_list_reports_changes_and_deletions() -> None:
    cache = {
        ("ml", "same"): obj("same", 1),
        ("ml", "changed"): obj("changed", 1),
        ("ml", "gone"): obj("gone", 1, phase="Running"),
    }
    events = reconcile_list(
        cache, [obj("same", 1), obj("changed", 5, phase="Succeeded"), obj("new", 6)]
    )
    assert [(e.type, e.obj["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "changed"),
        ("ADDED", "new"),
        ("DELETED", "gone"),
    ]
    assert all(e.from_list for e in events)
    # The DELETED event carries the last state known, so its run is judged on it.
    assert events[2].obj["status"] == {"phase": "Running"}
    assert sorted(cache) == [("ml", "changed"), ("ml", "new"), ("ml", "same")]


names = st.sampled_from(["a", "b", "c", "d", "e"])
snapshots = st.dictionaries(names, st.integers(1, 5))


@given(before=snapshots, after=snapshots)
def test_relist_events_replayed_on_the_old_cache_give_the_new_cache(
    before: dict[str, int], after: dict[str, int]
) -> None:
    cache = {("ml", n): obj(n, rv) for n, rv in before.items()}
    old = dict(cache)
    items = [obj(n, rv) for n, rv in sorted(after.items())]
    events = reconcile_list(cache, items)
    assert {k: v["metadata"]["resourceVersion"] for k, v in cache.items()} == {
        ("ml", n): str(rv) for n, rv in after.items()
    }
    # The events alone turn the old cache into the new one: nothing is missed, nothing extra.
    replay = dict(old)
    for event in events:
        apply_event(replay, event.type, event.obj)
    assert replay == cache
    assert len(events) == len({key_of(e.obj) for e in events})
    unchanged = {n for n in before if n in after and before[n] == after[n]}
    assert not any(e.obj["metadata"]["name"] in unchanged for e in events)


def test_informer_default_transform_drops_managed_fields() -> None:
    from launch_agent.adapters.kube.informer import InformerSettings

    pod = {"metadata": {"name": "p", "managedFields": [{"manager": "kubelet"}]}, "status": {}}
    assert InformerSettings().transform(pod) == {"metadata": {"name": "p"}, "status": {}}


@pytest.mark.parametrize(
    ("full", "slim"),
    [
        (
            {
                "kind": "Pod",
                "metadata": {"name": "p", "managedFields": []},
                "spec": {
                    "nodeName": "n1",
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "initContainers": [
                        {"name": "proxy", "image": "envoy", "restartPolicy": "Always", "env": []}
                    ],
                    "containers": [{"name": "main", "image": "img", "command": ["python"]}],
                },
                "status": {"phase": "Running"},
            },
            # The judgement reads which container is the run's and which are native sidecars.
            {
                "kind": "Pod",
                "metadata": {"name": "p"},
                "spec": {
                    "containers": [{"name": "main", "image": "img"}],
                    "initContainers": [
                        {"name": "proxy", "image": "envoy", "restartPolicy": "Always"}
                    ],
                    "nodeName": "n1",
                },
                "status": {"phase": "Running"},
            },
        ),
        (
            {
                "kind": "Job",
                "metadata": {"name": "j"},
                "spec": {"suspend": True, "template": {"spec": {}}},
                "status": {},
            },
            {"kind": "Job", "metadata": {"name": "j"}, "spec": {"suspend": True}, "status": {}},
        ),
        (
            {
                "kind": "PyTorchJob",
                "metadata": {},
                "spec": {"runPolicy": {"suspend": False, "ttl": 1}, "pytorchReplicaSpecs": {}},
            },
            {"kind": "PyTorchJob", "metadata": {}, "spec": {"runPolicy": {"suspend": False}}},
        ),
        ({"kind": "Thing", "metadata": {}, "spec": "odd"}, {"kind": "Thing", "metadata": {}}),
    ],
    ids=["pod", "job", "pytorchjob", "malformed spec"],
)
def test_tracking_view_keeps_what_tracking_reads(
    full: dict[str, Any], slim: dict[str, Any]
) -> None:
    assert tracking_view(full) == slim


@given(
    workload=st.sampled_from(TERMINAL_WORKLOADS + OTHER_WORKLOADS),
    pods=st.lists(st.sampled_from(POD_SHAPES), max_size=4),
)
def test_tracking_view_does_not_change_any_assessment(
    workload: dict[str, Any], pods: list[dict[str, Any]]
) -> None:
    slim_pods = [tracking_view(copy.deepcopy(p)) for p in pods]
    slim = tracking_view(copy.deepcopy(workload))
    assert assess(slim, slim_pods, NOW) == assess(workload, pods, NOW)


def test_tracking_view_keeps_a_custom_kinds_suspend_path_and_nothing_else_of_its_spec() -> None:
    widget = {
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"control": {"hold": True, "image": "x" * 1000}, "replicaSpecs": {"a": {}}},
    }
    paths = [("spec", "control", "hold"), ("spec", "absent", "flag"), ("metadata", "name")]
    assert tracking_view(copy.deepcopy(widget), paths)["spec"] == {"control": {"hold": True}}
    # Without the path (the old view), the held flag is gone: the run reads as resumed.
    assert tracking_view(copy.deepcopy(widget))["spec"] == {}
