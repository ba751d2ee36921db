"""Pods that really run: the simulated kubelet runs an opted-in container as a local process."""

from __future__ import annotations

import base64
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.e2e.conftest import until

from .conftest import job_body

PY = sys.executable


def process_job(name: str, command: list[str], **container: Any) -> dict[str, Any]:
    body = job_body(name)
    body["spec"]["template"]["spec"]["containers"] = [
        {"name": "main", "image": "sandbox.local/python", "command": command, **container}
    ]
    return body


@pytest.fixture
async def cluster(kube: KubeApiServer, tmp_path: Path) -> AsyncIterator[SimulatedCluster]:
    async with SimulatedCluster(kube, processes=tmp_path, process_time_limit=5) as sim:
        yield sim


def the_pod(kube: KubeApiServer, job: str) -> dict[str, Any] | None:
    pods = kube.objects.list("pods", "default", label_selector=f"job-name={job}")
    return pods[0] if pods else None


def terminated(kube: KubeApiServer, job: str) -> dict[str, Any] | None:
    pod = the_pod(kube, job)
    if pod is None:
        return None
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    found: dict[str, Any] | None = statuses[0].get("state", {}).get("terminated")
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_env_secrets_args_workdir_exit_code_and_log(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create(
        "secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "key"},
            "data": {"password": base64.b64encode(b"s3cret").decode()},
        },
    )
    script = (
        "import os, sys; print(os.environ['GREETING'], os.environ['WANDB_API_KEY']);"
        " print(sys.argv[1:]); print(os.getcwd() == os.environ['HOME']);"
        " print('LEAK' in os.environ); sys.exit(3)"
    )
    os.environ["LEAK"] = "agent-only"
    try:
        kube.objects.create(
            "jobs",
            process_job(
                "p1",
                [PY, "-c", script],
                args=["$(GREETING)", "$$(GREETING)"],
                env=[
                    {"name": "GREETING", "value": "hello"},
                    {
                        "name": "WANDB_API_KEY",
                        "valueFrom": {"secretKeyRef": {"name": "key", "key": "password"}},
                    },
                ],
            ),
        )
        state = await until(lambda: terminated(kube, "p1"))
    finally:
        del os.environ["LEAK"]
    assert state["exitCode"] == 3
    assert state["reason"] == "Error"
    pod = the_pod(kube, "p1")
    assert pod is not None
    assert pod["status"]["phase"] == "Failed"
    log = "\n".join(kube.objects.logs(pod["metadata"]["name"], "main"))
    assert "hello s3cret" in log
    assert "['hello', '$(GREETING)']" in log
    assert log.count("True") == 1 and "False" in log  # own workdir as HOME; no leaked env
    workdir = Path(cluster.runner.root if cluster.runner else "") / pod["metadata"]["uid"]
    assert workdir.is_dir()


async def test_success_is_completed(kube: KubeApiServer, cluster: SimulatedCluster) -> None:
    kube.objects.create("jobs", process_job("p2", [PY, "-c", "print('done')"]))
    state = await until(lambda: terminated(kube, "p2"))
    assert (state["exitCode"], state["reason"]) == (0, "Completed")
    await until(lambda: kube.objects.get("jobs", "p2")["status"].get("succeeded") == 1)


async def test_missing_secret_is_a_config_error(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    ref = {"secretKeyRef": {"name": "absent", "key": "k"}}
    kube.objects.create(
        "jobs", process_job("p3", [PY, "-c", "pass"], env=[{"name": "K", "valueFrom": ref}])
    )

    def waiting() -> dict[str, Any] | None:
        pod = the_pod(kube, "p3")
        statuses = (pod or {}).get("status", {}).get("containerStatuses") or [{}]
        found: dict[str, Any] | None = statuses[0].get("state", {}).get("waiting")
        return found if found and found.get("reason") == "CreateContainerConfigError" else None

    found = await until(waiting)
    assert 'secret "absent" not found' in found["message"]
    assert cluster.runner is not None
    assert cluster.runner.started == []


async def test_time_limit_kills_the_process_and_its_children(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    # The child sleeps in the background, the parent waits: both must be gone.
    script = (
        "import subprocess, sys, time; c = subprocess.Popen([sys.executable, '-c',"
        " 'import time; time.sleep(600)']); print('child', c.pid, flush=True); time.sleep(600)"
    )
    async with SimulatedCluster(kube, processes=tmp_path, process_time_limit=1) as sim:
        kube.objects.create("jobs", process_job("p4", [PY, "-c", script]))
        state = await until(lambda: terminated(kube, "p4"))
        assert state["exitCode"] == 137
        pod = the_pod(kube, "p4")
        assert pod is not None
        log = "\n".join(kube.objects.logs(pod["metadata"]["name"], "main"))
        assert "killed after the time limit of 1" in log
        child = int(log.split("child ")[1].split()[0])
        assert sim.runner is not None
        (pid,) = sim.runner.started
        await until(lambda: not alive(child) and not alive(pid))


async def test_closing_the_cluster_leaves_no_process(kube: KubeApiServer, tmp_path: Path) -> None:
    async with SimulatedCluster(kube, processes=tmp_path, process_time_limit=60) as sim:
        kube.objects.create("jobs", process_job("p5", [PY, "-c", "import time; time.sleep(600)"]))
        assert sim.runner is not None
        runner = sim.runner
        await until(lambda: runner.started)
        (pid,) = runner.started
        assert alive(pid)
    assert not alive(pid), "the cluster's exit killed its process"


async def test_deleting_the_pod_kills_its_process(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("jobs", process_job("p6", [PY, "-c", "import time; time.sleep(600)"]))
    assert cluster.runner is not None
    runner = cluster.runner
    await until(lambda: runner.started)
    (pid,) = runner.started
    pod = the_pod(kube, "p6")
    assert pod is not None
    kube.objects.delete("pods", pod["metadata"]["name"])
    await until(lambda: not alive(pid))


async def test_pods_without_the_opt_in_keep_their_scripted_outcome(
    kube: KubeApiServer, cluster: SimulatedCluster
) -> None:
    kube.objects.create("jobs", job_body("plain"))
    cluster.advance(10)
    state = await until(lambda: terminated(kube, "plain"))
    assert state["exitCode"] == 0
    assert cluster.runner is not None
    assert cluster.runner.started == []
