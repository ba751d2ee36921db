"""The demo's verdict: `judge` and the words of the table, as tables of cases."""

from __future__ import annotations

import pytest

from launch_agent.demo.scenario import RUNS, DemoRun, Observation, judge, received

OK = DemoRun("ok", "q", "Job", "succeeded")
OOM = DemoRun("oom", "q", "Job", "failed", fragments=("OOMKilled", "container main"))
STOP = DemoRun("stop", "q", "LeaderWorkerSet", "stopped", stop_when="running")


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
