"""Events recorded through events.k8s.io/v1 (kube-scheduler, KubeRay), and what the agent
makes of their core/v1 view.

client-go `tools/events` (`recordToSink`, `getKey`) folds repeats by type, action, reason,
reporting controller and regarding object, not by note: a series whose note stays the first
occurrence's. kube-apiserver serves the same Event in core/v1 as
`pkg/apis/events/v1/conversion.go` converts it: no `count`, no `firstTimestamp` /
`lastTimestamp`, `eventTime` and `series` instead. An agent that read `lastTimestamp` and
`count` only would order such an Event before older ones and count it once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest

from launch_agent.runtime.events import EventBook, event_view, file_event
from launch_agent.sandbox.cluster import ANNOTATION, SimulatedCluster
from launch_agent.sandbox.cluster.clock import ManualClock
from launch_agent.sandbox.cluster.common import Ctx
from launch_agent.sandbox.kube import KubeApiServer
from launch_agent.tracking import assess
from launch_agent.tracking.events import explain, warnings

from .conftest import job_body

START = datetime(2026, 11, 30, 11, 50, tzinfo=UTC)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=START)


@pytest.fixture
async def cluster(kube: KubeApiServer, clock: ManualClock) -> AsyncIterator[SimulatedCluster]:
    async with SimulatedCluster(kube, clock=clock) as sim:
        yield sim


def _core(kube: KubeApiServer, reason: str) -> list[dict[str, Any]]:
    return [e for e in kube.objects.list("events") if e["reason"] == reason]


async def test_the_schedulers_events_are_events_k8s_io_with_a_core_view(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    cluster.script("run=u", f'unschedulable message="{message}"')
    kube.objects.create("jobs", job_body(labels={"run": "u"}))
    cluster.advance(10)
    [v1] = [
        e for e in kube.objects.list("events.events.k8s.io") if e["reason"] == "FailedScheduling"
    ]
    assert (v1["reportingController"], v1["action"], v1["note"]) == (
        "default-scheduler",
        "Scheduling",
        message,
    )
    assert v1["eventTime"].endswith("Z") and "." in v1["eventTime"]  # MicroTime
    assert not v1.get("deprecatedCount") and not v1.get("deprecatedLastTimestamp")
    [core] = _core(kube, "FailedScheduling")
    assert core["message"] == message and core["eventTime"] == v1["eventTime"]
    assert core["involvedObject"]["kind"] == "Pod"
    assert core.get("lastTimestamp") is None and core.get("firstTimestamp") is None
    assert not core.get("count")
    assert core["reportingComponent"] == "default-scheduler"


def _pod(kube: KubeApiServer, name: str) -> dict[str, Any]:
    # Runs (its own Events are Normal): the Warning Events under test are the only ones.
    container = {"name": "main", "image": "busybox:1.36"}
    return kube.objects.create(
        "pods",
        {
            "metadata": {"name": name, "annotations": {ANNOTATION: "run"}},
            "spec": {"containers": [container]},
        },
    )


async def test_repeats_are_a_series_that_keeps_the_first_note(
    kube: KubeApiServer, cluster: SimulatedCluster, clock: ManualClock
) -> None:
    pod = _pod(kube, "p")
    ctx = Ctx(cluster.store, clock)
    ctx.event(pod, "Warning", "FailedScheduling", "0/3 nodes: first", "default-scheduler")
    clock.set(60)
    ctx.event(pod, "Warning", "FailedScheduling", "0/4 nodes: second", "default-scheduler")
    clock.set(120)
    ctx.event(pod, "Warning", "FailedScheduling", "0/5 nodes: third", "default-scheduler")
    [core] = _core(kube, "FailedScheduling")
    assert core["message"] == "0/3 nodes: first"
    assert core["series"]["count"] == 3
    assert core["series"]["lastObservedTime"] > core["eventTime"]


async def test_the_agent_orders_and_counts_a_series_by_its_last_observation(
    kube: KubeApiServer, cluster: SimulatedCluster, clock: ManualClock
) -> None:
    """Two pods of one run cannot be scheduled: one Event through core/v1 (a kubelet-era
    scheduler, `lastTimestamp` 11:55, count 3), one series through events.k8s.io (first
    seen 11:50, last 11:58, 12 times). The latest is the series; they add up to 15."""
    ctx = Ctx(cluster.store, clock)
    old, new = _pod(kube, "run-abc-0"), _pod(kube, "run-abc-1")
    ctx.event(
        new, "Warning", "FailedScheduling", "0/3 nodes are available: new", "default-scheduler"
    )
    for i in range(1, 12):
        clock.set(i * 43.6)  # the last at 11:57:59.6
        ctx.event(new, "Warning", "FailedScheduling", "0/3 nodes: later", "default-scheduler")
    kube.objects.create(
        "events",
        {
            "metadata": {"name": "run-abc-0.legacy"},
            "involvedObject": {
                "kind": "Pod",
                "name": "run-abc-0",
                "namespace": "default",
                "uid": old["metadata"]["uid"],
            },
            "reason": "FailedScheduling",
            "message": "0/3 nodes are available: old",
            "type": "Warning",
            "count": 3,
            "firstTimestamp": "2026-11-30T11:45:00Z",
            "lastTimestamp": "2026-11-30T11:55:00Z",
            "source": {"component": "default-scheduler"},
        },
    )
    # What the agent's Events informer caches (event_view) and files under the run.
    book = EventBook()
    for event in kube.objects.list("events", field_selector="type=Warning"):
        file_event(book, event_view(event), lambda ns, name: "rqi" if name == "run-abc" else None)
    found = explain(warnings(book.of("rqi")))
    assert found is not None
    assert (found.count, found.message) == (15, "0/3 nodes are available: new")
    # And the run's judgement says so.
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "run-abc",
            "namespace": "default",
            "creationTimestamp": "2026-11-30T11:49:00Z",
        },
        "spec": {},
        "status": {},
    }
    pods = [old, new]  # as created: not scheduled by any scheduler of this test
    state, diagnosis = assess(
        job, pods, datetime(2026, 11, 30, 12, 0, tzinfo=UTC), events=book.of("rqi")
    )
    assert state.value == "starting" and diagnosis is not None
    assert diagnosis.message.startswith("15 FailedScheduling events: 0/3 nodes are available: new")
