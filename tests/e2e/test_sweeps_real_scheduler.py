"""A sweep end to end: the real `wandb scheduler` (wandb 0.31.0) runs as our agent's Job, as a
local process of the simulated kubelet, against the sandbox W&B server.

The scheduler picks each run's parameters through the sandbox's sweep server and pushes the
runs onto the queue; our agent runs them. The test plays what the sandbox does not run: each
sweep run's own W&B calls (`wandb.init` + `run.finish`, here: marking the run finished once its
pod ran), as `test_reference_agent.py` does.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.cluster import ManualClock, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem, WandbServer
from tests.e2e.conftest import BASIC_SPEC, BIG_NODE, Env, until

TRAIN_IMAGE = "registry.example/train:1"
SWEEP = {
    "method": "random",
    "run_cap": 6,
    "metric": {"name": "loss", "goal": "minimize"},
    "parameters": {"lr": {"min": 0.0001, "max": 0.1}, "batch_size": {"values": [16, 32, 64]}},
    "image_uri": TRAIN_IMAGE,
}


def scheduler_item(sweep: str) -> dict[str, Any]:
    """What `wandb launch-sweep` pushes (cli.py `launch_sweep`, `construct_scheduler_args`)."""
    return {
        "uri": "placeholder-uri-scheduler",
        "entity": "ent",
        "project": "proj",
        "resource": "local-process",
        "name": f"Scheduler.{sweep}",
        "run_id": sweep,
        "resource_args": {},
        "overrides": {
            "entry_point": ["wandb", "scheduler", sweep],
            "args": ["--queue", "'q1'", "--project", "'proj'", "--image_uri", TRAIN_IMAGE],
            "run_config": {},
        },
    }


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "basic.yaml").write_text(BASIC_SPEC)
    state = LaunchState(entity="ent", lease_seconds=30)
    state.add_queue("q1")
    clock = ManualClock()
    async with (
        WandbServer(state) as wb,
        KubeApiServer(host="127.0.0.1", port=0) as kube,
        SimulatedCluster(
            kube, clock=clock, nodes=[BIG_NODE], processes=tmp_path / "pods", process_time_limit=90
        ) as cluster,
    ):
        kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url)
        yield Env(wb, kube, cluster, clock, specs, kubeconfig)


def sweep_runs(env: Env, sweep: str) -> list[RunQueueItem]:
    return [i for i in env.state.items.values() if i.run_spec.get("sweep_id") == sweep]


def play_workloads(env: Env, sweep: str) -> None:
    """Each claimed sweep run's workload calls wandb.init and finishes; time moves on."""
    for item in sweep_runs(env, sweep):
        if item.state is ItemState.CLAIMED and item.associated_run_id:
            env.state.set_run_state("ent", "proj", item.associated_run_id, "finished")
    env.advance(10)


async def test_random_sweep_of_six_runs_with_the_real_scheduler(env: Env) -> None:
    sweep = env.state.add_sweep("ent", "proj", "swp1", config=SWEEP)
    item = env.push(scheduler_item("swp1"))
    config = env.config(max_jobs=2, sweeps={"scheduler_image": "sandbox.local/launch-agent"})
    async with env.running(env.agent(config)):
        await until(lambda: item.state is ItemState.CLAIMED, message="scheduler acked")
        await until(
            lambda: sweep.state == "FINISHED",
            within=90,
            advance=lambda: play_workloads(env, "swp1"),
            message="sweep finished",
        )
        runs = sweep_runs(env, "swp1")
        assert len(runs) == 6
        issued = [{k: v["value"] for k, v in p.items()} for p in sweep.issued]
        assert [r.run_spec["overrides"]["run_config"] for r in runs] == issued
        for params in issued:
            assert 0.0001 <= params["lr"] <= 0.1
            assert params["batch_size"] in (16, 32, 64)
        for run in runs:
            assert run.state is ItemState.CLAIMED, run.failure
            job = next(
                j
                for j in env.jobs()
                if j["metadata"]["annotations"]["launch-agent.io/run-queue-item-id"] == run.id
            )
            container = job["spec"]["template"]["spec"]["containers"][0]
            env_vars = {e["name"]: e.get("value") for e in container["env"]}
            assert env_vars["WANDB_SWEEP_ID"] == "swp1"
            assert json.loads(env_vars["WANDB_CONFIG"]) == run.run_spec["overrides"]["run_config"]
        await until(
            lambda: (
                not [
                    j
                    for j in env.jobs()
                    if j["metadata"]["annotations"].get("launch-agent.io/sweep-scheduler")
                ]
            ),
            message="scheduler Job gone",
        )
        assert item.failure is None


def scheduler_jobs(env: Env) -> list[dict[str, Any]]:
    return [
        j
        for j in env.jobs()
        if j["metadata"]["annotations"].get("launch-agent.io/sweep-scheduler") == "true"
    ]


async def test_a_crashing_scheduler_fails_its_item_and_cancels_the_sweep(env: Env) -> None:
    # The scheduler cannot read its sweep's config: `Scheduler.__init__` raises, the process
    # exits with an error.
    sweep = env.state.add_sweep("ent", "proj", "swp2")
    sweep.config = "parameters: [unclosed"
    item = env.push(scheduler_item("swp2"))
    config = env.config(sweeps={"scheduler_image": "sandbox.local/launch-agent"})
    async with env.running(env.agent(config)):
        await until(lambda: item.state is ItemState.FAILED, within=60, message="item failed")
        assert item.failure is not None
        assert "exited with code 1" in item.failure.message
        assert "Exception when finding sweep (swp2)" in item.failure.message, "the log tail"
        await until(lambda: sweep.state == "CANCELED", message="sweep cancelled")
        await until(lambda: not scheduler_jobs(env), message="scheduler Job deleted")


async def test_a_sweep_cancelled_from_the_ui_stops_its_scheduler_and_runs(env: Env) -> None:
    sweep = env.state.add_sweep("ent", "proj", "swp3", config={**SWEEP, "run_cap": 2})
    env.cluster.script("launch-agent.io/queue=q1", "succeed after=1h")  # runs that go on
    item = env.push(scheduler_item("swp3"))
    config = env.config(max_jobs=4, sweeps={"scheduler_image": "sandbox.local/launch-agent"})
    async with env.running(env.agent(config)) as agent:

        def running_runs() -> list[RunQueueItem]:
            return [r for r in sweep_runs(env, "swp3") if r.state is ItemState.CLAIMED]

        await until(lambda: len(running_runs()) == 2, within=60, message="two runs running")
        assert scheduler_jobs(env)
        env.state.set_sweep_state(sweep, "CANCELED")  # the sweep page's Cancel button
        await until(lambda: not scheduler_jobs(env), within=30, message="scheduler stopped")
        await until(
            lambda: (
                not [j for j in env.jobs() if j["metadata"]["name"] != item.id]
                and not list(agent.runs)
            ),
            within=30,
            message="runs stopped",
        )
        assert item.failure is None
        assert all(r.failure is None for r in sweep_runs(env, "swp3"))


async def test_wandb_launch_sweep_starts_a_sweep_our_agent_runs_to_completion(
    env: Env, tmp_path: Path
) -> None:
    home = tmp_path / "engineer"
    home.mkdir()
    (home / "sweep.yaml").write_text(json.dumps({**SWEEP, "run_cap": 3}))
    client_env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "WANDB_BASE_URL": env.wandb.url,
        "WANDB_API_KEY": env.wandb.api_key,
        "WANDB_DIR": str(home),
        "WANDB_CONFIG_DIR": str(home / ".config"),
        "WANDB_CACHE_DIR": str(home / ".cache"),
        "WANDB_ERROR_REPORTING": "false",
        "WANDB_ENTITY": "ent",
    }
    wandb_cli = str(Path(sys.executable).parent / "wandb")
    client = await asyncio.create_subprocess_exec(
        *[wandb_cli, "launch-sweep", "sweep.yaml", "--queue", "q1", "--project", "proj"],
        cwd=home,
        env=client_env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(client.communicate(), timeout=60)
    assert client.returncode == 0, out.decode()
    assert "Scheduler added to launch queue (q1)" in out.decode()
    (sweep,) = list(env.state.iter_sweeps())
    assert sweep.state == "PENDING"
    (item,) = env.state.items.values()
    config = env.config(max_jobs=2, sweeps={"scheduler_image": "sandbox.local/launch-agent"})
    async with env.running(env.agent(config)):
        await until(lambda: item.state is ItemState.CLAIMED, message="scheduler acked")
        await until(
            lambda: sweep.state == "FINISHED",
            within=90,
            advance=lambda: play_workloads(env, sweep.name),
            message="sweep finished",
        )
        runs = sweep_runs(env, sweep.name)
        assert len(runs) == 3
        assert all(r.state is ItemState.CLAIMED and r.failure is None for r in runs)
        await until(lambda: not scheduler_jobs(env), message="scheduler Job gone")
        assert item.failure is None
