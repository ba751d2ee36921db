"""MultiKueue on the real tier: `multi`, a manager and two worker clusters started once per session
by `launch-agent cluster up --workers 2` in a process of its own, and `mworld`, a namespace with
its queues on all three, a W&B server and a queue-spec folder per test.

Real tier only: the sandbox has no MultiKueue (no second API server, no MultiKueue controller),
so these tests are collected only with `--cluster=real` (`make test-cluster`); under the
default `--cluster=sandbox` this folder is not collected at all rather than passing untested.

`LAUNCH_AGENT_TEST_MULTI_DIR=DIR` reuses a setup already up (`launch-agent cluster up --workers 2
--worker-lost-timeout 20s --dir DIR`), for working on the tests. `LAUNCH_AGENT_TEST_MULTI_ADDONS`
(comma-separated) names the controllers the session starts on each cluster; the default,
`MULTI_ADDONS`, is what the tests need, since every add-on costs its start on three clusters.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from launch_agent.realcluster.kubehttp import KubeHTTP, path_of
from launch_agent.realcluster.multicluster import credentials_of, ensure_queues
from launch_agent.realcluster.nodes import script_outcome
from launch_agent.sandbox.wandb import LaunchState, WandbServer
from tests.cluster.multi.multiworld import (
    Control,
    MultiWorld,
    delete_namespace,
    wait_default_service_account,
)
from tests.cluster.world import until

WORKERS = ("worker-1", "worker-2")
# Short, so a lost worker is given up within a test (Kueue's default is 15 minutes).
WORKER_LOST_TIMEOUT = "20s"
MULTI_ADDONS = ("jobset", "trainer", "kueue")
START_WITHIN = 1200.0
API_KEY_SECRET = "wandb-api-key-tier-agent"  # the agent's default for agent_name tier-agent


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if config.getoption("--cluster") != "real" and collection_path.name.startswith("test_"):
        return True  # the sandbox has no MultiKueue: these run with --cluster=real only
    return None


@dataclass(frozen=True)
class MultiBackend:
    directory: Path

    def env(self) -> dict[str, str]:
        lines = (self.directory / "cluster.env").read_text().split()
        return dict(line.split("=", 1) for line in lines)

    @property
    def addons(self) -> list[str]:
        return [p.name for p in (self.directory / "manager" / "addons").iterdir() if p.is_dir()]

    def control(self) -> Control | None:
        env = self.env()
        if "LAUNCH_CLUSTER_CONTROL" not in env:
            return None  # an older `cluster up`: the fault tests say so
        return Control(env["LAUNCH_CLUSTER_CONTROL"], env["LAUNCH_CLUSTER_CONTROL_TOKEN"])


@pytest.fixture(scope="session")
def multi(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiBackend]:
    running = os.environ.get("LAUNCH_AGENT_TEST_MULTI_DIR")
    if running:
        yield MultiBackend(Path(running))
        return
    directory = tmp_path_factory.mktemp("multi-cluster")
    addons = os.environ.get("LAUNCH_AGENT_TEST_MULTI_ADDONS", ",".join(MULTI_ADDONS)).split(",")
    command = [
        sys.executable,
        "-m",
        "launch_agent.cli",
        "cluster",
        "up",
        "--dir",
        str(directory),
        "--workers",
        str(len(WORKERS)),
        "--worker-lost-timeout",
        WORKER_LOST_TIMEOUT,
        "--nodes",
        "1",
        *(f"--addon={a}" for a in addons if a),
    ]
    with (directory / "cluster-up.log").open("wb") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_WITHIN
        while not (directory / "cluster.env").exists():
            if process.poll() is not None or time.monotonic() > deadline:
                process.kill()
                text = (directory / "cluster-up.log").read_text(errors="replace")[-4000:]
                raise RuntimeError(f"launch-agent cluster up --workers did not start:\n{text}")
            time.sleep(1)
        try:
            yield MultiBackend(directory)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def all_active(manager: KubeHTTP, workers: Sequence[str]) -> bool:
    """Whether Kueue says each worker's MultiKueueCluster is Active."""
    for worker in workers:
        got = await manager.find(f"/apis/kueue.x-k8s.io/v1beta2/multikueueclusters/{worker}")
        conditions = ((got or {}).get("status") or {}).get("conditions") or []
        if not any(c.get("type") == "Active" and c.get("status") == "True" for c in conditions):
            return False
    return True


@pytest.fixture
async def mworld(multi: MultiBackend, tmp_path: Path) -> AsyncIterator[MultiWorld]:
    """A namespace with LocalQueue `lq` on the manager and both workers (`ensure_queues`),
    each worker with 2 CPUs of quota so that runs of 1 CPU spread over both."""
    state = LaunchState(entity="ent", lease_seconds=5)
    state.add_queue("q1")
    namespace = f"m-{uuid.uuid4().hex[:10]}"
    specs = tmp_path / "specs"
    specs.mkdir()
    creds = [
        await asyncio.to_thread(credentials_of, multi.directory / name)
        for name in ("manager", *WORKERS)
    ]
    async with (
        WandbServer(state) as wandb,
        KubeHTTP(creds[0]) as manager,
        KubeHTTP(creds[1]) as w1,
        KubeHTTP(creds[2]) as w2,
    ):
        workers = dict(zip(WORKERS, (w1, w2), strict=True))
        await ensure_queues(
            manager,
            [w1, w2],
            namespace,
            cluster_queue=f"cq-{namespace}",
            quota={"cpu": "2", "memory": "16Gi"},
        )
        for http in (manager, w1, w2):
            await wait_default_service_account(http, namespace)
        for http in (w1, w2):
            # What an admin creates on each worker (docs/multicluster.md): the agent writes
            # only on the manager, and the run pods MultiKueue places here read their key here.
            await http.create(
                path_of("v1", "secrets", namespace),
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": API_KEY_SECRET, "namespace": namespace},
                    "stringData": {"password": wandb.api_key},
                },
            )

        # Every worker one MultiKueue dispatches to: a test before may have stopped one
        # (test_chaos, test_faults), and MultiKueue nominates only the workers active when a
        # run comes, so a run would otherwise land where the test does not expect it.
        await until(
            lambda: all_active(manager, WORKERS),
            within=120,
            message=f"{', '.join(WORKERS)} active in MultiKueue",
        )

        async def script(selector: str, outcome: str) -> None:
            # The pods run on whichever worker admits the run: script it everywhere.
            for http in workers.values():
                await script_outcome(http, f"{time.time_ns():020d}", selector, outcome)

        world = MultiWorld(
            "real",
            manager,
            multi.directory / "manager" / "admin.kubeconfig",
            namespace,
            wandb,
            specs,
            script,
            workers=workers,
            worker_kubeconfigs={w: multi.directory / w / "admin.kubeconfig" for w in WORKERS},
            control=multi.control(),
        )
        try:
            yield world
        finally:
            for http in (manager, w1, w2):
                await delete_namespace(http, namespace)
