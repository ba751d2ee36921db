"""A MultiKueue setup on loopback: one manager cluster and N workers, each a `RealCluster` of
its own (etcd, API server, controllers), as Kueue's "Setup MultiKueue" describes it.

- **Workers** (`worker-1` ... `worker-N`) run Kueue and the workload controllers, with
  simulated nodes; they run the jobs.
- **The manager** runs Kueue with MultiKueue and the workload CRDs (and their controllers,
  which leave alone what `managedBy: kueue.x-k8s.io/multikueue` marks), and no nodes: nothing
  runs there. On it, in `kueue-system`: a Secret per worker holding the worker's kubeconfig
  under the key `kubeconfig`, a `MultiKueueCluster` per worker naming that Secret, one
  `MultiKueueConfig` listing them, and the `AdmissionCheck` whose controller is
  `kueue.x-k8s.io/multikueue` (Kueue's `site/content/en/docs/tasks/manage/setup_multikueue.md`).
- `queue(...)` writes what each run queue needs: the same namespace, ResourceFlavor,
  ClusterQueue and LocalQueue on every cluster, the manager's ClusterQueue listing the
  admission check. The manager's quota is the workers' sum, as the docs advise.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import yaml

from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.cluster import DEFAULT_NODES, RealCluster
from launch_agent.realcluster.kubehttp import ApiError, Credentials, KubeHTTP, Obj
from launch_agent.sandbox.cluster.nodes import Node

KUEUE = "/apis/kueue.x-k8s.io/v1beta2"
ADMISSION_CHECK = "multikueue"
CONFIG = "multikueue-config"
CONTROLLER = "kueue.x-k8s.io/multikueue"
MANAGED_BY = "kueue.x-k8s.io/multikueue"


def manager_config(worker_lost_timeout: str, gc_interval: str = "30s") -> str:
    """The manager's Kueue `Configuration` fields for MultiKueue."""
    return (
        "multiKueue:\n"
        f"  gcInterval: {gc_interval}\n"
        "  origin: multikueue\n"
        f"  workerLostTimeout: {worker_lost_timeout}\n"
    )


class MultiCluster:
    def __init__(
        self,
        directory: Path,
        *,
        workers: int,
        addons: Sequence[str] = ("kueue",),
        bins: Binaries | None = None,
        default_outcome: str = "succeed after=5s",
        worker_lost_timeout: str = "15m",
        nodes_per_worker: int = 1,
    ) -> None:
        bins = bins or Binaries.find()
        self.directory = directory
        self.manager = RealCluster(
            directory / "manager",
            name="manager",
            nodes=(),
            addons=addons,
            bins=bins,
            kueue_config=manager_config(worker_lost_timeout),
        )
        template = DEFAULT_NODES[0]
        self.workers = [
            RealCluster(
                directory / f"worker-{i}",
                name=f"worker-{i}",
                nodes=[
                    Node(f"worker-{i}-node-{n}", dict(template.allocatable), dict(template.labels))
                    for n in range(1, nodes_per_worker + 1)
                ],
                addons=addons,
                bins=bins,
                default_outcome=default_outcome,
            )
            for i in range(1, workers + 1)
        ]

    @property
    def clusters(self) -> list[RealCluster]:
        return [self.manager, *self.workers]

    def worker(self, name: str) -> RealCluster:
        return next(w for w in self.workers if w.name == name)

    async def __aenter__(self) -> MultiCluster:
        try:
            # One after the other: on two cores, starting several API servers at once only
            # makes each slower to become ready.
            for cluster in self.clusters:
                await cluster.__aenter__()
            await self._connect()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def stop(self) -> None:
        for cluster in reversed(self.clusters):
            await cluster.stop()

    async def _connect(self) -> None:
        http = self.manager.http
        secrets = "/api/v1/namespaces/kueue-system/secrets"
        for worker in self.workers:
            config = worker.kubeconfig.read_bytes()
            await http.ensure(
                secrets,
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": f"{worker.name}-kubeconfig", "namespace": "kueue-system"},
                    "data": {"kubeconfig": base64.b64encode(config).decode()},
                },
            )
            await http.ensure(
                f"{KUEUE}/multikueueclusters",
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "MultiKueueCluster",
                    "metadata": {"name": worker.name},
                    "spec": {
                        "clusterSource": {
                            "kubeConfig": {
                                "locationType": "Secret",
                                "location": f"{worker.name}-kubeconfig",
                            }
                        }
                    },
                },
            )
        await http.ensure(
            f"{KUEUE}/multikueueconfigs",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "MultiKueueConfig",
                "metadata": {"name": CONFIG},
                "spec": {"clusters": [w.name for w in self.workers]},
            },
        )
        await http.ensure(
            f"{KUEUE}/admissionchecks",
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": ADMISSION_CHECK},
                "spec": {
                    "controllerName": CONTROLLER,
                    "parameters": {
                        "apiGroup": "kueue.x-k8s.io",
                        "kind": "MultiKueueConfig",
                        "name": CONFIG,
                    },
                },
            },
        )
        await self.wait_connected()

    async def wait_connected(self, within: float = 120.0) -> None:
        """Until Kueue says every worker is Active and the admission check is too."""
        http = self.manager.http
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        while True:
            pending = []
            for worker in self.workers:
                got = await http.find(f"{KUEUE}/multikueueclusters/{worker.name}")
                if not _active(got):
                    pending.append(worker.name)
            if not _active(await http.find(f"{KUEUE}/admissionchecks/{ADMISSION_CHECK}")):
                pending.append(f"admissioncheck {ADMISSION_CHECK}")
            if not pending:
                return
            if loop.time() > deadline:
                raise TimeoutError(f"MultiKueue not active within {within:.0f} s: {pending}")
            await asyncio.sleep(0.5)

    async def queue(
        self,
        namespace: str,
        *,
        local_queue: str = "lq",
        cluster_queue: str = "cq",
        quota: Mapping[str, str] | None = None,
    ) -> None:
        """The namespace, flavor and queues on every cluster (`ensure_queues`)."""
        await ensure_queues(
            self.manager.http,
            [w.http for w in self.workers],
            namespace,
            local_queue=local_queue,
            cluster_queue=cluster_queue,
            quota=quota,
        )


async def ensure_queues(
    manager: KubeHTTP,
    workers: Sequence[KubeHTTP],
    namespace: str,
    *,
    local_queue: str = "lq",
    cluster_queue: str = "cq",
    quota: Mapping[str, str] | None = None,
) -> None:
    """The namespace, flavor and queues on the manager and every worker; the manager's
    ClusterQueue carries the MultiKueue admission check and the workers' summed quota, as
    Kueue's "Setup MultiKueue" advises. For a process that does not run the clusters (tests,
    the demo) as much as for `MultiCluster.queue`."""
    quota = dict(quota or {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": "8"})
    for http in (manager, *workers):
        factor = len(workers) if http is manager else 1
        await ensure_queue(
            http,
            namespace,
            local_queue=local_queue,
            cluster_queue=cluster_queue,
            quota={k: _times(v, factor) for k, v in quota.items()},
            checks=[ADMISSION_CHECK] if http is manager else [],
        )


def credentials_of(directory: Path) -> Credentials:
    """The admin's credentials of one cluster `cluster up` started in `directory` (the
    manager's or a worker's folder): its kubeconfig's server and the PKI beside it."""
    config = yaml.safe_load((directory / "admin.kubeconfig").read_text())
    server = config["clusters"][0]["cluster"]["server"]
    pki = directory / "pki"
    return Credentials(server, pki / "ca.crt", pki / "admin.crt", pki / "admin.key")


def _active(obj: Obj | None) -> bool:
    status = (obj or {}).get("status") or {}
    return any(
        c.get("type") == "Active" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def _times(quantity: str, factor: int) -> str:
    digits = quantity.rstrip("KMGTPEikmgtpe")
    return f"{int(digits) * factor}{quantity[len(digits) :]}" if digits.isdigit() else quantity


async def ensure_queue(
    http: KubeHTTP,
    namespace: str,
    *,
    local_queue: str,
    cluster_queue: str,
    quota: Mapping[str, str],
    checks: Sequence[str] = (),
) -> None:
    """The namespace, the ResourceFlavor `default-flavor`, a ClusterQueue of `quota` with the
    admission `checks`, and a LocalQueue pointing at it, on one cluster (created if missing)."""
    try:
        await http.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        )
    except ApiError as exc:
        if exc.status != 409:
            raise
    await http.ensure(
        f"{KUEUE}/resourceflavors",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "default-flavor"},
        },
    )
    spec: dict[str, object] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": list(quota),
                "flavors": [
                    {
                        "name": "default-flavor",
                        "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()],
                    }
                ],
            }
        ],
    }
    if checks:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": c} for c in checks]}
    await http.ensure(
        f"{KUEUE}/clusterqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": spec,
        },
    )
    await http.ensure(
        f"{KUEUE}/namespaces/{namespace}/localqueues",
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": local_queue, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        },
    )
