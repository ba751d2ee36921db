"""The real-cluster tier as the demo's stage (`launch-agent demo --cluster real [--workers N]`).

`RealWorld` starts what `launch-agent cluster up` starts (`realcluster/setup.py`: the upstream
control plane, the built workload controllers, simulated nodes; with `workers` a MultiKueue
manager and N workers) and the sandbox's W&B Launch server, all in this process and on
loopback, and prepares what an admin would before runs arrive: the queue specs' namespaces
(and their `default` ServiceAccount, without which admission refuses pods), the Kueue queues,
and for MultiKueue the queues on every cluster and the W&B API-key Secret on every worker (the
agent writes only on the manager).

Runs are scripted through the node simulator's ConfigMap (`realcluster/nodes.py`
`script_outcome`) on every cluster that has nodes, so whichever worker takes a run plays it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from launch_agent.demo.runner import AGENT_NAME, Workload
from launch_agent.demo.scenario import KueueQueue
from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.cluster import RealCluster
from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from launch_agent.realcluster.multicluster import MultiCluster, ensure_queue, ensure_queues
from launch_agent.realcluster.setup import build, clusters_of, main_cluster
from launch_agent.sandbox.wandb import LaunchState, WandbServer

SERVICE_ACCOUNT_WITHIN = 90.0


@dataclass(frozen=True)
class RealSettings:
    entity: str
    queues: tuple[str, ...]
    namespaces: tuple[str, ...]
    addons: tuple[str, ...]
    workers: int = 0
    kueue_queues: tuple[KueueQueue, ...] = ()
    default_outcome: str = "succeed after=2s"
    # The Secret the run pods read WANDB_API_KEY from (`AgentConfig.api_key_secret_name`):
    # the agent makes it on its own cluster, the admin on each MultiKueue worker.
    api_key_secret: str = f"wandb-api-key-{AGENT_NAME}"


class RealWorld:
    """`async with RealWorld(directory, settings, bins) as world:` everything is up."""

    def __init__(self, directory: Path, settings: RealSettings, bins: Binaries) -> None:
        self.directory = directory
        self.settings = settings
        self.bins = bins
        self.state = LaunchState(entity=settings.entity)
        for name in settings.queues:
            self.state.add_queue(name)
        self.wandb = WandbServer(self.state)
        # One node per worker keeps three clusters affordable on a small machine; one cluster
        # gets `cluster up`'s two.
        self.cluster = build(
            directory,
            bins=bins,
            addons=settings.addons,
            workers=settings.workers,
            nodes=1 if settings.workers else 2,
            default_outcome=settings.default_outcome,
        )
        self.started_seconds = 0.0

    @property
    def main(self) -> RealCluster:
        return main_cluster(self.cluster)

    @property
    def kubeconfig(self) -> Path:
        return self.main.kubeconfig

    @property
    def workers(self) -> tuple[str, ...]:
        if isinstance(self.cluster, MultiCluster):
            return tuple(w.name for w in self.cluster.workers)
        return ()

    def _with_nodes(self) -> list[RealCluster]:
        return [c for c in clusters_of(self.cluster) if c.nodes]

    async def __aenter__(self) -> RealWorld:
        started = time.monotonic()
        await self.cluster.__aenter__()
        try:
            await self.wandb.__aenter__()
            try:
                await self._prepare()
            except BaseException:
                await self.wandb.__aexit__(None, None, None)
                raise
        except BaseException:
            await self.cluster.stop()
            raise
        self.started_seconds = time.monotonic() - started
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.wandb.__aexit__(exc_type, exc, tb)
        finally:
            await self.cluster.stop()

    async def _prepare(self) -> None:
        clusters = clusters_of(self.cluster)
        for namespace in self.settings.namespaces:
            for cluster in clusters:
                await _ensure_namespace(cluster.http, namespace)
        workers = [w.http for w in clusters if w is not self.main]
        for queue in self.settings.kueue_queues:
            if workers:
                await ensure_queues(
                    self.main.http,
                    workers,
                    queue.namespace,
                    local_queue=queue.name,
                    cluster_queue=queue.name,
                    quota=queue.quota,
                )
            else:
                await ensure_queue(
                    self.main.http,
                    queue.namespace,
                    local_queue=queue.name,
                    cluster_queue=queue.name,
                    quota=queue.quota,
                )
        for namespace in self.settings.namespaces:
            for cluster in clusters:
                await _wait_service_account(cluster.http, namespace)
            for http in workers:
                await http.ensure(
                    path_of("v1", "secrets", namespace),
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": self.settings.api_key_secret, "namespace": namespace},
                        "stringData": {"password": self.wandb.api_key},
                    },
                )

    def describe(self) -> list[str]:
        version = self.bins.describe("kube-apiserver")
        controllers = ", ".join(self.settings.addons) or "none"
        lines = [f"real cluster: {version}; controllers {controllers}"]
        if isinstance(self.cluster, MultiCluster):
            names = ", ".join(self.workers)
            lines.append(
                f"real cluster: MultiKueue manager {self.main.server} (no nodes), workers {names}"
                f" (one node each); up in {self.started_seconds:.1f} s"
            )
        else:
            nodes = ", ".join(n.name for n in self.main.nodes)
            lines.append(
                f"real cluster: API server {self.main.server}, nodes {nodes};"
                f" up in {self.started_seconds:.1f} s"
            )
        lines.append(
            f"real cluster: files and logs in {self.directory}; W&B {self.wandb.url};"
            f" namespaces {', '.join(self.settings.namespaces)}"
        )
        return lines

    async def script(self, selector: str, outcome: str) -> None:
        for cluster in self._with_nodes():
            await cluster.script(selector, outcome)

    async def leftovers(self, workload: Workload | None, selector: str) -> tuple[bool, int]:
        """The workload on the agent's cluster; the pods on every cluster (a worker's too)."""
        if workload is None:
            return False, 0
        left = await self.main.http.find(workload.path) is not None
        pods = 0
        for cluster in self._with_nodes():
            path = path_of("v1", "pods", workload.namespace)
            got = await cluster.http.get(path, labelSelector=selector)
            pods += len(got.get("items") or [])
        return left, pods

    def agent_settings(self) -> dict[str, Any]:
        """What the agent's configuration needs beyond the demo's defaults on this stage:
        with Kueue running, `quota.mode: kueue`, so W&B hears what Kueue says of a waiting
        run; with MultiKueue, read access to every worker."""
        settings: dict[str, Any] = {}
        if "kueue" in self.settings.addons:
            settings["quota"] = {"mode": "kueue", "max_pending_per_leaf": 20}
        if isinstance(self.cluster, MultiCluster):
            workers = [
                {"name": w.name, "kubeconfig": str(w.kubeconfig)} for w in self.cluster.workers
            ]
            settings["multikueue"] = {"workers": workers}
        return settings


async def _ensure_namespace(http: KubeHTTP, name: str) -> None:
    try:
        await http.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
    except ApiError as exc:
        if exc.status != 409:
            raise


async def _wait_service_account(http: KubeHTTP, namespace: str) -> None:
    """The service-account controller makes a new namespace's `default` ServiceAccount; the
    ServiceAccount admission plugin refuses pods until it exists."""
    path = path_of("v1", "serviceaccounts", namespace, "default")
    deadline = time.monotonic() + SERVICE_ACCOUNT_WITHIN
    while await http.find(path) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no ServiceAccount {namespace}/default after 90 s")
        await asyncio.sleep(0.2)
