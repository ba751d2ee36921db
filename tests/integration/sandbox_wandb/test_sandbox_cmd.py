"""`launch-agent sandbox up` and `sandbox submit`, run as the processes a user would start."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
import yaml

from launch_agent.cli import main
from launch_agent.sandbox.wandb import LaunchState, WandbServer
from tests.integration.sandbox_wandb.conftest import POP, Client, basic_auth, pop_vars

CLI = [sys.executable, "-m", "launch_agent"]


async def run_cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        *CLI,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **(env or {})},
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.fixture
async def wandb_server() -> AsyncIterator[WandbServer]:
    state = LaunchState(entity="ent")
    state.add_queue("q1")
    async with WandbServer(state) as server:
        yield server


async def test_submit_pushes_like_wandb_launch(wandb_server: WandbServer, tmp_path: Path) -> None:
    job = {"kind": "Job", "spec": {"template": {"spec": {"containers": [{"name": "main"}]}}}}
    resource_args = tmp_path / "job.yaml"
    resource_args.write_text(yaml.safe_dump(job))
    code, out, err = await run_cli(
        "sandbox", "submit", "--queue", "q1", "--image", "busybox:1.36",
        "--resource-args", str(resource_args), "--priority", "0", "--count", "3",
        "--arg=--lr", "--arg", "0.1",
        env={"WANDB_BASE_URL": wandb_server.url, "WANDB_API_KEY": wandb_server.api_key},
    )  # fmt: skip
    assert (code, err) == (0, "")
    ids = out.split()
    assert len(ids) == 3
    items = [wandb_server.state.item(i) for i in ids]
    assert {i.priority for i in items} == {0}
    spec = items[0].run_spec
    assert spec["resource_args"] == {"kubernetes": job}
    assert spec["docker"] == {"docker_image": "busybox:1.36"}
    assert spec["overrides"]["args"] == ["--lr", "0.1"]
    assert (spec["entity"], spec["project"], spec["resource"]) == ("ent", "proj", "kubernetes")
    assert wandb_server.log.count("pushToRunQueueByName") == 3


async def test_submit_reports_a_server_refusal(wandb_server: WandbServer) -> None:
    code, _, err = await run_cli(
        "sandbox", "submit", "--queue", "nope", "--image", "busybox",
        "--base-url", wandb_server.url, "--api-key", wandb_server.api_key,
    )  # fmt: skip
    assert code == 1
    assert "run queue ent/model-registry/nope not found" in err
    code, _, err = await run_cli(
        "sandbox", "submit", "--queue", "q1", "--image", "busybox",
        "--base-url", wandb_server.url, "--api-key", "wrong",
    )  # fmt: skip
    assert code == 1
    assert "HTTP 401" in err


def test_submit_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("WANDB_BASE_URL", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    not_a_mapping = tmp_path / "list.yaml"
    not_a_mapping.write_text("- a\n- b\n")
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [\n")
    base = ["sandbox", "submit", "-q", "q1", "--image", "i"]
    server = ["--base-url", "http://127.0.0.1:9", "--api-key", "k"]
    cases = [
        (base, "error: no W&B server: pass --base-url or set WANDB_BASE_URL"),
        (
            [*base, "--base-url", "http://x"],
            "error: no API key: pass --api-key or set WANDB_API_KEY",
        ),
        (base + server + ["--count", "0"], "error: --count must be at least 1, got 0"),
        (
            base + server + ["--resource-args", str(not_a_mapping)],
            f"error: {not_a_mapping}: must hold a mapping (a Kubernetes object), got list",
        ),
        (base + server + ["--resource-args", str(broken)], f"error: {broken}: not valid YAML"),
        (
            base + server + ["--resource-args", str(tmp_path / "missing.yaml")],
            f"error: {tmp_path / 'missing.yaml'}: cannot read: No such file or directory",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        assert capsys.readouterr().err.startswith(message), argv


def test_up_usage_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (["--crds", str(tmp_path / "nope")], f"error: --crds {tmp_path / 'nope'}: not a directory"),
        (["--lease-seconds", "0"], "error: --lease-seconds must be positive, got 0.0"),
        (["--outcome", "explode"], "error: --outcome: "),
        (
            ["--processes", "--no-cluster"],
            "error: --processes needs the simulated cluster (drop --no-cluster)",
        ),
        (
            ["--processes", "--process-time-limit", "0"],
            "error: --process-time-limit must be positive, got 0.0",
        ),
    ]
    for argv, message in cases:
        assert main(["sandbox", "up", *argv]) == 2
        assert capsys.readouterr().err.startswith(message), argv


async def test_up_serves_until_interrupted(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    env_file = tmp_path / "sandbox.env"
    process = await asyncio.create_subprocess_exec(
        *CLI, "sandbox", "up", "--dir", str(tmp_path), "--crds", "none",
        "--entity", "team", "--queue", "a", "--queue", "b", "--api-key", "k" * 40,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        for _ in range(300):
            if await loop.run_in_executor(None, env_file.exists):
                break
            await asyncio.sleep(0.1)
        text = await loop.run_in_executor(None, env_file.read_text)
        env = dict(line.split("=", 1) for line in text.splitlines())
        assert env["WANDB_API_KEY"] == "k" * 40
        assert env["WANDB_ENTITY"] == "team"
        assert env["LAUNCH_SANDBOX_QUEUES"] == "a,b"
        assert env["KUBECONFIG"] == str(tmp_path / "kubeconfig")
        kubeconfig = yaml.safe_load(
            await loop.run_in_executor(None, Path(env["KUBECONFIG"]).read_text)
        )
        kube_url = kubeconfig["clusters"][0]["cluster"]["server"]

        code, out, err = await run_cli(
            "sandbox", "submit", "-q", "b", "--image", "busybox", env=env
        )  # fmt: skip
        assert code == 0, err
        headers = {"Authorization": basic_auth(env["WANDB_API_KEY"])}
        async with aiohttp.ClientSession(headers=headers) as session:
            client = Client(session, env["WANDB_BASE_URL"])
            popped = await client.data(POP, {**pop_vars("b"), "entity": "team"})
            assert popped["popFromRunQueue"]["runQueueItemId"] == out.strip()
            async with session.get(f"{kube_url}/api/v1/namespaces/default/pods") as response:
                assert response.status == 200
                assert (await response.json())["kind"] == "PodList"
        # The same lines are printed on stdout for a shell to read.
        process.send_signal(signal.SIGINT)
        stdout, _ = await asyncio.wait_for(process.communicate(), timeout=30)
        assert process.returncode == 0
        assert stdout.decode() == text
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _sandbox_up(tmp_path: Path, *argv: str) -> tuple[asyncio.subprocess.Process, str]:
    """`sandbox up` as a user starts it; returns the process and its API server's URL."""
    loop = asyncio.get_running_loop()
    process = await asyncio.create_subprocess_exec(
        *CLI, "sandbox", "up", "--dir", str(tmp_path), "--crds", "none", *argv,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    env_file = tmp_path / "sandbox.env"
    for _ in range(600):
        if await loop.run_in_executor(None, env_file.exists) or process.returncode is not None:
            break
        await asyncio.sleep(0.1)
    assert process.returncode is None, (await process.communicate())[1].decode()
    kubeconfig = yaml.safe_load(
        await loop.run_in_executor(None, (tmp_path / "kubeconfig").read_text)
    )
    return process, str(kubeconfig["clusters"][0]["cluster"]["server"])


PRINTING_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "hello"},
    "spec": {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": "main",
                        "image": "sandbox.local/python",
                        "command": [sys.executable, "-c", "print('hello from', 6 * 7)"],
                    }
                ],
            }
        },
    },
}


async def _job_log(kube_url: str) -> tuple[dict[str, object], str]:
    """Create PRINTING_JOB, wait until it finished, return it and its pod's log."""
    base = f"{kube_url}/apis/batch/v1/namespaces/default/jobs"
    async with aiohttp.ClientSession() as session:
        async with session.post(base, json=PRINTING_JOB) as response:
            assert response.status == 201, await response.text()
        for _ in range(600):
            async with session.get(f"{base}/hello") as response:
                job = await response.json()
            conditions = {c["type"] for c in job.get("status", {}).get("conditions") or []}
            if conditions & {"Complete", "Failed"}:
                break
            await asyncio.sleep(0.1)
        assert conditions & {"Complete", "Failed"}, job
        pods_url = f"{kube_url}/api/v1/namespaces/default/pods"
        async with session.get(pods_url, params={"labelSelector": "job-name=hello"}) as response:
            (pod,) = (await response.json())["items"]
        async with session.get(f"{pods_url}/{pod['metadata']['name']}/log") as response:
            return job, await response.text()


@pytest.mark.parametrize("processes", [True, False], ids=["processes", "scripted"])
async def test_up_with_processes_runs_opted_in_pods_as_local_processes(
    tmp_path: Path, processes: bool
) -> None:
    """With --processes a `sandbox.local/` pod's command really runs and its output is the
    pod's log (what a sweep's `wandb scheduler` needs by hand); without it the same pod plays
    the default outcome and prints nothing."""
    argv = (
        ["--processes", "--outcome", "succeed after=0.5s"]
        if processes
        else ["--outcome", "succeed after=0.5s"]
    )
    process, kube_url = await _sandbox_up(tmp_path, *argv)
    try:
        job, log = await _job_log(kube_url)
        assert job["status"]["succeeded"] == 1  # type: ignore[index]
        assert ("hello from 42" in log) is processes, log
        assert (tmp_path / "pods").is_dir() is processes
    finally:
        process.send_signal(signal.SIGINT)
        await asyncio.wait_for(process.communicate(), timeout=30)


def test_submit_help_explains_where_the_server_comes_from(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        main(["sandbox", "submit", "--help"])
    assert "WANDB_BASE_URL" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["sandbox", "up", "--help"])
    assert "KUBECONFIG" in json.dumps(capsys.readouterr().out)
