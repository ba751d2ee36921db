"""Scheduler recognition against W&B's own `_is_scheduler_job`, the sweep-state rule, the run
check's timing, the scheduler cap, and the standard scheduler rendered as a restricted Job."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
from wandb.sdk.launch.agent.agent import LaunchAgent

from launch_agent.model.queue_spec import InvalidInput
from launch_agent.model.run_item import parse_run_item
from launch_agent.model.sweeps import (
    NO_WANDB_INIT,
    is_custom_scheduler,
    is_scheduler_item,
    scheduler_sweep_id,
    sweep_state_refusal,
)
from launch_agent.render.pipeline import render
from launch_agent.render.scheduler import scheduler_queue_spec, scheduler_run
from launch_agent.render.settings import RenderSettings
from launch_agent.runtime.admission.schedulers import SchedulerCap
from launch_agent.runtime.run_checks import check_times
from launch_agent.runtime.runs import RunRecord, RunTable
from tests.unit.render.helpers import restricted_violations

URI = "placeholder-uri-scheduler"
SPECS: list[dict[str, Any]] = [
    {},
    {"uri": URI},
    {"uri": URI, "resource": "kubernetes"},
    {"uri": URI, "resource": "local-container", "job": "e/p/job:v0"},
    {"uri": URI, "resource": "local-process", "job": "e/p/optuna:latest"},
    {
        "uri": URI,
        "resource": "local-process",
        "overrides": {"entry_point": ["wandb", "scheduler", "s1"]},
    },
    {"uri": URI, "resource": "local-process", "overrides": {"entry_point": ["wandb", "scheduler"]}},
    {"uri": URI, "resource": "local-process", "overrides": {"entry_point": ["python", "x", "y"]}},
    {"uri": URI, "resource": "local-process", "overrides": {}},
    {"uri": URI, "resource": "local-process"},
    {"uri": "https://github.com/x/y", "resource": "local-process", "job": "j"},
    {"resource": "kubernetes", "overrides": {"entry_point": ["wandb", "scheduler", "s1"]}},
]


@pytest.mark.parametrize("spec", SPECS)
def test_scheduler_recognition_equals_wandbs_agent(spec: dict[str, Any]) -> None:
    # W&B's method only reads `_internal_logger` from its agent.
    agent = SimpleNamespace(_internal_logger=logging.getLogger("wandb-agent"))
    assert is_scheduler_item(spec) is LaunchAgent._is_scheduler_job(agent, spec)  # type: ignore[arg-type]


def test_custom_scheduler_is_a_scheduler_with_a_job() -> None:
    assert is_custom_scheduler({"uri": URI, "resource": "local-container", "job": "e/p/j:v1"})
    assert not is_custom_scheduler(
        {
            "uri": URI,
            "resource": "local-process",
            "overrides": {"entry_point": ["wandb", "scheduler", "s"]},
        }
    )
    assert not is_custom_scheduler({"job": "e/p/j:v1"})


def test_sweep_id_of_a_scheduler() -> None:
    assert scheduler_sweep_id({"run_id": "swp1"}) == "swp1"
    assert scheduler_sweep_id({"overrides": {"entry_point": ["wandb", "scheduler", "s2"]}}) == "s2"
    assert scheduler_sweep_id({}) is None


@pytest.mark.parametrize(
    ("state", "runs"),
    [("RUNNING", True), ("PAUSED", True), ("FINISHED", False), ("CANCELED", False), (None, False)],
)
def test_sweep_runs_start_only_in_running_or_paused_sweeps(state: str | None, runs: bool) -> None:
    refusal = sweep_state_refusal("swp1", state)
    assert (refusal is None) is runs
    if not runs:
        assert refusal == (
            f"Launch agent picked up sweep job, but sweep (swp1) was in a terminal state ({state})"
        )


def test_init_check_times_follow_wandbs_backoff() -> None:
    # finish_thread_id: check, then sleep 1, 2, 4, ... while the interval is within 60 s.
    assert check_times(60) == [0, 1, 3, 7, 15, 31, 63]
    assert check_times(0) == [0]
    assert NO_WANDB_INIT == "The submitted job exited successfully but failed to call wandb.init"


def _record(rqi: str, *, scheduler: bool) -> RunRecord:
    return RunRecord(
        rqi_id=rqi,
        queue="q",
        entity="e",
        project="p",
        run_id=rqi,
        namespace="ns",
        name=f"job-{rqi}",
        api_version="batch/v1",
        kind="Job",
        scheduler=scheduler,
    )


def test_schedulers_count_against_max_schedulers_not_max_jobs() -> None:
    runs = RunTable()
    cap = SchedulerCap(1, runs)
    with cap.place("s1") as placed:
        assert placed
        with cap.place("s2") as second:
            assert not second, "a second scheduler while the first dispatches is over the cap"
        runs.add(_record("s1", scheduler=True))
    assert runs.inflight == 0, "a scheduler takes no max_jobs slot"
    assert runs.schedulers == 1
    with cap.place("s2") as placed:
        assert not placed
    with cap.place("s1") as again:
        assert again, "an item offered again is not a second scheduler"
    runs.add(_record("r1", scheduler=False))
    assert runs.inflight == 1
    record = runs.get("s1")
    assert record is not None
    runs.mark_finishing(record)
    assert runs.schedulers == 0
    with cap.place("s2") as placed:
        assert placed
    runs.remove(record)
    assert (runs.inflight, runs.schedulers) == (1, 0)


def test_unlimited_schedulers() -> None:
    runs = RunTable()
    for i in range(5):
        runs.add(_record(f"s{i}", scheduler=True))
    with SchedulerCap(-1, runs).place("s9") as placed:
        assert placed


def _scheduler_item(**overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "uri": URI,
        "entity": "ent",
        "project": "proj",
        "resource": "local-process",
        "name": "Scheduler.swp1",
        "run_id": "swp1",
        "resource_args": {"kubernetes": {"spec": {"template": {"spec": {"hostNetwork": True}}}}},
        "overrides": {
            "entry_point": ["wandb", "scheduler", "swp1"],
            "args": ["--queue", "'q1'", "--project", "'proj'"],
            "run_config": {},
        },
    }
    spec.update(overrides)
    return {"runQueueItemId": "UnVuUXVldWVJdGVtOjk=", "runSpec": spec}


def test_standard_scheduler_renders_as_a_restricted_job_with_the_key_as_a_secret_ref() -> None:
    image = "registry.example/launch-agent:1"
    spec = scheduler_queue_spec("q1", "sweeps", image)
    run = scheduler_run(parse_run_item(_scheduler_item(), scheduler=True), image)
    settings = RenderSettings(api_key_secret="wandb-key", api_key_secret_key="k")
    job = render(spec, run, None, settings, queue_name="q1").workload
    assert job["kind"] == "Job"
    assert job["metadata"]["namespace"] == "sweeps"
    assert job["metadata"]["labels"]["launch-agent.io/run-id"] == "swp1"
    pod = job["spec"]["template"]
    assert restricted_violations(pod) == []
    assert "hostNetwork" not in pod["spec"], "the submitter's resource_args do not apply"
    (container,) = pod["spec"]["containers"]
    assert container["image"] == image
    # W&B runs the command through a shell: the quotes launch-sweep adds are the shell's.
    assert container["command"] == [
        "wandb",
        "scheduler",
        "swp1",
        "--queue",
        "q1",
        "--project",
        "proj",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["WANDB_API_KEY"] == {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb-key", "key": "k"}},
    }
    assert env["WANDB_RUN_ID"]["value"] == "swp1"


def test_a_scheduler_item_may_name_local_process_but_a_run_may_not() -> None:
    with pytest.raises(InvalidInput, match="only runs 'kubernetes'"):
        parse_run_item(_scheduler_item())
    with pytest.raises(InvalidInput, match="entry_point: is not a valid shell command"):
        scheduler_run(
            parse_run_item(
                _scheduler_item(overrides={"entry_point": ["wandb", "scheduler", "'unclosed"]}),
                scheduler=True,
            ),
            "img",
        )
