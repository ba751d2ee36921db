"""The sandbox against the real cluster, field by field (issue 27 item 4): every scenario of
`scenarios.py` played through the API on an in-process sandbox (API server and simulated
cluster on the wall clock) and on the real control plane at once, their end states compared
(`compare.py`). A difference that `differences.KNOWN` does not explain fails the test: fix the
sandbox, or list it there with the reason it stays (docs/sandbox.md shows that list).

Real tier only: the sandbox side is in this process whatever the tier.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from launch_agent.realcluster.kubehttp import ApiError, Credentials, KubeHTTP
from launch_agent.sandbox.cluster import RealClock, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from tests.cluster import scenarios
from tests.cluster.compare import Difference, Scenario, Side, run_both
from tests.cluster.conftest import CRDS, NODES, RealBackend
from tests.cluster.differences import stale, unexplained
from tests.cluster.world import delete_namespace, wait_for_service_account

pytestmark = pytest.mark.real_only

Sides = Callable[[Scenario], Awaitable[tuple[Side, Side]]]


@contextlib.asynccontextmanager
async def both(backend: RealBackend) -> AsyncIterator[Sides]:
    """A sandbox of its own and the session's real cluster; per scenario, one namespace of
    the same name on each, deleted (with what the scenario made cluster-wide) afterwards."""
    made: list[Side] = []
    async with (
        KubeApiServer(host="127.0.0.1", port=0) as kube,
        SimulatedCluster(kube, clock=RealClock(), nodes=NODES, kueue=True),
        KubeHTTP(Credentials(kube.url)) as sandbox_http,
        KubeHTTP(backend.credentials()) as real_http,
    ):
        await kube.load_crds_from(CRDS)

        async def sides(scenario: Scenario) -> tuple[Side, Side]:
            namespace = f"cmp-{scenario.name}-{uuid.uuid4().hex[:6]}"
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
            pair = Side("sandbox", sandbox_http, namespace), Side("real", real_http, namespace)
            for side in pair:
                await side.http.create("/api/v1/namespaces", body)
                made.append(side)
            await wait_for_service_account(real_http, namespace)
            return pair

        try:
            yield sides
        finally:
            for side in made:
                if side.tier == "real":
                    for path in side.cleanup:
                        with contextlib.suppress(ApiError):
                            await side.http.delete(path)
                    await delete_namespace(side.http, side.namespace)


def report(found: list[Difference]) -> str:
    return (
        f"{len(found)} difference(s) between the sandbox and the real cluster that"
        " tests/cluster/differences.py does not explain (fix the sandbox, or list each with"
        " why it stays):\n" + "\n".join(str(d) for d in found)
    )


async def compare(backend: RealBackend, group: list[Scenario]) -> None:
    async with both(backend) as sides:
        found = await run_both(group, sides)
    left = unexplained(found)
    assert not left, report(left)
    gone = stale([s.name for s in group], found)
    assert not gone, f"known differences no longer found (remove them): {gone}"


async def test_job_controller_matches(backend: RealBackend) -> None:
    await compare(backend, scenarios.JOBS)


async def test_scheduler_and_admission_match(backend: RealBackend) -> None:
    await compare(backend, scenarios.ADMISSION)


async def test_kueue_matches(backend: RealBackend) -> None:
    await compare(backend, scenarios.KUEUE_SCENARIOS)
