"""Leader election against the sandbox API server: Leases served as kube-apiserver serves them,
and `runtime/leader.py` acquiring, renewing, losing and handing over through real HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from launch_agent.adapters.kube import KubeClient
from launch_agent.adapters.kube.errors import KubeConflict
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.lease import LeaseTiming
from launch_agent.runtime.clock import monotonic
from launch_agent.runtime.leader import LeaderElector
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from tests.e2e.conftest import until

NS = "default"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
FAST = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05, timeout=5.0)
TIMING = LeaseTiming(lease_duration=1.5, renew_deadline=1.0, retry_period=0.1)
WAIT = 10.0


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(host="127.0.0.1", port=0, bookmark_interval=60.0) as server:
        yield server


@pytest.fixture
async def client(kube: KubeApiServer, tmp_path: Path) -> AsyncIterator[KubeClient]:
    kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
    kube_client = await KubeClient.from_kubeconfig(str(kubeconfig), policy=FAST)
    async with kube_client:
        yield kube_client


def lease(name: str, holder: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }


async def test_leases_are_served_with_resource_version_conflicts(client: KubeClient) -> None:
    created = await client.request("POST", LEASES, body=lease("x", "a"))
    rv = created["metadata"]["resourceVersion"]
    first = {**created, "spec": {**created["spec"], "holderIdentity": "b"}}
    updated = await client.request("PUT", f"{LEASES}/x", body=first)
    assert updated["spec"]["holderIdentity"] == "b"
    assert updated["metadata"]["resourceVersion"] != rv
    stale = {**created, "spec": {**created["spec"], "holderIdentity": "c"}}
    with pytest.raises(KubeConflict) as caught:
        await client.request("PUT", f"{LEASES}/x", body=stale, retry=False)
    assert caught.value.message == (
        'Operation cannot be fulfilled on leases.coordination.k8s.io "x": the object has been'
        " modified; please apply your changes to the latest version and try again"
    )
    with pytest.raises(KubeConflict, match="already exists"):
        await client.request("POST", LEASES, body=lease("x", "d"), retry=False)
    listed = await client.request("GET", LEASES)
    assert [item["spec"]["holderIdentity"] for item in listed["items"]] == ["b"]


class Replica:
    """One elector with a log of what it did, on the real clock."""

    def __init__(self, client: KubeClient, identity: str, events: list[tuple[float, str]]):
        self.identity = identity
        self.events = events
        self.lost = asyncio.Event()
        self.elector = LeaderElector(
            client,
            namespace=NS,
            name="agent",
            identity=identity,
            timing=TIMING,
            clock=monotonic,
            now=lambda: datetime.now(UTC),
            on_change=self._role,
            on_lost=self._lost,
        )

    def _role(self, role: str) -> None:
        self.events.append((time.monotonic(), f"{self.identity} {role}"))

    def _lost(self, reason: str) -> None:
        self.events.append((time.monotonic(), f"{self.identity} lost: {reason}"))
        self.lost.set()


async def event(e: asyncio.Event) -> None:
    await asyncio.wait_for(e.wait(), WAIT)


async def test_one_leads_and_a_clean_stop_hands_over_at_once(
    client: KubeClient, kube: KubeApiServer
) -> None:
    events: list[tuple[float, str]] = []
    a, b = Replica(client, "pod-a", events), Replica(client, "pod-b", events)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(a.elector)
        await event(a.elector.leading)
        await stack.enter_async_context(b.elector)
        await until(lambda: b.elector.leader == "pod-a", within=WAIT, message="b sees a lead")
        held = kube.objects.get("leases", "agent", namespace=NS)
        assert held["spec"]["holderIdentity"] == "pod-a"
        assert held["spec"]["leaseTransitions"] == 0
        assert not b.elector.leading.is_set()
        # a renews: renewTime moves, acquireTime stays
        renewed = held["spec"]["renewTime"]
        await until(
            lambda: (
                kube.objects.get("leases", "agent", namespace=NS)["spec"]["renewTime"] != renewed
            ),
            within=WAIT,
            message="a renews",
        )
        now = kube.objects.get("leases", "agent", namespace=NS)["spec"]
        assert now["acquireTime"] == held["spec"]["acquireTime"]
        stopped = time.monotonic()
        await a.elector.__aexit__(None, None, None)  # a clean stop releases the Lease
        await event(b.elector.leading)
        took = time.monotonic() - stopped
        assert took < TIMING.lease_duration  # released: no wait for the lease to expire
        spec = kube.objects.get("leases", "agent", namespace=NS)["spec"]
        assert spec["holderIdentity"] == "pod-b"
        assert spec["leaseTransitions"] == 1
        assert not a.lost.is_set()


async def test_a_leader_that_cannot_renew_stops_before_another_takes_over(
    client: KubeClient, kube: KubeApiServer
) -> None:
    events: list[tuple[float, str]] = []
    a, b = Replica(client, "pod-a", events), Replica(client, "pod-b", events)
    async with a.elector, b.elector:
        await until(
            lambda: a.elector.leading.is_set() or b.elector.leading.is_set(),
            within=WAIT,
            message="a leader",
        )
        leader, standby = (a, b) if a.elector.leading.is_set() else (b, a)
        # The leader's writes now fail (an API server refusing it, say); the standby's reads
        # still work, so it takes over once the lease expired on its clock.
        kube.faults.add(FaultRule("PUT leases", status=500))
        await event(leader.lost)
        kube.faults.clear()
        await event(standby.elector.leading)
        assert not leader.elector.leading.is_set()
    lost_at = next(t for t, e in events if e.startswith(f"{leader.identity} lost"))
    led_at = next(t for t, e in events if e == f"{standby.identity} leader")
    assert lost_at < led_at
    reason = next(e for _, e in events if e.startswith(f"{leader.identity} lost"))
    assert "no renewal succeeded within 1s" in reason


async def test_conflicting_writes_leave_one_leader(client: KubeClient, kube: KubeApiServer) -> None:
    events: list[tuple[float, str]] = []
    replicas = [Replica(client, f"pod-{i}", events) for i in range(4)]
    async with AsyncExitStack() as stack:
        for r in replicas:
            await stack.enter_async_context(r.elector)
        await until(
            lambda: any(r.elector.leading.is_set() for r in replicas),
            within=WAIT,
            message="a leader",
        )
        for _ in range(30):  # a dozen renewals: never a second leader
            assert sum(r.elector.leading.is_set() for r in replicas) == 1
            await asyncio.sleep(TIMING.retry_period / 2)
        holder = kube.objects.get("leases", "agent", namespace=NS)["spec"]["holderIdentity"]
        assert [r.identity for r in replicas if r.elector.leading.is_set()] == [holder]
