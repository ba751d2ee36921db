"""The real-cluster tier's node simulator (`realcluster/nodes.py`) against a loaded API server.

The simulator plays each bound pod in a local mirror and carries the kubelet's writes to the API
server. A write the server failed (a 503 or 429 of a loaded kube-apiserver, a timeout) used to
be logged and dropped: the mirror already held the new status, so it was never sent again and
the pod stayed Running on the server, with its Job never failing. A real kubelet re-syncs every
pod whose status differs from the API server's. A watch cut mid-stream ended the simulator
altogether. Here the sandbox's API server stands in for
kube-apiserver (the simulator speaks plain REST to either), with the faults scripted.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from launch_agent.realcluster.kubehttp import Credentials, KubeHTTP
from launch_agent.realcluster.nodes import NodeSimulator
from launch_agent.sandbox.cluster.nodes import Node
from launch_agent.sandbox.cluster.outcomes import ANNOTATION
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.kube import KubeApiServer

NODE = "sim-node-1"


def pod(name: str, outcome: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": {ANNOTATION: outcome}},
        "spec": {
            "nodeName": NODE,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        },
    }


async def test_a_pod_status_the_server_failed_to_take_is_sent_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with KubeApiServer() as kube, KubeHTTP(Credentials(server=kube.url)) as http:
        sim = NodeSimulator(
            http,
            [Node(NODE, {"cpu": "8", "memory": "32Gi", "pods": "110"})],
            # For the log server, which this test does not start.
            server_cert=(Path("unused.crt"), Path("unused.key")),
            client_ca=Path("unused-ca.crt"),
        )
        # Every status write of the pod's first few fails, the one that ends it included.
        rule = kube.faults.add(FaultRule("PATCH pods/status", status=503, times=3))
        runner = asyncio.create_task(sim.run(), name="node simulator")
        try:
            await http.create("/api/v1/namespaces/default/pods", pod("p", "exit code=3 after=1s"))
            deadline = time.monotonic() + 20
            while True:
                got = await http.get("/api/v1/namespaces/default/pods/p")
                status = got.get("status") or {}
                if status.get("phase") == "Failed":
                    break
                assert time.monotonic() < deadline, f"the pod never failed on the server: {status}"
                await asyncio.sleep(0.1)
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
    assert rule.fired == 3
    assert sim.stats["write_retries"] >= 1, sim.stats
    # Said once while it fails and once when it is taken, not at every retry.
    said = [r.getMessage() for r in caplog.records if "pod default/p" in r.getMessage()]
    assert len(said) == 2, said
    assert "failed, retrying until it is taken: HTTP 503" in said[0], said
    assert said[1].endswith("taken after 3 failure(s)"), said
    [container] = status["containerStatuses"]
    assert container["state"]["terminated"]["exitCode"] == 3


async def test_a_watch_cut_mid_stream_does_not_stop_the_simulator() -> None:
    """An API server stopped under a watch cuts its chunked stream (aiohttp's
    `ClientPayloadError`, not an OSError): that ended the simulator's every task, and no pod of
    that cluster moved again."""
    async with KubeApiServer() as kube, KubeHTTP(Credentials(server=kube.url)) as http:
        sim = NodeSimulator(
            http,
            [Node(NODE, {"cpu": "8", "memory": "32Gi", "pods": "110"})],
            server_cert=(Path("unused.crt"), Path("unused.key")),
            client_ca=Path("unused-ca.crt"),
        )
        cuts = [
            kube.faults.add(FaultRule(f"WATCH {plural}", drop=True, after_events=1, times=1))
            for plural in ("pods", "configmaps")
        ]
        runner = asyncio.create_task(sim.run(), name="node simulator")
        try:
            for name in ("cm-1", "cm-2"):
                await http.create(
                    "/api/v1/namespaces/default/configmaps",
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
                )
            for name in ("p-1", "p-2"):
                await http.create(
                    "/api/v1/namespaces/default/pods", pod(name, "exit code=0 after=0s")
                )
            deadline = time.monotonic() + 20
            while True:
                assert not runner.done(), runner.exception()
                got = await http.get("/api/v1/namespaces/default/pods")
                phases = sorted((p.get("status") or {}).get("phase", "") for p in got["items"])
                if phases == ["Succeeded", "Succeeded"] and all(c.fired for c in cuts):
                    break
                assert time.monotonic() < deadline, (phases, [c.fired for c in cuts])
                await asyncio.sleep(0.1)
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner


async def test_a_pod_the_simulator_first_sees_in_a_list_is_played() -> None:
    """What a (re)list brings: kube-apiserver's list items carry no apiVersion or kind, and a
    pod mirrored from one failed every pass of the simulator (`KeyError: 'apiVersion'`) after a
    worker's API server came back in the chaos bench. A pod there before the simulator starts
    arrives the same way."""
    async with KubeApiServer() as kube, KubeHTTP(Credentials(server=kube.url)) as http:
        await http.create("/api/v1/namespaces/default/pods", pod("early", "exit code=0 after=0s"))
        sim = NodeSimulator(
            http,
            [Node(NODE, {"cpu": "8", "memory": "32Gi", "pods": "110"})],
            server_cert=(Path("unused.crt"), Path("unused.key")),
            client_ca=Path("unused-ca.crt"),
        )
        runner = asyncio.create_task(sim.run(), name="node simulator")
        try:
            deadline = time.monotonic() + 20
            while True:
                got = await http.get("/api/v1/namespaces/default/pods/early")
                if (got.get("status") or {}).get("phase") == "Succeeded":
                    break
                assert time.monotonic() < deadline, (got.get("status"), sim.stats)
                await asyncio.sleep(0.1)
        finally:
            runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await runner
    assert sim.stats["pass_errors"] == 0, sim.stats
