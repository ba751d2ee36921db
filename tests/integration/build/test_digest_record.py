"""`DigestRecord` against the sandbox API server: the ConfigMap the build cache trusts.

Two replicas writing at once keep both builds (a 409 re-reads and merges); a digest another
writer added is found by re-reading; a hand-edited or broken record is never trusted beyond
its well-formed entries; missing RBAC stops the agent at start-up naming what to grant.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic import SecretStr

from launch_agent.adapters.digest_record import DigestRecord
from launch_agent.adapters.kube import KubeClient
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.config import AgentConfig
from launch_agent.runtime.builds import open_record, record_location
from launch_agent.runtime.startup import StartupError
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig

NS = "launch-agent"
NAME = "agent-a-image-digests"
TAGS = [f"{n:020x}" for n in range(12)]
DIGESTS = [f"sha256:{n:064x}" for n in range(12)]


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[tuple[KubeApiServer, KubeClient]]:
    async with KubeApiServer(host="127.0.0.1", port=0) as server:
        path = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", server.url)
        policy = RetryPolicy(attempts=2, base_delay=0.01, timeout=10)
        async with await KubeClient.from_kubeconfig(str(path), policy=policy) as client:
            await client.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, NS
            )
            yield server, client


def _data(server: KubeApiServer) -> dict[str, str]:
    (cm,) = server.objects.list("configmaps", namespace=NS)
    return dict(cm.get("data") or {})


async def test_two_replicas_writing_at_once_keep_both_builds(
    kube: tuple[KubeApiServer, KubeClient],
) -> None:
    server, client = kube
    a = DigestRecord(client, NS, NAME, agent="agent-a")
    b = DigestRecord(client, NS, NAME, agent="agent-a")
    await a.load()
    await b.load()
    # Both start from the same (absent) object: one create wins, the other 409s and merges.
    await asyncio.gather(*(r.add(t, d) for r, t, d in zip([a, b] * 6, TAGS, DIGESTS, strict=True)))
    data = _data(server)
    assert sorted(data) == TAGS
    assert all(data[t].split()[1:] == [d] for t, d in zip(TAGS, DIGESTS, strict=True))
    # Each sees the other's builds when asked about a digest it did not write.
    assert await a.trusts(TAGS[1], DIGESTS[1]) and await b.trusts(TAGS[0], DIGESTS[0])
    assert not await a.trusts(TAGS[0], DIGESTS[1])  # a digest counts for its own tag only


async def test_a_broken_record_trusts_only_its_well_formed_entries(
    kube: tuple[KubeApiServer, KubeClient],
) -> None:
    server, client = kube
    data = {
        TAGS[0]: f"1 {DIGESTS[0]}",
        TAGS[1]: f"x {DIGESTS[1]}",
        "not-a-tag": f"1 {DIGESTS[2]}",
        TAGS[3]: "1 latest",
    }
    server.objects.create("configmaps", {"metadata": {"name": NAME}, "data": data}, NS)
    record = DigestRecord(client, NS, NAME)
    await record.load()
    assert await record.trusts(TAGS[0], DIGESTS[0])
    assert not await record.trusts(TAGS[1], DIGESTS[1])
    assert not await record.trusts(TAGS[3], "latest")
    await record.add(TAGS[4], DIGESTS[4])
    assert sorted(_data(server)) == [TAGS[0], TAGS[4]]  # the rest is dropped, not kept


async def test_the_record_is_pruned_to_its_bound(kube: tuple[KubeApiServer, KubeClient]) -> None:
    server, client = kube
    now = [1000.0]
    record = DigestRecord(client, NS, NAME, max_entries=10, clock=lambda: now[0])
    for tag, digest in zip(TAGS, DIGESTS, strict=True):
        now[0] += 1
        await record.add(tag, digest)
    assert sorted(_data(server)) == TAGS[2:]  # the two oldest builds went


def _config(**trust: str) -> AgentConfig:
    return AgentConfig(
        api_key=SecretStr("k"),
        agent_name="agent-a",
        builder={"type": "kaniko", "trust": trust},  # type: ignore[arg-type]
    )


def test_the_record_defaults_to_the_agents_namespace_and_name() -> None:
    assert record_location(_config()) == ("default", NAME)
    assert record_location(_config(record_namespace=NS, record_name="r")) == (NS, "r")


async def test_missing_rbac_stops_the_start_naming_what_to_grant(
    kube: tuple[KubeApiServer, KubeClient],
) -> None:
    server, client = kube
    server.faults.add(FaultRule("GET configmaps", status=403))
    with pytest.raises(StartupError) as caught:
        await open_record(_config(record_namespace=NS), client)
    message = str(caught.value)
    assert f"ConfigMap {NS}/{NAME} cannot be read" in message
    assert f"get and update on configmaps {NAME} and create on configmaps in namespace {NS}" in (
        message
    )


async def test_an_unreachable_record_at_start_is_read_again_later(
    kube: tuple[KubeApiServer, KubeClient],
) -> None:
    server, client = kube
    rule = server.faults.add(FaultRule("GET configmaps", status=503, times=2))
    record = await open_record(_config(record_namespace=NS), client)
    assert rule.fired == 2
    await record.add(TAGS[0], DIGESTS[0])
    assert await record.trusts(TAGS[0], DIGESTS[0])
