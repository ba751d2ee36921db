"""The judgements issue 14 changed that the fixture replays do not reach on their own: the
warnings the tracker reports besides the state, a re-activated Kueue Workload, both Event APIs
summed, a run that already ran, and KubeRay without `jobDeploymentStatus`."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from launch_agent.model.run_state import Reason, RunState
from launch_agent.tracking import assess, dump, kueue, pod_warnings
from launch_agent.tracking import events as ev
from tests.unit.tracking.shapes import NOW, cond, container_status, job, pod, ts


def _terminating(code: int) -> dict[str, Any]:
    body = pod("run-abc-x7k2p", "Running", container_status(terminated=("Error", code)))
    body["metadata"]["deletionTimestamp"] = ts()
    return body


def test_no_warning_for_pods_the_agent_or_kueue_is_deleting() -> None:
    # On a real cluster a suspended Job's pods end gracefully with 137/143 (the old tracker
    # posted "exited with code 143" for every suspension).
    assert pod_warnings([_terminating(143), _terminating(137)], NOW) == ()
    # A real failure of a pod being deleted is still worth telling.
    assert [d.exit_code for d in pod_warnings([_terminating(3)], NOW)] == [3]


def test_a_reactivated_workload_is_not_deactivated() -> None:
    wl: dict[str, Any] = {
        "metadata": {"namespace": "ml"},
        "spec": {"active": True, "queueName": "lq-a"},
        "status": {
            "conditions": [
                cond("Evicted", reason="DeactivatedDueToRequeuingLimitExceeded", message="x"),
            ]
        },
    }
    assert kueue.deactivation(wl) is None
    wl["spec"]["active"] = False
    assert kueue.deactivation(wl) == ("DeactivatedDueToRequeuingLimitExceeded", "x")
    wl["status"]["conditions"] = []
    assert kueue.deactivation(wl) == (
        "Deactivated",
        "the Workload was deactivated (spec.active: false)",
    )


def test_both_event_apis_are_summed_and_the_latest_message_wins() -> None:
    about = {"kind": "Job", "name": "run-abc", "namespace": "ml", "uid": "1b7c"}
    old = {
        "type": "Warning",
        "reason": "FailedCreate",
        "message": "Error creating: old words",
        "involvedObject": about,
        "count": 4,
        "lastTimestamp": ts(timedelta(minutes=9)),
    }
    new = {
        "type": "Warning",
        "reason": "FailedCreate",
        "note": "Error creating: new words",
        "regarding": about,
        "series": {"count": 6, "lastObservedTime": ts(timedelta(minutes=1))},
    }
    normal = {**old, "type": "Normal", "reason": "SuccessfulCreate"}
    found = ev.explain(ev.related(ev.warnings([old, new, normal]), job(), []))
    assert found is not None
    assert (found.reason, found.count, found.message) == (
        Reason.FAILED_CREATE,
        10,
        "Error creating: new words",
    )
    other = {**old, "involvedObject": {**about, "name": "someone-else", "uid": "9"}}
    assert ev.related(ev.warnings([other]), job(), []) == []


def test_a_run_that_already_ran_has_no_start_deadline() -> None:
    # A retry's new pod waiting for a node, two hours into a run: not "did not start".
    ran = pod("run-abc-old", "Failed", container_status(terminated=("Error", 1)))
    pending = pod("run-abc-new", "Pending")
    long_ago = job(active=1, failed=1)
    long_ago["metadata"]["creationTimestamp"] = ts(timedelta(hours=2))
    long_ago["status"]["startTime"] = ts(timedelta(hours=2))
    state, _ = assess(long_ago, [ran, pending], NOW)
    assert state is RunState.STARTING
    state, diag = assess(long_ago, [pending], NOW)
    assert state is RunState.FAILED and diag is not None and diag.reason is Reason.START_TIMEOUT


def _rayjob(**status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "r"},
        "status": status,
    }


def test_rayjob_statuses() -> None:
    def state(**status: Any) -> RunState:
        return assess(_rayjob(**status), [], NOW).state

    # An old KubeRay writes no jobDeploymentStatus: jobStatus is the outcome.
    assert state(jobStatus="FAILED") is RunState.FAILED
    # Modern: only Complete and Failed are final (rayjob_types.go IsJobDeploymentTerminal).
    assert state(jobDeploymentStatus="Retrying", jobStatus="FAILED") is RunState.RUNNING
    assert state(jobDeploymentStatus="", jobStatus="FAILED", failed=1) is RunState.RUNNING
    assert state(jobDeploymentStatus="Running", jobStatus="FAILED") is RunState.RUNNING
    assert state(jobDeploymentStatus="Failed", jobStatus="FAILED") is RunState.FAILED
    assert state(jobDeploymentStatus="Complete", jobStatus="FAILED") is RunState.FAILED
    assert state(jobDeploymentStatus="Complete", jobStatus="SUCCEEDED") is RunState.SUCCEEDED


def test_a_sidecar_oom_does_not_hide_the_main_containers_exit_code() -> None:
    failed = job(cond("Failed", reason="BackoffLimitExceeded"), failed=1)
    body = pod(
        "run-abc-x7k2p",
        "Failed",
        container_status("istio-proxy", "istio/proxyv2", terminated=("OOMKilled", 137)),
        container_status(terminated=("Error", 1)),
    )
    body["spec"]["containers"].append({"name": "istio-proxy", "image": "istio/proxyv2"})
    _, diag = assess(failed, [body], NOW)
    assert diag is not None and (diag.container, diag.exit_code) == ("main", 1)


def test_a_neighbour_named_like_a_child_is_not_the_workloads() -> None:
    # `run-abc-2` beside `run-abc` in one namespace: its pods and its Events are not ours.
    its_pod = pod("run-abc-2-q8x1z", "Failed", container_status(terminated=("OOMKilled", 137)))
    its_pod["metadata"]["labels"] = {"job-name": "run-abc-2"}
    about = {"kind": "Job", "name": "run-abc-2", "namespace": "ml", "uid": "other-uid"}
    warning = {"type": "Warning", "reason": "FailedCreate", "message": "x", "involvedObject": about}
    inputs = dump.select([job(active=1), its_pod, warning])
    assert inputs.pods == []
    assert ev.related(ev.warnings(inputs.events), inputs.workload, inputs.pods) == []
