"""The Helm chart installs a working agent: its Deployment, run as a kubelet would run it.

No cluster can run the chart's Deployment here, so this test does what the kubelet would do
with it and nothing more: it renders the chart with a realistic values file, applies the
Secrets and ConfigMaps the agent reads to the sandbox API server, lays the ConfigMaps out at
their mount paths (under a temporary root), and starts the container's entrypoint and args
(`launch-agent run`) with exactly the container's environment (secretKeyRef and fieldRef
resolved from the rendered objects). Only two things differ from a pod: the API server is
reached through a kubeconfig instead of the service account, and mount paths live under the
temporary root. The agent then has to pop a run, create its Job, answer its probes on the
chart's port and stop cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from launch_agent.sandbox.wandb import ItemState
from tests.chart.helm import Helm, Manifest, find, install_helm, one
from tests.e2e.conftest import BASIC_SPEC, Env, run_spec, until

START_TIMEOUT = 60.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def values(env: Env, port: int) -> dict[str, Any]:
    return {
        "agent": {"apiKey": env.wandb.api_key, "image": "launch-agent:test"},
        "baseUrl": env.wandb.url,
        "healthPort": port,
        "launchConfig": yaml.safe_dump(
            {
                "queues": ["q1"],
                "entity": "ent",
                "max_jobs": -1,
                "builder": {"type": "noop"},
                "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.2},
            }
        ),
        "queueSpecs": {"basic.yaml": BASIC_SPEC},
    }


def container_of(manifests: list[Manifest]) -> tuple[dict[str, Any], dict[str, Any]]:
    pod = one(manifests, "Deployment")["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == "launch-agent")
    return pod, container


def lay_out_mounts(manifests: list[Manifest], root: Path) -> dict[str, Path]:
    """Write every ConfigMap volume where the container mounts it; mount path -> local dir."""
    pod, container = container_of(manifests)
    config_maps = {m["metadata"]["name"]: m for m in find(manifests, "ConfigMap")}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        local = root / mount["mountPath"].lstrip("/")
        local.mkdir(parents=True, exist_ok=True)
        mounts[mount["mountPath"]] = local
        source = volumes[mount["name"]].get("configMap")
        if source is not None:
            for key, text in config_maps[source["name"]].get("data", {}).items():
                (local / key).write_text(text)
    return mounts


def container_environment(
    manifests: list[Manifest], mounts: dict[str, Path], root: Path
) -> dict[str, str]:
    pod, container = container_of(manifests)
    secrets = {
        (s["metadata"]["name"], s["metadata"]["namespace"]): s for s in find(manifests, "Secret")
    }
    namespace = one(manifests, "Deployment")["metadata"]["namespace"]
    environ: dict[str, str] = {}
    for entry in container["env"]:
        if "value" in entry:
            value = str(entry["value"])
        elif "secretKeyRef" in entry["valueFrom"]:
            ref = entry["valueFrom"]["secretKeyRef"]
            value = secrets[(ref["name"], namespace)]["stringData"][ref["key"]]
        else:
            # The kubelet's downward API, for the fields the chart asks for.
            field = entry["valueFrom"]["fieldRef"]["fieldPath"]
            value = {
                "spec.serviceAccountName": pod["serviceAccountName"],
                "metadata.name": f"{one(manifests, 'Deployment')['metadata']['name']}-pod-0",
                "metadata.namespace": namespace,
            }[field]
        # Paths inside the container live under the temporary root here.
        for mount_path, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
            if value == mount_path or value.startswith(mount_path + "/"):
                value = str(local) + value[len(mount_path) :]
                break
        else:
            if value.startswith("/") and entry["name"] in {"HOME", "TMPDIR"}:
                value = str(root / value.lstrip("/"))
                Path(value).mkdir(parents=True, exist_ok=True)
        environ[entry["name"]] = value
    return environ


def deployment_environment(env: Env, manifests: list[Manifest], root: Path) -> dict[str, str]:
    """The agent container's environment, its mounts laid out under `root`, pointed at the
    sandbox: what the kubelet would give the chart's Deployment."""
    mounts = lay_out_mounts(manifests, root)
    environ = container_environment(manifests, mounts, root)
    environ.update(
        PATH=os.environ.get("PATH", "/usr/bin:/bin"),
        KUBECONFIG=str(env.kubeconfig),
        NETRC=os.devnull,
        # This checkout's code, not the virtualenv's copy (a worktree shares the virtualenv).
        PYTHONPATH=str(Path(__file__).resolve().parents[2]),
    )
    return environ


@contextlib.asynccontextmanager
async def running_container(
    container: dict[str, Any], environ: dict[str, str], name: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, list[str]]]:
    """The container's command as a process (the image's ENTRYPOINT is launch-agent), with
    the lines it prints on stderr; stopped (SIGTERM, then SIGKILL) when the block ends."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "launch_agent",
        *container["args"],
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        env=environ,
        cwd=environ["HOME"],
    )
    lines: list[str] = []

    async def drain() -> None:
        assert process.stderr is not None
        async for raw in process.stderr:
            lines.append(raw.decode(errors="replace").rstrip())

    reader = asyncio.create_task(drain(), name=f"{name}-stderr")
    try:
        yield process, lines
    finally:
        if process.returncode is None:
            process.terminate()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), 30)
        if process.returncode is None:
            process.kill()
            await process.wait()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(reader, 10)


async def test_the_charts_deployment_runs_the_agent(env: Env, tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "values.yaml").write_text(yaml.safe_dump(values(env, port)))
    helm = Helm(binary=await asyncio.to_thread(install_helm), home=tmp_path / "helm-home")
    manifests = await asyncio.to_thread(
        helm.template, [tmp_path / "values.yaml"], namespace="default"
    )

    # What `helm install` would have created that the agent itself reads.
    for secret in find(manifests, "Secret"):
        env.kube.objects.create("secrets", secret, namespace=secret["metadata"]["namespace"])
    pod, container = container_of(manifests)
    assert container["args"] == ["run"], "the image's ENTRYPOINT is launch-agent"
    environ = deployment_environment(env, manifests, tmp_path / "container")

    env.cluster.script("launch-agent.io/run-id=chart1", "succeed after=5s")
    item = env.push(run_spec("chart1"))
    async with running_container(container, environ, "chart-agent") as (process, lines):
        await until(lambda: item.state is ItemState.CLAIMED, within=START_TIMEOUT, message="ack")
        (job,) = env.jobs()
        # The chart's identity and Secret reach the workload.
        assert job["metadata"]["labels"]["launch-agent.io/agent"] == environ["LAUNCH_AGENT_NAME"]
        pod_env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
        ref = pod_env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"]
        assert ref["name"] == environ["LAUNCH_AGENT_API_KEY_SECRET"]
        assert env.kube.objects.get("secrets", ref["name"], namespace="default") is not None

        probe_port = container["ports"][0]["containerPort"]
        async with aiohttp.ClientSession(f"http://127.0.0.1:{probe_port}") as http:

            async def ready() -> bool:
                async with http.get(pod["containers"][0]["readinessProbe"]["httpGet"]["path"]) as r:
                    return r.status == 200

            deadline = asyncio.get_running_loop().time() + START_TIMEOUT
            while not await ready():
                assert asyncio.get_running_loop().time() < deadline, "never ready"
                await asyncio.sleep(0.1)
            async with http.get(pod["containers"][0]["livenessProbe"]["httpGet"]["path"]) as r:
                assert r.status == 200
            async with http.get("/readyz") as r:
                assert (await r.text()).splitlines()[-1] == "role: leader"
        # The chart's leader Lease, held by the pod (its name from the downward API).
        lease = env.kube.objects.get("leases", environ["LAUNCH_AGENT_LEASE_NAME"], "default")
        assert lease["spec"]["holderIdentity"] == environ["LAUNCH_AGENT_POD_NAME"]
        async with (
            aiohttp.ClientSession(f"http://127.0.0.1:{probe_port}") as http,
            http.get("/metrics") as r,
        ):
            assert 'launch_agent_pops_total{queue="q1"} 1.0' in await r.text()

        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 30)
        assert code == 0, "\n".join(lines)
        assert [a.status for a in env.state.agents.values()] == ["KILLED"]
        lease = env.kube.objects.get("leases", environ["LAUNCH_AGENT_LEASE_NAME"], "default")
        assert lease["spec"]["holderIdentity"] == "", "released on a clean stop"
        # The chart sets the JSON log format; every line the agent printed parses.
        assert lines
        assert all(line.startswith("{") for line in lines), lines[:3]
