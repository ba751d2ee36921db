"""`launch-agent status` as a process, against an agent on the sandbox: by URL, and through a
Kubernetes API server's service proxy with the kubeconfig's credentials."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from launch_agent.sandbox.kube import write_kubeconfig
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until

TOKEN = "cli-token-93c1"  # a known value
KUBE_TOKEN = "proxy-kube-token"


async def cli(*args: str, token: str | None = TOKEN) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LAUNCH_AGENT_STATUS_TOKEN"}
    if token is not None:
        env["LAUNCH_AGENT_STATUS_TOKEN"] = token
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "launch_agent",
        "status",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_status_by_url_in_every_format(env: Env) -> None:
    item = env.push(run_spec("r1"))
    async with env.running(env.agent(env.config(status={"token": TOKEN}))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        url = f"http://127.0.0.1:{agent.health_port}"
        code, out, err = await cli("--url", url, "-o", "json")
        assert code == 0, err
        data = json.loads(out)
        assert [r["item"] for r in data["runs"]["items"]] == [item.id]
        code, out, _ = await cli("--url", url, "-o", "yaml")
        assert code == 0 and yaml.safe_load(out)["agent"]["name"] == "test-agent"
        code, out, _ = await cli("--url", url)
        assert code == 0
        assert "QUEUES" in out and "RUNS (1 tracked" in out and item.id in out
        code, out, err = await cli("--url", url, token=None)
        assert code == 1 and out == ""
        assert "HTTP 401" in err


@pytest.fixture
async def proxy(env: Env) -> AsyncIterator[dict[str, Any]]:
    """A loopback stand-in for kube-apiserver's service proxy (the sandbox API server has no
    Services): it authenticates the kubeconfig's token, deletes `Authorization` as
    kube-apiserver's authentication filter does, and forwards the rest to the agent."""
    seen: dict[str, Any] = {"paths": []}

    async def handle(request: web.Request) -> web.StreamResponse:
        seen["paths"].append(request.raw_path)
        if request.headers.get("Authorization") != f"Bearer {KUBE_TOKEN}":
            return web.json_response({"kind": "Status", "code": 401}, status=401)
        prefix = "/api/v1/namespaces/ns1/services/http:rel-metrics:http/proxy"
        if not request.raw_path.startswith(prefix):
            return web.json_response({"kind": "Status", "code": 404}, status=404)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        headers.pop("Host", None)
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{seen['agent']}{request.raw_path[len(prefix) :]}", headers=headers) as r,
        ):
            return web.Response(status=r.status, body=await r.read(), content_type=r.content_type)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    seen["url"] = f"http://127.0.0.1:{port}"
    try:
        yield seen
    finally:
        await runner.cleanup()


async def test_status_through_the_api_server_proxy(
    env: Env, proxy: dict[str, Any], tmp_path: Path
) -> None:
    kubeconfig = await asyncio.to_thread(
        write_kubeconfig, tmp_path / "proxy-kubeconfig", proxy["url"], user={"token": KUBE_TOKEN}
    )
    async with env.running(env.agent(env.config(status={"token": TOKEN}))) as agent:
        proxy["agent"] = f"http://127.0.0.1:{agent.health_port}"
        args = ("--kubeconfig", str(kubeconfig), "-n", "ns1", "--release", "rel", "-o", "json")
        code, out, err = await cli(*args)
        assert code == 0, err
        assert json.loads(out)["agent"]["name"] == "test-agent"
        assert proxy["paths"][-1] == (
            "/api/v1/namespaces/ns1/services/http:rel-metrics:http/proxy/api/status"
        )
        # The agent's token travels in its own header (Authorization is the API server's).
        code, _, err = await cli(*args, token=None)
        assert code == 1 and "401" in err
        code, _, err = await cli(*args[:-4], "--release", "other", "-o", "json")
        assert code == 1 and "404" in err
