"""The `world` fixture: a fresh namespace, W&B server and queue-spec folder on the tier that
`--cluster` names (`sandbox`, the default and `make test`'s, or `real`, `make test-cluster`'s).

The real cluster is started once per session by `launch-agent cluster up` in a process of its
own (about 20 s, plus the controllers), so the tests do not share an event loop with it; each
test gets its own namespace there, deleted afterwards. The sandbox is made anew per test.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from launch_agent.realcluster import etcd
from launch_agent.realcluster.kubehttp import Credentials, KubeHTTP
from launch_agent.sandbox.cluster import RealClock, SimulatedCluster
from launch_agent.sandbox.cluster.nodes import Node
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.wandb import LaunchState, WandbServer
from tests.cluster.world import World, delete_namespace, wait_for_service_account

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "fixtures" / "crds"
START_WITHIN = 600.0
# The same capacity on both tiers: two nodes like `cluster up`'s.
NODES = [
    Node(
        f"sim-node-{i}",
        {"cpu": "64", "memory": "256Gi", "pods": "1000", "nvidia.com/gpu": "8"},
        {"node.kubernetes.io/instance-type": "sim-gpu"},
    )
    for i in (1, 2)
]


@dataclass(frozen=True)
class RealBackend:
    directory: Path
    process: subprocess.Popen[bytes] | None

    def _env(self) -> dict[str, str]:
        lines = (self.directory / "cluster.env").read_text().split()
        return dict(line.split("=", 1) for line in lines)

    @property
    def kubeconfig(self) -> Path:
        return Path(self._env()["KUBECONFIG"])

    @property
    def etcd_url(self) -> str:
        url = self._env().get("ETCDCTL_ENDPOINTS")
        if not url:
            raise RuntimeError(
                f"{self.directory / 'cluster.env'} names no ETCDCTL_ENDPOINTS: the cluster was"
                " started by an older `launch-agent cluster up`; start it again"
            )
        return url

    def credentials(self) -> Credentials:
        pki = self.directory / "pki"
        config = yaml.safe_load(self.kubeconfig.read_text())
        server = config["clusters"][0]["cluster"]["server"]
        return Credentials(server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")


@pytest.fixture(scope="session")
def tier(request: pytest.FixtureRequest) -> str:
    return str(request.config.getoption("--cluster"))


@pytest.fixture(scope="session")
def real_backend(tier: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealBackend]:
    if tier != "real":
        raise pytest.UsageError("real_backend is used only with --cluster=real")
    running = os.environ.get("LAUNCH_AGENT_TEST_CLUSTER_DIR")
    if running:
        # A cluster already up (`launch-agent cluster up --dir DIR`), for working on the tests.
        yield RealBackend(Path(running), None)
        return
    directory = tmp_path_factory.mktemp("real-cluster")
    log = (directory / "cluster-up.log").open("wb")
    command = [sys.executable, "-m", "launch_agent.cli", "cluster", "up", "--dir", str(directory)]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + START_WITHIN
    while not (directory / "cluster.env").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            text = (directory / "cluster-up.log").read_text(errors="replace")[-4000:]
            raise RuntimeError(f"launch-agent cluster up did not start:\n{text}")
        time.sleep(0.5)
    try:
        yield RealBackend(directory, process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


async def _real_world(
    backend: RealBackend, tmp_path: Path, wandb: WandbServer
) -> AsyncIterator[World]:
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    async with KubeHTTP(backend.credentials()) as http:
        await http.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
        await wait_for_service_account(http, namespace)

        async def script(selector: str, outcome: str) -> None:
            from launch_agent.realcluster.nodes import script_outcome

            await script_outcome(http, f"{time.time_ns():020d}", selector, outcome)

        async def compact() -> None:
            await etcd.compact(backend.etcd_url)

        try:
            yield World(
                "real",
                http,
                backend.kubeconfig,
                namespace,
                wandb,
                _specs(tmp_path),
                script,
                compact=compact,
            )
        finally:
            await delete_namespace(http, namespace)


async def _sandbox_world(tmp_path: Path, wandb: WandbServer) -> AsyncIterator[World]:
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    async with (
        KubeApiServer(host="127.0.0.1", port=0) as kube,
        SimulatedCluster(kube, clock=RealClock(), nodes=NODES, kueue=True) as cluster,
    ):
        await kube.load_crds_from(CRDS)
        kube.objects.create(
            "namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            "",
        )
        kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url)

        async def script(selector: str, outcome: str) -> None:
            cluster.script(selector, outcome)

        async def compact() -> None:
            kube.compact()

        async with KubeHTTP(Credentials(kube.url)) as http:
            yield World(
                "sandbox",
                http,
                kubeconfig,
                namespace,
                wandb,
                _specs(tmp_path),
                script,
                compact=compact,
            )


def _specs(tmp_path: Path) -> Path:
    specs = tmp_path / "specs"
    specs.mkdir(exist_ok=True)
    return specs


@pytest.fixture
def backend(request: pytest.FixtureRequest, tier: str) -> RealBackend | None:
    # A sync fixture, so the first test's wait for `cluster up` (tens of seconds of polling)
    # runs before the test's loop does, not inside an async fixture's callback.
    return request.getfixturevalue("real_backend") if tier == "real" else None


@pytest.fixture
async def world(backend: RealBackend | None, tmp_path: Path) -> AsyncIterator[World]:
    state = LaunchState(entity="ent", lease_seconds=5)
    state.add_queue("q1")
    async with WandbServer(state) as wandb:
        if backend is not None:
            async for w in _real_world(backend, tmp_path, wandb):
                yield w
        else:
            async for w in _sandbox_world(tmp_path, wandb):
                yield w


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # Every test of this folder runs on both tiers, and is what `-m cluster` selects; a test
    # marked `real_only` (what the sandbox does not have: RBAC, API priority and fairness) is
    # deselected on the sandbox tier, so it is counted as not run rather than passed.
    here = Path(__file__).parent
    real = config.getoption("--cluster") == "real"
    deselected = []
    for item in items:
        if Path(str(item.fspath)).is_relative_to(here):
            item.add_marker(pytest.mark.cluster)
            if not real and item.get_closest_marker("real_only") is not None:
                deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if item not in deselected]
