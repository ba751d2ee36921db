"""Invariants of `assess`, checked with hypothesis over real-shaped and arbitrary objects."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.model.run_state import RunState
from launch_agent.tracking import (
    TrackingPolicy,
    assess,
    assess_deleted,
    pod_warnings,
    steady_until,
)
from launch_agent.tracking.assess import NEVER
from tests.unit.tracking.shapes import (
    NOW,
    cond,
    container_status,
    custom,
    job,
    pod,
    unschedulable_pod,
)

# Pods in every shape the tables use, plus a few more.
POD_SHAPES = [
    pod("p-run", "Running", container_status(running=True)),
    pod("p-pend", "Pending"),
    pod("p-ok", "Succeeded", container_status(terminated=("Completed", 0))),
    pod("p-oom", "Failed", container_status(terminated=("OOMKilled", 137))),
    pod("p-exit", "Failed", container_status(terminated=("Error", 2))),
    pod("p-pull", "Pending", container_status(waiting=("ImagePullBackOff", "Back-off"))),
    pod("p-err", "Pending", container_status(waiting=("ErrImagePull", "not found"))),
    pod("p-cfg", "Pending", container_status(waiting=("CreateContainerConfigError", "no secret"))),
    pod(
        "p-crash",
        "Running",
        container_status(waiting=("CrashLoopBackOff", "x"), last_terminated=("Error", 1)),
    ),
    pod("p-evict", "Failed", reason="Evicted", message="low on memory"),
    pod("p-pre", "Failed", conditions=[cond("DisruptionTarget", reason="PreemptionByScheduler")]),
    pod("p-drain", "Failed", conditions=[cond("DisruptionTarget", reason="EvictionByEvictionAPI")]),
    unschedulable_pod(timedelta(minutes=1)),
    unschedulable_pod(timedelta(hours=1)),
]

TERMINAL_WORKLOADS = [
    job(cond("Complete")),
    job(cond("SuccessCriteriaMet")),
    job(cond("Failed", reason="BackoffLimitExceeded")),
    job(cond("Failed", reason="DeadlineExceeded")),
    job(cond("FailureTarget", reason="PodFailurePolicy")),
    custom("jobset.x-k8s.io/v1alpha2", "JobSet", {"conditions": [cond("Completed")]}),
    custom("jobset.x-k8s.io/v1alpha2", "JobSet", {"terminalState": "Failed"}),
    custom("kubeflow.org/v1", "PyTorchJob", {"conditions": [cond("Failed")]}),
    custom("trainer.kubeflow.org/v1alpha1", "TrainJob", {"conditions": [cond("Complete")]}),
    custom("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Complete", "jobStatus": "SUCCEEDED"}),
    custom("ray.io/v1", "RayJob", {"jobDeploymentStatus": "Failed"}),
    custom("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Aborted"}}),
]

OTHER_WORKLOADS = [
    job(),
    job(active=1),
    job(suspend=True),
    custom(
        "jobset.x-k8s.io/v1alpha2", "JobSet", {"replicatedJobsStatus": [{"name": "w", "ready": 1}]}
    ),
    custom("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet", {}),
    custom("batch.volcano.sh/v1alpha1", "Job", {"state": {"phase": "Pending"}}),
]

pod_lists = st.lists(st.sampled_from(POD_SHAPES), max_size=6)
ages = st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=2))

# Arbitrary JSON: what a broken controller or a partial watch event could contain.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def partial(base: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """`base` with some keys dropped and some values replaced by arbitrary JSON, at any depth."""

    def mutate(obj: Any, draw: st.DrawFn, depth: int = 0) -> Any:
        if isinstance(obj, dict):
            out = {}
            for k, v in obj.items():
                choice = draw(st.integers(0, 9))
                if choice == 0:
                    continue
                out[k] = draw(json_values) if choice == 1 else mutate(v, draw, depth + 1)
            return out
        if isinstance(obj, list):
            return [mutate(v, draw, depth + 1) for v in obj]
        return obj

    return st.composite(lambda draw: mutate(base, draw))()


@settings(max_examples=150)
@given(
    workload=st.sampled_from(TERMINAL_WORKLOADS + OTHER_WORKLOADS), pods=pod_lists, data=st.data()
)
def test_state_is_a_function_of_inputs_not_of_pod_order(
    workload: dict[str, Any], pods: list[dict[str, Any]], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(pods))
    first = assess(workload, pods, NOW)
    assert assess(workload, shuffled, NOW) == first
    assert assess(workload, list(pods), NOW) == first  # and no hidden state between calls


@settings(max_examples=150)
@given(workload=st.sampled_from(TERMINAL_WORKLOADS), before=pod_lists, after=pod_lists, age=ages)
def test_terminal_states_are_absorbing(
    workload: dict[str, Any],
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    age: timedelta,
) -> None:
    # Whatever pod events arrive (in any order, late, or never) a finished workload stays finished,
    # and success is never turned into something else by a pod.
    base, _ = assess(workload, [], NOW)
    state, _ = assess(workload, before + after, NOW + age)
    assert base.terminal
    assert state.terminal
    if base is RunState.SUCCEEDED:
        assert state is RunState.SUCCEEDED
    deleted, _ = assess_deleted(workload, after, NOW + age)
    assert deleted.terminal


@settings(max_examples=200)
@given(workload=st.sampled_from(TERMINAL_WORKLOADS + OTHER_WORKLOADS), pods=pod_lists, age=ages)
def test_diagnosis_agrees_with_state(
    workload: dict[str, Any], pods: list[dict[str, Any]], age: timedelta
) -> None:
    state, diagnosis = assess(workload, pods, NOW + age)
    if state in (RunState.FAILED, RunState.PREEMPTED, RunState.STOPPED):
        assert diagnosis is not None
        assert diagnosis.terminal
        assert diagnosis.message
    elif diagnosis is not None:
        assert not diagnosis.terminal
    if state is RunState.QUEUED or state is RunState.SUCCEEDED:
        assert diagnosis is None


@settings(max_examples=100)
@given(pods=pod_lists, earlier=ages, later=ages)
def test_waiting_longer_never_unfails_a_run(
    pods: list[dict[str, Any]], earlier: timedelta, later: timedelta
) -> None:
    first, second = sorted((earlier, later))
    state_a, _ = assess(job(active=1), pods, NOW + first)
    state_b, _ = assess(job(active=1), pods, NOW + second)
    if state_a is RunState.FAILED:
        assert state_b is RunState.FAILED


@settings(max_examples=300)
@given(workload=json_values, pods=st.lists(json_values, max_size=3))
def test_no_crash_on_arbitrary_json(workload: Any, pods: list[Any]) -> None:
    obj = workload if isinstance(workload, dict) else {"status": workload}
    state, _ = assess(obj, pods, NOW)
    assert isinstance(state, RunState)
    pod_warnings(pods, NOW)


@settings(max_examples=300)
@given(data=st.data(), wl=st.sampled_from(TERMINAL_WORKLOADS + OTHER_WORKLOADS))
def test_no_crash_on_partial_real_objects(data: st.DataObject, wl: dict[str, Any]) -> None:
    workload = data.draw(partial(wl))
    pods = [
        data.draw(partial(p)) for p in data.draw(st.lists(st.sampled_from(POD_SHAPES), max_size=3))
    ]
    state, diagnosis = assess(workload, pods, NOW)
    assert isinstance(state, RunState)
    assert diagnosis is None or isinstance(diagnosis.message, str)
    assess_deleted(workload, pods, NOW)


@settings(max_examples=200)
@given(
    data=st.data(),
    wl=st.sampled_from(TERMINAL_WORKLOADS + OTHER_WORKLOADS),
    earlier=ages,
    later=ages,
)
def test_a_run_without_pods_is_steady_until_its_start_deadline(
    data: st.DataObject, wl: dict[str, Any], earlier: timedelta, later: timedelta
) -> None:
    """What lets the tracker's periodic recheck skip such a run: no `now` before
    `steady_until` answers differently (the policy's deadline shortened to fall in range)."""
    policy = TrackingPolicy(start_timeout=timedelta(minutes=30))
    workload = data.draw(partial(wl))
    until = steady_until(workload, [], policy)
    assert until is not None
    low, high = sorted((NOW + earlier, NOW + later))
    if high < until:
        assert assess(workload, [], low, policy) == assess(workload, [], high, policy)


def test_steady_until_is_the_start_deadline_then_the_run_is_late() -> None:
    policy = TrackingPolicy(start_timeout=timedelta(minutes=30))
    workload = job()  # created a minute before NOW, no pods
    until = steady_until(workload, [], policy)
    assert until == NOW - timedelta(minutes=1) + timedelta(minutes=30)
    assert assess(workload, [], until - timedelta(seconds=1), policy).state is RunState.STARTING
    assert assess(workload, [], until, policy).state is RunState.FAILED


def test_pods_or_kueue_make_a_run_unsteady_and_no_start_time_steady_forever() -> None:
    assert steady_until(job(), [POD_SHAPES[1]]) is None
    assert steady_until(job(), [], kueue_workload={"status": {}}) is None
    assert steady_until({"kind": "Job", "apiVersion": "batch/v1"}, []) == NEVER
