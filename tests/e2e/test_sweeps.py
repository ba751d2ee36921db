"""Sweeps on Launch against the sandbox: schedulers as Jobs under `max_schedulers`, sweep runs
checked against their sweep's state, W&B's wandb.init check, and a failed scheduler cancelling
its sweep."""

from __future__ import annotations

from typing import Any

from launch_agent.model.sweeps import NO_WANDB_INIT
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, poll_rounds, run_spec, until

SCHEDULER_IMAGE = "registry.example/launch-agent:sweeps"


def scheduler_spec(sweep: str, **extra: Any) -> dict[str, Any]:
    """What `wandb launch-sweep` pushes, with W&B's WANDB_SWEEP_ID placeholder replaced."""
    spec: dict[str, Any] = {
        "uri": "placeholder-uri-scheduler",
        "entity": "ent",
        "project": "proj",
        "resource": "local-process",
        "name": f"Scheduler.{sweep}",
        "run_id": sweep,
        "resource_args": {},
        "overrides": {
            "entry_point": ["wandb", "scheduler", sweep],
            "args": ["--queue", "'q1'", "--project", "'proj'"],
            "run_config": {},
        },
    }
    spec.update(extra)
    return spec


def job_of(env: Env, item: RunQueueItem) -> dict[str, Any] | None:
    for job in env.jobs():
        if job["metadata"]["annotations"].get("launch-agent.io/run-queue-item-id") == item.id:
            return job
    return None


async def test_scheduler_runs_as_a_job_counted_against_max_schedulers(env: Env) -> None:
    env.state.add_sweep("ent", "proj", "swp1")
    env.state.add_sweep("ent", "proj", "swp2")
    env.cluster.script("launch-agent.io/run-id=swp1", "succeed after=1h")
    env.cluster.script("launch-agent.io/run-id=t1", "succeed after=1h")
    first = env.push(scheduler_spec("swp1"))
    config = env.config(max_jobs=1, max_schedulers=1, sweeps={"scheduler_image": SCHEDULER_IMAGE})
    async with env.running(env.agent(config)) as agent:
        await until(lambda: first.state is ItemState.CLAIMED, message="scheduler acked")
        job = job_of(env, first)
        assert job is not None
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["image"] == SCHEDULER_IMAGE
        assert container["command"] == [
            "wandb", "scheduler", "swp1", "--queue", "q1", "--project", "proj",
        ]  # fmt: skip
        assert job["metadata"]["annotations"]["launch-agent.io/sweep-scheduler"] == "true"
        # A second scheduler is over max_schedulers: left un-acked, with W&B's warning.
        second = env.push(scheduler_spec("swp2"))
        await until(lambda: second.warnings, message="cap warning")
        assert "maximum number of sweep schedulers: 1" in second.warnings[0].message
        assert "max_schedulers" in second.warnings[0].message
        # The scheduler takes no max_jobs slot: a run starts next to it.
        run = env.push(run_spec("t1"))
        await until(lambda: run.state is ItemState.CLAIMED, message="run acked")
        await poll_rounds(agent)
        assert second.state in (ItemState.LEASED, ItemState.PENDING)
        assert second.failure is None
        assert job_of(env, second) is None
        assert agent.runs.schedulers == 1


async def test_scheduler_over_the_cap_starts_once_the_first_ends(env: Env) -> None:
    env.state.add_sweep("ent", "proj", "swp1")
    env.state.add_sweep("ent", "proj", "swp2")
    env.cluster.script("launch-agent.io/run-id=swp1", "succeed after=10s")
    env.cluster.script("launch-agent.io/run-id=swp2", "succeed after=1h")
    first = env.push(scheduler_spec("swp1"))
    second = env.push(scheduler_spec("swp2"))
    async with env.running(env.agent(env.config(max_schedulers=1))):
        await until(lambda: first.state is ItemState.CLAIMED, message="first scheduler")
        await until(lambda: second.warnings, message="second over the cap")
        env.advance(30)
        # W&B offers the item again once its lease lapsed; now there is room.
        await until(
            lambda: second.state is ItemState.CLAIMED, within=20, message="second scheduler"
        )
        assert second.failure is None
        await until(lambda: job_of(env, first) is None, message="finished scheduler Job deleted")


async def test_failed_scheduler_fails_its_item_with_the_log_and_cancels_the_sweep(
    env: Env,
) -> None:
    sweep = env.state.add_sweep("ent", "proj", "swp3")
    env.cluster.script(
        "launch-agent.io/run-id=swp3", 'exit code=1 after=5s log="scheduler crashed: boom"'
    )
    item = env.push(scheduler_spec("swp3"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(10)
        await until(lambda: item.state is ItemState.FAILED, message="scheduler item failed")
        assert item.failure is not None
        assert "exited with code 1" in item.failure.message
        assert "scheduler crashed: boom" in item.failure.message
        await until(lambda: sweep.state == "CANCELED", message="sweep cancelled")
        await until(lambda: job_of(env, item) is None, message="scheduler Job deleted")


async def test_a_finished_sweep_stops_its_scheduler(env: Env) -> None:
    sweep = env.state.add_sweep("ent", "proj", "swp4")
    env.cluster.script("launch-agent.io/run-id=swp4", "succeed after=1h")
    item = env.push(scheduler_spec("swp4"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        env.advance(5)
        await until(lambda: job_of(env, item) is not None)
        sweep.state = "FINISHED"  # `wandb sweep --stop`, or the sweep ran all its runs
        await until(lambda: job_of(env, item) is None, message="scheduler Job deleted")
        await until(lambda: not env.pods_of(item), advance=lambda: env.advance(1))
        assert item.failure is None, "a scheduler stopped because its sweep is over did not fail"


async def test_custom_scheduler_needs_a_queue_spec_that_allows_it(env: Env) -> None:
    item = env.push(
        scheduler_spec(
            "swp5",
            resource="local-container",
            job="wandb/sweep-jobs/job-optuna-sweep-scheduler:latest",
            docker={"docker_image": "registry.example/optuna:1"},
            overrides={"run_config": {"sweep_args": {}}},
        )
    )
    async with env.running():
        await until(lambda: item.state is ItemState.FAILED, message="refused")
        assert item.failure is not None
        assert "spec.sweeps.customSchedulers" in item.failure.message
        assert "queue spec 'basic'" in item.failure.message
    assert env.jobs() == []


async def test_sweep_runs_start_only_in_a_running_or_paused_sweep(env: Env) -> None:
    env.state.add_sweep("ent", "proj", "live")
    env.state.add_sweep("ent", "proj", "paused", state="PAUSED")
    env.state.add_sweep("ent", "proj", "done", state="FINISHED")
    env.cluster.script("launch-agent.io/run-id=w1", "succeed after=1h")
    live = env.push(run_spec("w1", sweep_id="live"))
    paused = env.push(run_spec("w2", sweep_id="paused"))
    done = env.push(run_spec("w3", sweep_id="done"))
    gone = env.push(run_spec("w4", sweep_id="nosuchsweep"))
    async with env.running():
        await until(lambda: done.state is ItemState.FAILED and gone.state is ItemState.FAILED)
        assert done.failure is not None and gone.failure is not None
        assert done.failure.message == (
            "Launch agent picked up sweep job, but sweep (done) was in a terminal state (FINISHED)"
        )
        assert "(nosuchsweep) was in a terminal state (None)" in gone.failure.message
        await until(lambda: live.state is ItemState.CLAIMED and paused.state is ItemState.CLAIMED)
        job = job_of(env, live)
        assert job is not None
        env_vars = {
            e["name"]: e.get("value")
            for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env_vars["WANDB_SWEEP_ID"] == "live"


async def test_preempted_sweep_run_is_requeued_without_its_sweep(env: Env) -> None:
    sweep = env.state.add_sweep("ent", "proj", "swp6")
    env.cluster.script("launch-agent.io/run-id=w5", "preempted after=10s; succeed after=1h")
    item = env.push(run_spec("w5", sweep_id="swp6"))
    async with env.running():
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        sweep.state = "FINISHED"  # the sweep ends while its run is preempted
        env.advance(30)

        def requeued() -> list[RunQueueItem]:
            return [i for i in env.state.items.values() if i.id != item.id]

        (again,) = await until(requeued, message="requeued")
        assert "sweep_id" not in again.run_spec, "W&B's agent drops sweep_id from the requeue"
        assert again.run_spec["run_id"] == "w5"
        await until(lambda: again.state is ItemState.CLAIMED, message="requeued run resumes")
        assert again.failure is None


async def test_a_run_that_succeeds_without_wandb_init_is_failed(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=i1", "succeed after=5s")
    env.cluster.script("launch-agent.io/run-id=i2", "succeed after=5s")
    silent = env.push(run_spec("i1"))
    inited = env.push(run_spec("i2"))
    config = env.config(sweeps={"run_init_grace_seconds": 0})
    async with env.running(env.agent(config)) as agent:
        await until(lambda: silent.state is ItemState.CLAIMED and inited.state is ItemState.CLAIMED)
        env.state.set_run_state("ent", "proj", "i2", "running")  # its wandb.init
        env.advance(10)
        await until(lambda: silent.state is ItemState.FAILED, message="no wandb.init reported")
        assert silent.failure is not None
        assert silent.failure.message == NO_WANDB_INIT
        assert agent.finisher is not None
        await until(lambda: agent.finisher is not None and agent.finisher.checks.checked == 2)
        assert inited.state is ItemState.CLAIMED
        assert inited.failure is None
