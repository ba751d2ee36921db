"""The dispatch benchmark's arithmetic: percentiles, request counts, the pop → create join."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.demo.bench_runs import running_pod
from launch_agent.demo.dispatch import Creates, delta, latencies, percentile, requests
from launch_agent.sandbox.wandb import LaunchState


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([], 50, 0.0),
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.0),
        ([float(i) for i in range(1, 101)], 99, 99.0),
        ([float(i) for i in range(1, 101)], 100, 100.0),
        ([3.0, 1.0, 2.0], 0, 1.0),
    ],
)
def test_percentile(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == expected


@given(st.lists(st.floats(0, 1e6), min_size=1), st.floats(0, 100), st.floats(0, 100))
def test_percentile_is_a_value_and_monotone(values: list[float], a: float, b: float) -> None:
    low, high = sorted((a, b))
    assert percentile(values, low) in values
    assert percentile(values, low) <= percentile(values, high)


def test_requests_ignore_graphql_field_counters() -> None:
    counts = {"popFromRunQueue": 3, "ackRunQueueItem": 2, "field:popFromRunQueue": 3}
    assert requests(counts) == 5
    assert delta({"a": 5, "b": 1, "field:a": 9}, {"a": 2, "b": 1}) == {"a": 3}


def test_latency_joins_a_job_to_the_last_pop_of_its_item() -> None:
    ticks = itertools.count(100)
    state = LaunchState(clock=lambda: float(next(ticks)), lease_seconds=1000)
    queue = state.add_queue("q1")
    ours, theirs, never = (state.push(queue, {"n": n}) for n in range(3))
    # ours: created half a second after its pop
    state.pop(queue, None)
    creates = Creates()
    created_at = ours.history[-1][0] + 0.5
    creates.times["job-ours"] = created_at
    creates.items["job-ours"] = ours.id
    # theirs: joined by the run id it was acked with (the reference's wandb.ai/run-id label)
    state.pop(queue, None)
    state.ack(theirs.id, "run-abc")
    creates.times["job-theirs"] = theirs.history[1][0] + 2.0  # [1] is its LEASED entry
    creates.run_ids["job-theirs"] = "run-abc"
    creates.times["job-stray"] = 999.0  # no item: not counted
    assert never.pops == 0
    assert sorted(latencies([ours, theirs, never], creates)) == [0.5, 2.0]


def test_creates_listener_records_only_new_jobs() -> None:
    creates = Creates()
    job = {"metadata": {"name": "j", "labels": {"wandb.ai/run-id": "r"}, "annotations": {}}}
    creates.listener("batch/jobs", "ADDED", job)
    first = creates.times["j"]
    creates.listener("batch/jobs", "ADDED", job)  # a replayed event keeps the first time
    creates.listener("pods", "ADDED", {"metadata": {"name": "p"}})
    creates.listener("batch/jobs", "MODIFIED", {"metadata": {"name": "k"}})
    assert creates.times == {"j": first}
    assert creates.run_ids == {"j": "r"}


def test_running_pod_belongs_to_its_job() -> None:
    job = {
        "metadata": {"name": "bench-1", "namespace": "default", "uid": "u-1"},
        "spec": {
            "template": {
                "metadata": {"labels": {"launch-agent.io/run-queue-item": "x"}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
            }
        },
    }
    pod = running_pod(job)
    assert pod["metadata"]["labels"]["launch-agent.io/run-queue-item"] == "x"
    assert pod["metadata"]["labels"]["batch.kubernetes.io/job-name"] == "bench-1"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["state"]["running"]
