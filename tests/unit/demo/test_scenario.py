"""The demo's verdict: `judge` and the words of the table, as tables of cases."""

from __future__ import annotations

import pytest

from launch_agent.demo.runner import DemoResult, table
from launch_agent.demo.scenario import (
    REAL_RUNS,
    RUNS,
    WORKER_QUOTA,
    WORKER_RUNS,
    DemoRun,
    Observation,
    judge,
    real_runs,
    received,
    spread,
)

OK = DemoRun("ok", "q", "Job", "succeeded")
OOM = DemoRun("oom", "q", "Job", "failed", fragments=("OOMKilled", "container main"))
STOP = DemoRun("stop", "q", "LeaderWorkerSet", "stopped", stop_when="running")
KUEUE = DemoRun(
    "kq", "q", "Job", "stopped", stop_when="queued", warning_fragments=("insufficient quota",)
)
MULTI = DemoRun("mk", "q", "Job", "succeeded", on_worker=True)


def seen(item: str = "CLAIMED", run: str | None = None, **kw: object) -> Observation:
    return Observation(item_state=item, run_name=run, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("run", "observation", "problem"),
    [
        (OK, seen(run="demo-ok", agent_states=["starting", "succeeded"], finished=True), None),
        (OK, seen("FAILED", failure_stage="run"), "expected the item to be claimed, it is FAILED"),
        (OK, seen("LEASED"), "expected the item to be claimed, it is LEASED"),
        (
            OK,
            seen(run="other", agent_states=["succeeded"], finished=True),
            "acked with run name 'other', expected 'demo-ok'",
        ),
        (
            OK,
            seen(run="demo-ok", agent_states=["running"]),
            "the agent had not finished the run (last state running)",
        ),
        (
            OK,
            seen(run="demo-ok", agent_states=["running", "stopped"], finished=True),
            "expected succeeded, the agent saw stopped",
        ),
        (
            OOM,
            seen("FAILED", failure_stage="run", failure_message="oomkilled in CONTAINER main"),
            None,
        ),
        (
            OOM,
            seen("FAILED", failure_stage="agent", failure_message="OOMKilled container main"),
            "expected stage 'run', W&B got stage 'agent'",
        ),
        (
            OOM,
            seen("FAILED", failure_stage="run", failure_message="OOMKilled"),
            "the message W&B got lacks 'container main'",
        ),
        (OOM, seen(run="demo-oom"), "expected a failRunQueueItem, the item is CLAIMED"),
        (STOP, seen(run="demo-stop", agent_states=["running", "stopped"], finished=True), None),
        (
            STOP,
            seen(
                run="demo-stop",
                agent_states=["running", "stopped"],
                finished=True,
                workload_left=True,
            ),
            "stopped from the UI but its workload is still in the cluster",
        ),
        (
            STOP,
            seen(run="demo-stop", agent_states=["stopped"], finished=True, pods_left=2),
            "stopped from the UI but 2 of its pods are still in the cluster",
        ),
        (
            KUEUE,
            seen(
                run="demo-kq",
                agent_states=["queued", "stopped"],
                finished=True,
                warnings=["waiting for Kueue: ...: Insufficient quota for cpu in flavor f"],
            ),
            None,
        ),
        (
            KUEUE,
            seen(run="demo-kq", agent_states=["queued", "stopped"], finished=True),
            "no warning W&B got says 'insufficient quota'",
        ),
        (
            MULTI,
            seen(run="demo-mk", agent_states=["succeeded"], finished=True, workers=["w-1"]),
            None,
        ),
        (
            MULTI,
            seen(run="demo-mk", agent_states=["succeeded"], finished=True),
            "the agent saw no worker cluster take it (MultiKueue placed it nowhere)",
        ),
    ],
)
def test_judge(run: DemoRun, observation: Observation, problem: str | None) -> None:
    assert judge(run, observation) == problem


@pytest.mark.parametrize(
    ("observation", "text"),
    [
        (
            seen("FAILED", failure_stage="run", failure_message="Job x failed (OOMKilled)\n\nlog"),
            "failRunQueueItem stage=run: Job x failed (OOMKilled)",
        ),
        (seen(run="r1"), "ackRunQueueItem runName=r1; no failure"),
        (
            seen(run="r1", warnings=["pod p cannot be scheduled"]),
            "ackRunQueueItem runName=r1; no failure; 1 warning(s): pod p cannot be scheduled",
        ),
        (seen("PENDING"), "nothing yet (item PENDING)"),
    ],
)
def test_received(observation: Observation, text: str) -> None:
    assert received(observation) == text


@pytest.mark.parametrize(
    ("observation", "word"),
    [
        (seen("FAILED"), "failed"),
        (seen(agent_states=["running", "succeeded"], finished=True), "succeeded"),
        (seen(agent_states=["running"]), "claimed/running"),
        (seen("LEASED"), "leased"),
    ],
)
def test_outcome_word(observation: Observation, word: str) -> None:
    assert observation.outcome == word


def test_the_scenario_covers_every_kind_and_failure_the_issue_names() -> None:
    kinds = {r.kind for r in RUNS if r.expect == "succeeded"}
    assert {"Job", "PyTorchJob", "JobSet", "TrainJob", "RayJob", "Volcano Job"} <= kinds
    outcomes = " ".join(r.outcome or "" for r in RUNS)
    for reason in ("oomkilled", "imagepullbackoff", "unschedulable"):
        assert reason in outcomes
    assert any(r.stop_when == "running" and r.expect == "stopped" for r in RUNS)
    assert any(r.stop_when == "queued" and r.queue == "team-a" for r in RUNS)  # Kueue
    assert len({r.run_id for r in RUNS}) == len(RUNS)


def test_spread_names_the_workers_no_run_landed_on() -> None:
    def placed(*workers: str) -> tuple[DemoRun, Observation]:
        return MULTI, seen(workers=list(workers))

    workers = ("worker-1", "worker-2")
    assert spread([placed("worker-1"), placed("worker-2")], workers) is None
    # A run Kueue moved counts for both workers it ran on.
    assert spread([placed("worker-1", "worker-2")], workers) is None
    assert spread([placed("worker-1"), placed("worker-1")], workers) == (
        "no run landed on worker-2 (runs were placed on: worker-1)"
    )
    assert spread([placed()], workers) == (
        "no run landed on worker-1, worker-2 (runs were placed on: none)"
    )


def test_the_table_has_a_worker_column_only_with_multikueue_and_fails_an_idle_worker() -> None:
    row = (MULTI, seen(run="demo-mk", agent_states=["succeeded"], finished=True, workers=["w-1"]))
    plain = table(DemoResult([(*row, None)], 1.0, False))
    header = "run queue kind expected outcome ok what W&B received"
    assert plain[0].split() == header.split()
    problem = spread([row], ("w-1", "w-2"))
    result = DemoResult([(*row, None)], 1.0, False, workers=("w-1", "w-2"), spread_problem=problem)
    lines = table(result)
    assert lines[0].split()[6] == "worker"
    assert lines[2].split()[6] == "w-1"
    assert lines[-1] == "workers: no run landed on w-2 (runs were placed on: w-1)"
    assert not result.ok


def test_the_real_tier_leaves_out_what_it_cannot_play_and_says_why() -> None:
    runs, left = real_runs({"jobset", "lws", "kueue"})
    names = {r.name for r in runs}
    assert {"job", "jobset", "oom", "bad-image", "no-gpu", "stopped", "kueue"} == names
    why = {entry.name: entry.reason for entry in left}
    assert set(why) == {"rayjob", "volcano", "pytorchjob", "trainjob"}
    assert why["pytorchjob"] == "training-operator not built (make cluster-bins)"
    assert why["trainjob"] == "trainer not built (make cluster-bins)"
    assert "dashboard" in why["rayjob"]
    # Every scenario of the sandbox is either played on the real tier or left out there.
    everything = {r.name for r in REAL_RUNS} | {entry.name for entry in real_runs(set())[1]}
    assert {r.name for r in RUNS} == everything


def test_the_multikueue_runs_need_both_workers() -> None:
    """Each worker's quota holds two of the runs at a time: four at once need two workers."""
    per_worker = int(WORKER_QUOTA["cpu"])
    assert len(WORKER_RUNS) > per_worker
    assert all(r.on_worker for r in WORKER_RUNS)
