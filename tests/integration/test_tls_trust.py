"""The agent's own HTTP clients trust a private CA through the environment, as the chart sets
it for `customCABundle`: without the bundle they refuse the server, with it they connect.

The W&B sandbox serves HTTPS with a certificate from a CA generated for the test; the clients
are the real ones (`WandbClient`, `RegistryClient`) over loopback TLS.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from launch_agent.adapters.registry import RegistryClient, RegistryError
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.adapters.tls import CABundleError, client_ssl_context
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.adapters.wandb_errors import WandbUnavailable
from launch_agent.model.build import parse_destination
from launch_agent.model.config_resolve import resolve
from launch_agent.sandbox.registry import RegistryServer
from launch_agent.sandbox.tls import PrivateCA
from launch_agent.sandbox.wandb import LaunchState, WandbServer

NO_RETRY = RetryPolicy(attempts=1, base_delay=0.01, timeout=5)


@pytest.fixture
def ca(tmp_path: Path) -> PrivateCA:
    return PrivateCA.create(tmp_path / "pki")


@pytest.fixture
async def https_wandb(ca: PrivateCA) -> AsyncIterator[WandbServer]:
    async with WandbServer(LaunchState(entity="ent"), ssl_context=ca.server_context()) as wb:
        yield wb


@pytest.mark.parametrize(
    "variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "LAUNCH_AGENT_CA_BUNDLE"]
)
async def test_wandb_client_trusts_the_bundle_the_environment_names(
    https_wandb: WandbServer, ca: PrivateCA, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "LAUNCH_AGENT_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    assert https_wandb.url.startswith("https://127.0.0.1:")
    async with WandbClient(https_wandb.url, https_wandb.api_key, retry=NO_RETRY) as wandb:
        with pytest.raises(WandbUnavailable, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify"):
            await wandb.viewer()
    monkeypatch.setenv(variable, str(ca.ca_file))
    async with WandbClient(https_wandb.url, https_wandb.api_key, retry=NO_RETRY) as wandb:
        viewer = await wandb.viewer()
    assert viewer.entity == "ent"


def test_the_bundle_adds_to_the_system_roots(ca: PrivateCA) -> None:
    plain = client_ssl_context({})
    context = client_ssl_context({"REQUESTS_CA_BUNDLE": str(ca.ca_file)})
    subjects = str([c["subject"] for c in context.get_ca_certs()])
    assert "launch-agent sandbox CA" in subjects
    assert len(context.get_ca_certs()) == len(plain.get_ca_certs()) + 1
    assert context.verify_mode is ssl.CERT_REQUIRED


def test_an_unreadable_bundle_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(CABundleError, match=r"SSL_CERT_FILE=.*missing\.crt: cannot load"):
        client_ssl_context({"SSL_CERT_FILE": str(tmp_path / "missing.crt")})


async def test_registry_client_trusts_the_bundle(
    ca: PrivateCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "LAUNCH_AGENT_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    async with RegistryServer(auth=False, ssl_context=ca.server_context()) as server:
        server.put_image("ml/train", "t")
        where = parse_destination(f"{server.hostport}/ml/train")
        endpoints = {server.hostport: server.url}
        async with RegistryClient(endpoints=endpoints) as client:
            with pytest.raises(RegistryError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
                await client.exists(where, "t")
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(ca.ca_file))
        async with RegistryClient(endpoints=endpoints) as client:
            assert await client.exists(where, "t")


async def test_the_agent_config_names_a_bundle(
    https_wandb: WandbServer, ca: PrivateCA, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "LAUNCH_AGENT_CA_BUNDLE"):
        monkeypatch.delenv(name, raising=False)
    resolved = resolve(
        file_text=f"ca_bundle: {ca.ca_file}\n",
        env={"WANDB_API_KEY": https_wandb.api_key, "WANDB_BASE_URL": https_wandb.url},
    )
    async with WandbClient.from_config(resolved.config, retry=NO_RETRY) as wandb:
        assert (await wandb.viewer()).entity == "ent"
