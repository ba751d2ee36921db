"""Expiring credentials: a kubeconfig's exec plugin is run again when the API server says 401.

The sandbox API server authenticates bearer tokens (`accept_tokens`) and answers an unknown one
with 401 Unauthorized, as kube-apiserver answers an expired `aws eks get-token` token. The
kubeconfig names a real exec credential plugin (`tests/exec_credentials.py`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from launch_agent.adapters.kube import KubeClient, KubeUnauthorized, Resource
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from tests.exec_credentials import Credentials, exec_user, install

NS = "default"
JOBS = Resource("batch", "v1", "Job", "jobs")
FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05, timeout=10.0)


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(host="127.0.0.1", port=0, bookmark_interval=60.0) as server:
        yield server


@pytest.fixture
async def credentials(kube: KubeApiServer, tmp_path: Path) -> Credentials:
    creds = await install(tmp_path, "first")
    kube.accept_tokens("first")
    await asyncio.to_thread(
        write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS, exec_user(creds)
    )
    return creds


async def test_an_expired_exec_credential_is_renewed_and_the_request_goes_through(
    kube: KubeApiServer, credentials: Credentials, tmp_path: Path
) -> None:
    client = await KubeClient.from_kubeconfig(str(tmp_path / "kubeconfig"), policy=FAST)
    async with client:
        assert (await client.list(JOBS, NS)).items == []
        assert await credentials.plugin_runs() == 1
        # The token expires: the server now takes only the next one, which the plugin hands out.
        kube.accept_tokens("second")
        await credentials.hand_out("second")
        kube.log.reset()
        assert (await client.list(JOBS, NS)).items == []
        assert [entry.status for entry in kube.log] == [401, 200]
        assert await credentials.plugin_runs() == 2
        assert client.renewals == 1


async def test_concurrent_requests_share_one_renewal_and_watches_renew_too(
    kube: KubeApiServer, credentials: Credentials, tmp_path: Path
) -> None:
    # Two rotations within a second: the reload rate limit (10 s by default) is lifted.
    client = await KubeClient.from_kubeconfig(
        str(tmp_path / "kubeconfig"), policy=FAST, renew_interval=0
    )
    async with client:
        await client.list(JOBS, NS)
        kube.accept_tokens("second")
        await credentials.hand_out("second")
        results = await asyncio.gather(*(client.list(JOBS, NS) for _ in range(5)))
        assert all(listed.items == [] for listed in results)
        assert await credentials.plugin_runs() == 2, "one renewal for all five"
        kube.accept_tokens("third")
        await credentials.hand_out("third")
        stream = client.watch_stream(JOBS, NS, resource_version="0", timeout_seconds=1)
        events = [event async for event in stream]
        assert all(event.get("type") == "BOOKMARK" for event in events)
        assert client.renewals == 2


async def test_a_credential_that_is_simply_wrong_fails_after_one_reload(
    kube: KubeApiServer, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    await asyncio.to_thread(write_kubeconfig, kubeconfig, kube.url, NS, {"token": "wrong"})
    kube.accept_tokens("right")
    client = await KubeClient.from_kubeconfig(str(kubeconfig), policy=FAST)
    async with client:
        # The kubeconfig is loaded again, gives the same token, and the 401 stands: no resend.
        with pytest.raises(KubeUnauthorized, match="Unauthorized"):
            await client.list(JOBS, NS)
        # Once more at once: not reloaded again within RENEW_INTERVAL.
        with pytest.raises(KubeUnauthorized):
            await client.list(JOBS, NS)
    assert [entry.status for entry in kube.log] == [401, 401]
    assert client.renewals == 0


async def test_authentication_is_off_unless_asked_for(kube: KubeApiServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    await asyncio.to_thread(write_kubeconfig, kubeconfig, kube.url, NS, {"token": "anything"})
    client = await KubeClient.from_kubeconfig(str(kubeconfig), policy=FAST)
    async with client:
        await client.list(JOBS, NS)
        kube.accept_tokens("other")
        with pytest.raises(KubeUnauthorized):
            await client.list(JOBS, NS)
        kube.accept_tokens()
        await client.list(JOBS, NS)
    body = json.dumps([entry.status for entry in kube.log])
    assert body == "[200, 401, 200]"
