"""Builds through the agent, end to end on the sandbox, with real clients over loopback.

A run that names a job and no image: the agent reads the job artifact from the sandbox W&B
server (wandb SDK), fetches the source (a git repository over smart HTTP on loopback, or a code artifact),
packs and uploads the context (S3 on moto, or GCS on the emulator), checks the sandbox registry
(token auth), creates the Kaniko Job in the Kaniko namespace, waits for it on a watch, and then
creates the run's workload with the built image. Kaniko's push is played by a store listener
(build_support.py). Every test ends with no build Job, build pod or context object left.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from launch_agent.render.kaniko import IMAGE_TAG
from launch_agent.runtime.agent import Agent
from launch_agent.runtime.startup import StartupError
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e import build_support
from tests.e2e.build_support import KANIKO_NS, Builds
from tests.e2e.conftest import Env, run_spec, until

# The fixtures of build_support.py, for this module.
s3_endpoint = build_support.s3_endpoint
s3_builds = build_support.s3_builds
gcs_host = build_support.gcs_host
gcs_builds = build_support.gcs_builds

TRAIN = {"train.py": "print('training')\n", "requirements.txt": "numpy\n"}


def job_spec(run_id: str, job: str, **extra: Any) -> dict[str, Any]:
    return run_spec(run_id, docker=None, job=job, **extra)


def workload_of(env: Env, item: RunQueueItem) -> dict[str, Any] | None:
    for job in env.jobs():
        annotations = job["metadata"].get("annotations") or {}
        if annotations.get("launch-agent.io/run-queue-item-id") == item.id:
            return job
    return None


def image_of(workload: dict[str, Any]) -> str:
    return str(workload["spec"]["template"]["spec"]["containers"][0]["image"])


def tag_of(kaniko_job: dict[str, Any]) -> str:
    """The content-addressed tag a Kaniko Job built."""
    return str(kaniko_job["metadata"]["labels"][IMAGE_TAG])


async def git_job(b: Builds, name: str = "train-git") -> str:
    url, sha = await asyncio.to_thread(b.make_repo, name, TRAIN)
    b.env.state.add_job(
        "ent", "proj", name, repo=url, commit=sha, entrypoint=["python", "train.py"]
    )
    return f"ent/proj/{name}:latest"


async def status_and_metrics(agent: Agent) -> tuple[dict[str, Any], str]:
    base = f"http://127.0.0.1:{agent.health_port}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/api/status") as resp:
            status: dict[str, Any] = await resp.json()
        async with http.get(f"{base}/metrics") as resp:
            return status, await resp.text()


async def test_git_job_is_built_run_and_the_next_run_skips_the_build(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b, env = s3_builds, s3_builds.env
    job = await git_job(b)
    first = env.push(job_spec("g1", job))
    async with env.running(env.agent(b.config())) as agent:
        workload = await until(
            lambda: workload_of(env, first), advance=lambda: env.advance(1), within=30
        )
        image = image_of(workload)
        assert len(b.kaniko_jobs) == 1
        kaniko = b.kaniko_jobs[0]
        tag = tag_of(kaniko)
        # The run is pinned to the digest Kaniko reported pushing, not to the tag.
        digest = b.pushed_digest(tag)
        assert image == f"{b.destination}@{digest}"
        assert kaniko["metadata"]["namespace"] == KANIKO_NS
        args = kaniko["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--context={b.store}/{tag}.tgz" in args
        assert f"--destination={b.destination}:{tag}" in args
        assert "--digest-file=/dev/termination-log" in args
        assert b.record()[tag].split()[1:] == [digest]
        await until(lambda: first.state is ItemState.CLAIMED, message="ack")
        await until(
            lambda: agent.runs.get(first.id) is None,
            advance=lambda: env.advance(1),
            message="run finished",
        )
        assert first.failure is None
        assert await b.leftovers() == ([], [], [])
        assert b.manifest_heads(404) == 1

        # The same job again: the registry's digest for the tag is on the record: no build.
        second = env.push(job_spec("g2", job))
        again = await until(
            lambda: workload_of(env, second), advance=lambda: env.advance(1), within=30
        )
        assert image_of(again) == image
        await until(lambda: second.state is ItemState.CLAIMED, message="second ack")
        assert len(b.kaniko_jobs) == 1
        assert b.manifest_heads(200) == 1
        # The status page and the metrics tell the build from the registry hit.
        status, metrics = await status_and_metrics(agent)
        assert status["builds"]["recent"] == {"built": 1, "cached": 1, "failed": 0}
        assert [x["result"] for x in status["builds"]["items"]] == ["cached", "built"]
        assert 'launch_agent_builds_total{result="built"} 1.0' in metrics
        assert 'launch_agent_builds_total{result="cached"} 1.0' in metrics
        assert 'launch_agent_build_duration_seconds_count{result="built"} 1.0' in metrics
    assert await b.leftovers() == ([], [], [])


async def test_code_artifact_job_is_built_with_the_context_in_gcs(gcs_builds: Builds) -> None:
    b, env = gcs_builds, gcs_builds.env
    files = {name: text.encode() for name, text in TRAIN.items()}
    env.state.add_artifact("ent", "proj", "code-train", "code", files=files)
    env.state.add_job("ent", "proj", "train-code", code_artifact="ent/proj/code-train:latest")
    item = env.push(job_spec("c1", "ent/proj/train-code:latest"))
    async with env.running(env.agent(b.config())) as agent:
        workload = await until(
            lambda: workload_of(env, item), advance=lambda: env.advance(1), within=30
        )
        assert image_of(workload).startswith(f"{b.destination}@sha256:")
        args = b.kaniko_jobs[0]["spec"]["template"]["spec"]["containers"][0]["args"]
        assert any(a.startswith(f"--context={b.store}/") for a in args)
        await until(
            lambda: agent.runs.get(item.id) is None,
            advance=lambda: env.advance(1),
            message="run finished",
        )
        assert item.state is ItemState.CLAIMED
        assert item.failure is None
    assert len(b.kaniko_jobs) == 1
    assert await b.leftovers() == ([], [], [])


async def test_concurrent_runs_of_one_job_cause_one_build(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b, env = s3_builds, s3_builds.env
    job = await git_job(b)
    items = [env.push(job_spec(f"n{i}", job)) for i in range(4)]
    async with env.running(env.agent(b.config())):
        workloads = await until(
            lambda: (
                all(workload_of(env, i) for i in items) and [workload_of(env, i) for i in items]
            ),
            advance=lambda: env.advance(1),
            within=40,
        )
        images = {image_of(w) for w in workloads if w is not None}
        assert len(images) == 1
        assert len(b.kaniko_jobs) == 1
        await until(lambda: all(i.state is ItemState.CLAIMED for i in items), message="acks")
    assert await b.leftovers() == ([], [], [])


async def test_a_build_longer_than_the_lease_still_ends_in_one_acked_run(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b, env = s3_builds, s3_builds.env
    env.state.lease_seconds = 0.5
    job = await git_job(b)
    item = env.push(job_spec("l1", job))
    async with env.running(env.agent(b.config())) as agent:
        await until(b.build_jobs, within=30, message="build Job created")
        # The clock stands still, so the build does too, while W&B's lease lapses and the
        # item is offered again (and popped again by this agent) several times.
        await until(lambda: item.pops >= 3, within=15, message="item offered again")
        await until(
            lambda: item.state is ItemState.CLAIMED,
            advance=lambda: env.advance(1),
            within=30,
            message="ack",
        )
        await until(
            lambda: agent.runs.get(item.id) is None,
            advance=lambda: env.advance(1),
            message="run tracked to its end",
        )
        ids = [
            (j["metadata"].get("annotations") or {}).get("launch-agent.io/run-queue-item-id")
            for j in env.jobs()
        ]
        assert ids.count(item.id) == 1  # one workload, however often the item was popped
        assert len(b.kaniko_jobs) == 1
        assert item.failure is None
    assert await b.leftovers() == ([], [], [])


async def test_a_failed_build_fails_the_item_at_stage_build_with_the_log_tail(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b, env = s3_builds, s3_builds.env
    files = {**TRAIN, "Dockerfile.broken": "FROM python:3.11-slim\nRUN pip install nope\n"}
    url, sha = await asyncio.to_thread(b.make_repo, "broken", files)
    env.state.add_job("ent", "proj", "broken", repo=url, commit=sha)
    env.cluster.script(
        IMAGE_TAG,
        'fail after=2s log="Step 2/2 : RUN pip install nope" '
        'log="error building image: exit status 1"',
    )
    item = env.push(
        job_spec("b1", "ent/proj/broken:latest", overrides={"dockerfile": "Dockerfile.broken"})
    )
    async with env.running(env.agent(b.config())) as agent:
        await until(
            lambda: item.state is ItemState.FAILED, advance=lambda: env.advance(1), within=30
        )
        assert item.failure is not None
        assert item.failure.stage == "build"
        status, metrics = await status_and_metrics(agent)
        assert status["builds"]["recent"]["failed"] == 1
        assert 'launch_agent_builds_total{result="failed"} 1.0' in metrics
        assert status["failures"][0]["stage"] == "build"
        message = item.failure.message
        assert message.startswith("building the image for job ent/proj/broken:latest failed")
        assert "BackoffLimitExceeded" in message
        assert "--- build log (tail) ---" in message
        assert "error building image: exit status 1" in message
        assert workload_of(env, item) is None
        await until(lambda: not b.build_jobs(), message="build Job deleted")
    assert len(b.kaniko_jobs) == 1
    assert await b.leftovers() == ([], [], [])


async def test_a_source_that_cannot_be_fetched_fails_the_item_before_any_build(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b, env = s3_builds, s3_builds.env
    missing = b.git.repo_url("gone")  # served by the loopback server, but no such repository
    env.state.add_job("ent", "proj", "gone", repo=missing, commit="0" * 40)
    item = env.push(job_spec("f1", "ent/proj/gone:latest"))
    async with env.running(env.agent(b.config())):
        await until(lambda: item.state is ItemState.FAILED, within=30)
    assert item.failure is not None
    assert item.failure.stage == "build"
    assert "preparing the build context: git fetch" in item.failure.message
    assert "check the job's source" in item.failure.message
    assert b.kaniko_jobs == []
    assert await b.leftovers() == ([], [], [])


async def test_a_job_artifact_that_does_not_exist_fails_the_item(s3_builds: Builds) -> None:
    b, env = s3_builds, s3_builds.env
    item = env.push(job_spec("m1", "ent/proj/no-such-job:latest"))
    async with env.running(env.agent(b.config())):
        await until(lambda: item.state is ItemState.FAILED, within=30)
    assert item.failure is not None
    assert item.failure.stage == "agent"
    assert item.failure.message.startswith("cannot build this run: job artifact")
    assert "ent/proj/no-such-job:latest" in item.failure.message
    assert b.kaniko_jobs == []


async def test_stopping_during_a_build_cleans_it_up_and_leaves_the_item(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b, env = s3_builds, s3_builds.env
    job = await git_job(b)
    item = env.push(job_spec("s1", job))
    # The clock is never advanced: the build Job runs until the agent stops.
    async with env.running(env.agent(b.config())):
        await until(b.build_jobs, within=30, message="build Job created")
        assert await b.context_objects() != []
    # The agent stopped without waiting for the build: the Job and context are gone, the item
    # was neither failed nor acked (W&B offers it again after its lease).
    assert await b.leftovers() == ([], [], [])
    assert item.state is ItemState.LEASED
    assert item.failure is None
    assert workload_of(env, item) is None


async def test_a_kaniko_builder_without_a_context_store_stops_the_start(env: Env) -> None:
    config = env.config(builder={"type": "kaniko", "destination": "registry.example/ml/train"})
    agent = env.agent(config)
    with pytest.raises(StartupError, match=r"builder\.build-context-store: required"):
        await agent.run()
    assert env.state.agents == {}  # nothing was registered with W&B


async def test_launch_agent_run_names_the_missing_key(env: Env, tmp_path: Path) -> None:
    path = tmp_path / "launch-config.yaml"
    config = {
        "queues": ["q1"],
        "entity": "ent",
        "base_url": env.wandb.url,
        "queue_specs_dir": str(env.specs_dir),
        "builder": {"type": "kaniko", "destination": "registry.example/ml/train"},
    }
    await asyncio.to_thread(path.write_text, yaml.safe_dump(config))
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "LAUNCH_AGENT_"))}
    environ["WANDB_API_KEY"] = env.wandb.api_key
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "launch_agent", "run", "--config", str(path),
        "--kubeconfig", str(env.kubeconfig),
        env=environ, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 2, err.decode()
    assert "builder.build-context-store" in err.decode()
    assert env.state.agents == {}
