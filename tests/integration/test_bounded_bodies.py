"""Every HTTP body the agent's clients read is bounded while it streams, not after.

Against real loopback servers: the sandbox W&B server's flood rules (the operation runs, then
its answer is a huge, chunked or endless body), and `tests/floods.py` for a gzip bomb, the
registry, its token service, Azure's token endpoint and the Kubernetes API. Each case
asserts the error names the limit and its setting, and that memory stayed bounded: the
tracemalloc peak of the read, and what the server managed to write to the socket before the
client hung up (the rest of a 200 MiB answer never left the server).
"""

from __future__ import annotations

import asyncio
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from launch_agent.adapters.kube import KubeClient, KubeError
from launch_agent.adapters.registry import RegistryClient, RegistryError
from launch_agent.adapters.registry_identity import AzureIdentity, AzureLogin, IdentityError
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.adapters.tls import client_ssl_context
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.adapters.wandb_errors import WandbProtocolError
from launch_agent.model.build import parse_destination
from launch_agent.model.config import AgentConfig, WandbConfig
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import write_kubeconfig
from launch_agent.sandbox.wandb import ItemState, LaunchState, WandbServer
from tests.floods import Flood, flood_server

MIB = 1024 * 1024
FAST = RetryPolicy(attempts=3, base_delay=0.02, max_delay=0.1, timeout=20.0)
# What the kernel may hold in a loopback connection's buffers (both ends) when a client stops
# reading: the server wrote that much, the client never read it.
SOCKET_BUFFERS = 16 * MIB
SPEC: dict[str, Any] = {
    "resource": "kubernetes",
    "resource_args": {"kubernetes": {"kind": "Job"}},
    "docker": {"docker_image": "busybox:latest"},
    "entity": "ent",
    "project": "proj",
}


async def _peak(call: Callable[[], Awaitable[Any]]) -> tuple[BaseException | None, int]:
    """(the exception `call` raised, tracemalloc's peak in bytes while it ran). Starting and
    stopping the tracer walks the heap: done off the loop, so no callback is charged for it."""
    await asyncio.to_thread(tracemalloc.start)
    error: BaseException | None = None
    try:
        async with asyncio.timeout(120):
            await call()
    except Exception as exc:
        error = exc
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        await asyncio.to_thread(tracemalloc.stop)
    return error, peak


@pytest.fixture
def idle_server() -> WandbServer:
    # Built outside the loop: the schema is start-up work, not a callback.
    state = LaunchState(entity="ent")
    state.add_queue("q1")
    return WandbServer(state)


@pytest.fixture
async def wb(idle_server: WandbServer) -> AsyncIterator[WandbServer]:
    async with idle_server as server:
        yield server


@pytest.fixture
async def client(wb: WandbServer) -> AsyncIterator[WandbClient]:
    """The default limit (32 MiB); warmed up by one ordinary call, so the measured call pays
    for no first-use work (the tracer makes every allocation slower)."""
    trust = await asyncio.to_thread(client_ssl_context)  # loading the roots is start-up work
    async with WandbClient(wb.url, wb.api_key, retry=FAST, ssl_context=trust) as wandb:
        await wandb.viewer()
        yield wandb


FLOODS = {
    "content-length": {"body_bytes": 200 * MIB},
    "chunked": {"body_bytes": 200 * MIB, "chunked": True},
    "endless": {"endless": True},
}


@pytest.mark.parametrize("flood", list(FLOODS), ids=list(FLOODS))
async def test_a_pop_answer_over_the_limit_fails_the_pop_and_memory_stays_bounded(
    wb: WandbServer, client: WandbClient, flood: str
) -> None:
    queue = wb.state.queue("ent", "model-registry", "q1")
    item = wb.state.push(queue, SPEC)
    rule = wb.faults.add(FaultRule("popFromRunQueue", times=1, **FLOODS[flood]))  # type: ignore[arg-type]
    error, peak = await _peak(lambda: client.pop("ent", ["q1"], None))
    assert isinstance(error, WandbProtocolError), error
    message = str(error)
    assert "W&B's answer to popFromRunQueue is over 32 MiB" in message, message
    assert message.endswith("(limit wandb.max_response_bytes)"), message
    if flood == "content-length":
        assert "(Content-Length 209,715,200)" in message
        assert peak < 4 * MIB, peak  # refused from the header: nothing read
        assert rule.sent < SOCKET_BUFFERS, rule.sent
    else:
        assert peak < 32 * MIB * 1.25 + 4 * MIB, peak  # the limit, and the buffer's slack
        assert rule.sent < 32 * MIB + SOCKET_BUFFERS, rule.sent
    # Not retried (another pop would lease more), and what it leased waits for its lease.
    assert wb.log.count("field:popFromRunQueue") == 1
    assert item.state is ItemState.LEASED


async def test_the_limit_is_the_configured_one_and_answers_under_it_are_read(
    wb: WandbServer,
) -> None:
    queue = wb.state.queue("ent", "model-registry", "q1")
    big = wb.state.push(queue, SPEC | {"overrides": {"run_config": {"x": "y" * 600_000}}})
    config = AgentConfig(
        api_key=SecretStr(wb.api_key),
        base_url=wb.url,
        wandb=WandbConfig(max_response_bytes=2 * MIB),
    )
    trust = await asyncio.to_thread(client_ssl_context)
    async with WandbClient.from_config(config, retry=FAST, ssl_context=trust) as client:
        popped = await client.pop("ent", ["q1"], None)
        item = popped["q1"]
        assert item is not None and item.id == big.id and item.problem is None
        wb.faults.add(FaultRule("popFromRunQueue", times=1, body_bytes=3 * MIB))
        with pytest.raises(WandbProtocolError, match=r"is over 2 MiB \(Content-Length 3,145,728\)"):
            await client.pop("ent", ["q1"], None)


@pytest.fixture
async def flood() -> AsyncIterator[Flood]:
    async with flood_server() as server:
        yield server


async def test_a_gzip_bomb_is_counted_after_decompression(flood: Flood) -> None:
    flood.mode, flood.size = "gzip", 256 * MIB
    trust = await asyncio.to_thread(client_ssl_context)
    async with WandbClient(flood.url, "k", retry=FAST, ssl_context=trust) as client:
        error, peak = await _peak(client.viewer)
    assert isinstance(error, WandbProtocolError), error
    assert "W&B's answer to Viewer is over 32 MiB (limit wandb.max_response_bytes)" in str(error)
    assert peak < 32 * MIB * 1.25 + 4 * MIB, peak
    assert flood.sent < MIB  # the bomb was small on the wire


@pytest.mark.parametrize("mode", ["length", "endless"])
async def test_a_registry_manifest_over_the_limit_is_a_registry_error(
    flood: Flood, mode: str
) -> None:
    # HEAD answers 200 without Docker-Content-Digest, so the client GETs the manifest to hash it.
    flood.mode, flood.size = mode, 200 * MIB
    dest = parse_destination("registry.example.com/ml/train")
    trust = await asyncio.to_thread(client_ssl_context)
    async with RegistryClient(endpoints={dest.host: flood.url}, ssl_context=trust) as client:
        error, peak = await _peak(lambda: client.digest(dest, "t1"))
    assert isinstance(error, RegistryError), error
    assert "the manifest of registry.example.com/ml/train:t1 is over 4 MiB" in str(error)
    assert "(limit builder.max_response_bytes)" in str(error)
    assert peak < 8 * MIB, peak
    assert flood.sent < 4 * MIB + SOCKET_BUFFERS


async def test_a_token_answer_over_the_limit_is_a_registry_error(flood: Flood) -> None:
    flood.mode = "endless"

    async def challenge(request: web.Request) -> web.Response:
        realm = f'Bearer realm="{flood.url}/token",service="svc"'
        return web.Response(status=401, headers={"WWW-Authenticate": realm})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", challenge)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    registry = f"http://127.0.0.1:{runner.addresses[0][1]}"
    dest = parse_destination("registry.example.com/ml/train")
    try:
        trust = await asyncio.to_thread(client_ssl_context)
        async with RegistryClient(endpoints={dest.host: registry}, ssl_context=trust) as client:
            error, peak = await _peak(lambda: client.digest(dest, "t1"))
    finally:
        await runner.cleanup()
    assert isinstance(error, RegistryError), error
    assert f"the token service {flood.url}/token's answer is over 4 MiB" in str(error)
    assert peak < 8 * MIB, peak


@pytest.mark.parametrize("status", [200, 400])
async def test_an_azure_token_answer_over_the_limit_is_an_identity_error(
    flood: Flood, tmp_path: Path, status: int
) -> None:
    flood.mode, flood.status = "endless", status
    token = tmp_path / "token"
    token.write_text("federated")
    login = AzureLogin(AzureIdentity("client", "tenant", token, f"{flood.url}/"))
    async with aiohttp.ClientSession() as session:
        error, peak = await _peak(lambda: login.login(session, "r.azurecr.io", flood.url))
    assert isinstance(error, IdentityError), error
    assert "Entra ID token request" in str(error) and "is over 4 MiB" in str(error)
    assert peak < 8 * MIB, peak


@pytest.mark.parametrize("mode", ["length", "endless"])
async def test_a_kubernetes_answer_over_the_limit_is_a_kube_error(
    flood: Flood, tmp_path: Path, mode: str
) -> None:
    flood.mode, flood.size = mode, 200 * MIB
    path = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", flood.url)
    policy = RetryPolicy(attempts=2, base_delay=0.01, timeout=20)
    async with await KubeClient.from_kubeconfig(
        str(path), policy=policy, max_response_bytes=8 * MIB
    ) as kube:
        error, peak = await _peak(lambda: kube.request("GET", "/api/v1/namespaces"))
        assert isinstance(error, KubeError), error
        assert "the API server's answer to GET /api/v1/namespaces is over 8 MiB" in str(error)
        assert peak < 8 * MIB * 1.25 + 4 * MIB, peak
        # A call can bound itself tighter (the status command's proxy read does).
        with pytest.raises(KubeError, match="is over 64 KiB"):
            await kube.request("GET", "/api/v1/x", raw=True, max_bytes=64 * 1024)
    assert flood.paths.count("/api/v1/namespaces") == 1  # not retried
