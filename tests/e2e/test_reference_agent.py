"""Conformance: the real `wandb launch-agent` (wandb 0.31.0) runs against the sandbox.

The reference agent is a client this project did not write. If it completes a run against the
sandbox's Kubernetes API server and W&B Launch server, the sandbox speaks both protocols well
enough for the tests of our own agent to mean something.

The agent needs its launch extras (azure-*, awscli), which pin botocore against this project's
boto3, so it lives in its own virtualenv: `make test-reference` creates `.venv-reference` and
runs this module (deselected from `make test` by the `reference_agent` marker). The test plays
the one part of the outside world the sandbox does not simulate: the workload's own W&B calls
(it marks the run finished, as `wandb.init` + `run.finish` in the pod would). The simulated
cluster runs the Job's pod and completes the Job.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.cluster import RealClock, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem, WandbServer

pytestmark = pytest.mark.reference_agent

ROOT = Path(__file__).resolve().parents[2]
REFERENCE_WANDB = Path(
    os.environ.get("LAUNCH_AGENT_REFERENCE_WANDB", ROOT / ".venv-reference" / "bin" / "wandb")
)
AGENT_CONFIG = "builder:\n  type: noop\nmax_jobs: 2\n"  # the Helm chart's default builder

JOB_SPEC: dict[str, Any] = {
    "resource": "kubernetes",
    "resource_args": {
        "kubernetes": {
            "kind": "Job",
            "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}},
        }
    },
    "docker": {"docker_image": "busybox:latest"},
    "job": None,
    "uri": None,
    "entity": "ent",
    "project": "proj",
    "overrides": {"args": ["--lr", "0.1"], "run_config": {}, "entry_point": []},
}


@dataclass
class World:
    kube: KubeApiServer
    wandb: WandbServer
    home: Path

    @property
    def state(self) -> LaunchState:
        return self.wandb.state


@pytest.fixture
def reference_wandb() -> Path:
    if not REFERENCE_WANDB.exists():
        pytest.fail(f"{REFERENCE_WANDB} is missing: run `make test-reference`, which installs it")
    return REFERENCE_WANDB


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".kube").mkdir()
    (tmp_path / "launch-config.yaml").write_text(AGENT_CONFIG)
    return tmp_path


@pytest.fixture
async def world(home: Path, reference_wandb: Path) -> AsyncIterator[World]:
    state = LaunchState(entity="ent")
    state.add_queue("q1")
    async with (
        KubeApiServer() as kube,
        WandbServer(state) as wandb,
        # Pods run for 2 s of wall-clock time and succeed, unless a test scripts otherwise.
        SimulatedCluster(kube, clock=RealClock(), default_outcome="succeed after=2s"),
    ):
        # The agent finds the cluster through ~/.kube/config (it then insists on awscli).
        await asyncio.get_running_loop().run_in_executor(
            None, write_kubeconfig, home / ".kube" / "config", kube.url, "default"
        )
        yield World(kube, wandb, home)


@pytest.fixture
async def agent(world: World, reference_wandb: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    config = world.home / "launch-config.yaml"
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(world.home),
        "KUBECONFIG": str(world.home / ".kube" / "config"),
        "WANDB_BASE_URL": world.wandb.url,
        "WANDB_API_KEY": world.wandb.api_key,
        "WANDB_DIR": str(world.home),
        "WANDB_CONFIG_DIR": str(world.home / ".config" / "wandb"),
        "WANDB_CACHE_DIR": str(world.home / ".cache" / "wandb"),
        "WANDB_ERROR_REPORTING": "false",
    }
    log_path = world.home / "agent.log"
    with log_path.open("wb") as log:
        process = await asyncio.create_subprocess_exec(
            str(reference_wandb),
            "launch-agent",
            "--queue",
            "q1",
            "--entity",
            "ent",
            "--config",
            str(config),
            env=env,
            stdout=log,
            stderr=asyncio.subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        # On failure, the agent's own account is the first thing to read.
        print(log_path.read_text(errors="replace")[-6000:])


async def eventually(what: str, check: Callable[[], Any], within: float = 60.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        await asyncio.sleep(0.1)
    pytest.fail(f"timed out after {within:.0f} s waiting for {what}")


async def stop_agent(world: World, process: asyncio.subprocess.Process) -> None:
    """Stop the agent the graceful way W&B offers: `stopPolling` on its next tick."""
    (agent,) = world.state.agents.values()
    world.state.set_stop_polling(agent.id)
    await asyncio.wait_for(process.wait(), timeout=40)
    assert process.returncode == 0
    assert "KILLED" in {status for _, status in agent.status_history}


async def test_reference_agent_runs_a_docker_image_job_to_completion(
    world: World, agent: asyncio.subprocess.Process
) -> None:
    item: RunQueueItem = world.state.push_by_name("ent", "model-registry", "q1", JOB_SPEC)
    kube = world.kube

    # Registered and polling: Viewer, ProjectRunQueues, createLaunchAgent, ..., then a pop.
    await eventually("the item to be claimed", lambda: item.state is ItemState.CLAIMED)
    run_id = item.associated_run_id
    assert run_id
    (registered,) = world.state.agents.values()
    assert registered.queue_ids == [world.state.queue("ent", "model-registry", "q1").id]

    # The Secret with the API key and the Job, labelled for the agent's watches.
    secret = await eventually(
        "the API key secret", lambda: kube.objects.find("secrets", f"wandb-api-key-{run_id}")
    )
    assert secret["type"] == "kubernetes.io/basic-auth"
    jobs = await eventually(
        "the Job", lambda: kube.objects.list("jobs", label_selector=f"wandb.ai/run-id={run_id}")
    )
    (job,) = jobs
    labels = job["metadata"]["labels"]
    assert labels["wandb.ai/agent"] == registered.name
    assert labels["wandb.ai/monitor"] == "true"
    assert job["metadata"]["name"].startswith("launch-ent-proj-")
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "busybox:latest"
    assert container["args"] == ["--lr", "0.1"]
    env = {e["name"]: e for e in container["env"]}
    assert env["WANDB_RUN_ID"]["value"] == run_id
    assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == f"wandb-api-key-{run_id}"
    assert env["WANDB_BASE_URL"]["value"] == world.wandb.url

    # The workload calls wandb.init and finishes (the pod is simulated, so the test does that
    # part); the simulated cluster runs the pod and the Job controller records success.
    world.state.set_run_state("ent", "proj", run_id, "finished")
    await eventually(
        "the simulated cluster to complete the Job",
        lambda: kube.objects.get("jobs", job["metadata"]["name"])["status"].get("succeeded"),
    )
    assert kube.objects.list("pods", label_selector=f"job-name={job['metadata']['name']}")

    # The agent learns it from its watch (it never GETs or LISTs Jobs) and cleans up.
    await eventually(
        "the agent to delete the secret after completion",
        lambda: kube.objects.find("secrets", f"wandb-api-key-{run_id}") is None,
    )
    assert kube.log.count("GET jobs") == 0
    assert kube.log.count("LIST jobs") == 0
    # Its thread then asks W&B whether the run was inited (`finish_thread_id` →
    # `_check_run_exists_and_inited`), which may come after the secret's deletion.
    await eventually(
        "the agent to ask W&B for the run's state",
        lambda: world.wandb.log.count("RunState") >= 1,
    )
    assert item.state is ItemState.CLAIMED  # success needs no report: no failRunQueueItem
    assert world.wandb.log.count("failRunQueueItem") == 0
    await stop_agent(world, agent)


async def test_reference_agent_fails_an_unsafe_item(
    world: World, agent: asyncio.subprocess.Process
) -> None:
    unsafe = {
        **JOB_SPEC,
        "resource_args": {
            "kubernetes": {
                "spec": {
                    "template": {
                        "spec": {
                            "containers": [
                                {"name": "main", "securityContext": {"privileged": True}}
                            ]
                        }
                    }
                }
            }
        },
    }
    item = world.state.push_by_name("ent", "model-registry", "q1", unsafe)
    await eventually("failRunQueueItem", lambda: item.state is ItemState.FAILED)
    assert item.failure is not None
    assert item.failure.stage == "agent"
    assert "securityContext" in item.failure.message
    (path,) = item.failure.file_paths
    assert path == f"{item.id}/error/error.log"
    # The traceback travels as a file of the agent's own run: CreateRunFiles, then a PUT.
    (registered,) = world.state.agents.values()
    agent_run = await eventually(
        "the error log upload",
        lambda: (
            (r := world.state.run("ent", "model-registry", registered.name))
            and path in r.files
            and r
        ),
    )
    assert b"LaunchError" in agent_run.files[path]
    assert world.kube.objects.list("jobs") == []
    await stop_agent(world, agent)


async def test_reference_agent_runs_a_job_artifact(
    world: World, agent: asyncio.subprocess.Process
) -> None:
    # The run spec names a job artifact; the agent downloads it with the wandb SDK
    # (membership by name, manifest, presigned file URLs) and takes the image from it.
    world.state.add_job("ent", "proj", "job-busybox", image="busybox:1.36")
    spec = {**JOB_SPEC, "docker": {}, "job": "ent/proj/job-busybox:latest"}
    item = world.state.push_by_name("ent", "model-registry", "q1", spec)
    await eventually("the item to be claimed", lambda: item.state is ItemState.CLAIMED)
    jobs = await eventually(
        "the Job",
        lambda: world.kube.objects.list(
            "jobs", label_selector=f"wandb.ai/run-id={item.associated_run_id}"
        ),
    )
    container = jobs[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "busybox:1.36"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert json.loads(env["WANDB_ARTIFACTS"]) == {"_wandb_job": "ent/proj/job-busybox:latest"}
    assert world.wandb.log.count("REST artifact file") == 2  # wandb-job.json, requirements
    # The workload reports to W&B; the simulated cluster completes the Job; the agent cleans up.
    run_id = item.associated_run_id
    world.state.set_run_state("ent", "proj", str(run_id), "finished")
    await eventually(
        "the agent to delete the secret after completion",
        lambda: world.kube.objects.find("secrets", f"wandb-api-key-{run_id}") is None,
    )
    await stop_agent(world, agent)
