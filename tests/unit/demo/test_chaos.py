"""The chaos bench's plan, kill schedule and verdict rules (pure parts of `launch_agent.demo`)."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from launch_agent.demo.chaos import Creations, Plan, _ended, _workload_active, build_jobs, plans
from launch_agent.demo.chaos_kills import PHASES, phase_of, schedule
from launch_agent.demo.chaos_specs import CR_QUEUES, JOB_QUEUES, QUEUES, queue_spec
from launch_agent.render.spec_load import load_queue_spec
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem


def test_a_seed_replays_the_same_plan_and_mixes_every_outcome_kind_and_build() -> None:
    first, again = plans(200, random.Random(7)), plans(200, random.Random(7))
    assert first == again
    assert plans(200, random.Random(8)) != first
    assert {p.outcome for p in first} == {"succeed", "fail", "stop", "preempt"}
    assert {p.queue for p in first} == set(QUEUES)
    # A run stopped from the UI must still be running when the harness presses Stop.
    assert all(p.seconds >= 20 for p in first if p.outcome == "stop")
    # Only Jobs are preempted or built; builds use every job artifact.
    assert all(p.queue in JOB_QUEUES for p in first if p.outcome == "preempt" or p.build >= 0)
    assert {p.build for p in first if p.build >= 0} == set(range(build_jobs(200)))
    assert {p.queue for p in first if p.outcome == "fail"} >= set(CR_QUEUES)
    assert Plan("r", "q", "fail", 3).script == "exit code=3 after=3s"
    assert Plan("r", "q", "preempt", 3).requeues == 1


def test_every_queue_spec_is_valid_and_tied_to_a_quota_leaf() -> None:
    for queue in QUEUES:
        spec, problems = load_queue_spec(queue_spec(queue))
        assert problems == [], (queue, problems)
        assert list(spec.queues) == [queue]
        assert spec.quota_leaf


def _item(state: LaunchState, queue: Any, spec: dict[str, Any]) -> RunQueueItem:
    return state.push(queue, spec)


def test_an_item_ends_only_in_the_state_its_outcome_calls_for() -> None:
    state = LaunchState(entity="ent")
    queue = state.add_queue("q")
    item = _item(state, queue, {"resource": "kubernetes", "run_id": "r"})
    failing, succeeding = Plan("r", "q", "fail", 1), Plan("r", "q", "succeed", 1)
    assert not _ended(failing, [item]) and not _ended(succeeding, [item])
    item.state = ItemState.CLAIMED
    assert _ended(succeeding, [item]) and not _ended(failing, [item])
    state.fail(item.id, "exited with code 3", "run", None)
    assert _ended(failing, [item]) and not _ended(succeeding, [item])


def test_a_preempted_run_ends_only_after_one_requeue_with_the_same_run_id() -> None:
    state = LaunchState(entity="ent")
    queue = state.add_queue("q")
    plan = Plan("r", "q", "preempt", 1)
    first = _item(state, queue, {"run_id": "r"})
    first.state = ItemState.CLAIMED
    assert not _ended(plan, [first])  # acked, not requeued yet
    again = _item(state, queue, {"run_id": "r", "_resume_count": 1})
    assert not _ended(plan, [first, again])  # requeued, not run yet
    again.state = ItemState.CLAIMED
    assert _ended(plan, [first, again])
    wrong = _item(state, queue, {"run_id": "other", "_resume_count": 1})
    wrong.state = ItemState.CLAIMED
    assert not _ended(plan, [first, wrong])
    twice = _item(state, queue, {"run_id": "r", "_resume_count": 2})
    twice.state = ItemState.CLAIMED
    assert not _ended(plan, [first, again, twice])
    # A success is not a requeue chain.
    assert not _ended(Plan("r", "q", "succeed", 1), [first, again])


def test_a_kill_schedule_covers_every_phase_and_replays() -> None:
    kills = schedule(len(PHASES), random.Random(3), window=30)
    assert sorted(k.phase for k in kills) == sorted(PHASES)
    assert [k.at for k in kills] == sorted(k.at for k in kills)
    assert all(3 <= k.at <= 33 for k in kills)
    assert schedule(len(PHASES), random.Random(3), window=30) == kills
    ten = Counter(k.phase for k in schedule(10, random.Random(1), window=30))
    assert set(ten) == set(PHASES) and max(ten.values()) == 2


def test_requests_mark_their_phase() -> None:
    assert phase_of("wandb", "popFromRunQueue", "/graphql") == "pop"
    assert phase_of("wandb", "ackRunQueueItem", "/graphql") == "ack"
    assert phase_of("wandb", "failRunQueueItem", "/graphql") == "report"
    assert phase_of("wandb", "pushToRunQueue", "/graphql") == "report"
    assert phase_of("kube", "POST jobs", "/apis/batch/v1/namespaces/default/jobs") == "create"
    assert phase_of("kube", "POST jobs", "/apis/batch/v1/namespaces/kaniko/jobs") == "build"
    jobsets = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
    assert phase_of("kube", "POST jobsets", jobsets) == "create"
    assert phase_of("kube", "DELETE pytorchjobs", "/x") == "clean-up"
    assert phase_of("kube", "PATCH jobs", "/x") == "clean-up"
    assert phase_of("kube", "WATCH pods", "/api/v1/pods") is None
    assert phase_of("wandb", "RunState", "/graphql") is None


def test_only_top_level_workloads_count_as_an_items_creations() -> None:
    creations = Creations()
    item = {"launch-agent.io/run-queue-item-id": "I1"}
    jobset = {"metadata": {"name": "js", "uid": "u1", "annotations": item}}
    child = {"metadata": {"name": "js-w-0", "annotations": item, "ownerReferences": [{}]}}
    kaniko = {
        "metadata": {
            "name": "build",
            "annotations": item,
            "labels": {"launch-agent.io/image-tag": "t"},
        }
    }
    creations.listener("jobset.x-k8s.io/jobsets", "ADDED", jobset)
    creations.listener("batch/jobs", "ADDED", child)
    creations.listener("batch/jobs", "ADDED", kaniko)
    creations.listener("jobset.x-k8s.io/jobsets", "MODIFIED", jobset)
    assert creations.names == {"I1": {"jobset.x-k8s.io/jobsets/js (uid u1)"}}
    # Deleted and created again under the same name: a second workload, `duplicated`.
    again = {"metadata": {"name": "js", "uid": "u2", "annotations": item}}
    creations.listener("jobset.x-k8s.io/jobsets", "ADDED", again)
    assert len(creations.names["I1"]) == 2


def test_a_finished_job_is_kept_but_any_custom_resource_of_an_ended_item_is_an_orphan() -> None:
    done = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    assert not _workload_active("jobs", done)
    assert _workload_active("jobs", {"status": {}})
    # Its TTL still held once its item ended: nothing would ever delete it.
    held = {**done, "metadata": {"annotations": {"launch-agent.io/ttl-held": "3600"}}}
    assert _workload_active("jobs", held)
    assert _workload_active("jobsets", done)
