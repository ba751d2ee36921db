"""The world a MultiKueue test runs the agent in: a manager and two worker clusters that
`launch-agent cluster up --workers 2` started (real tier only: the sandbox has no MultiKueue).

`MultiWorld` is a `World` (tests/cluster/world.py) whose cluster is the manager, where the agent
creates its workloads, plus what only this setup has: an admin's client for each worker
(`workers`), their kubeconfigs for the agent's `multikueue.workers`, and `control`, which stops,
starts and restarts a cluster's API server through `cluster up`'s loopback endpoint
(`launch_agent/realcluster/control.py`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from launch_agent.realcluster import kubeconfig
from launch_agent.realcluster.kubehttp import KubeHTTP, path_of
from tests.cluster.world import Obj, World, until

KUEUE = "kueue.x-k8s.io/v1beta2"


@dataclass(frozen=True)
class Control:
    """`cluster up`'s control endpoint (LAUNCH_CLUSTER_CONTROL, with its token)."""

    url: str
    token: str

    async def apiserver(self, cluster: str, action: str) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self.token}"}
        timeout = aiohttp.ClientTimeout(total=180)
        async with (
            aiohttp.ClientSession(timeout=timeout) as session,
            session.post(
                f"{self.url}/clusters/{cluster}/apiserver/{action}", headers=headers
            ) as resp,
        ):
            body: dict[str, Any] = await resp.json()
            if resp.status != 200:
                raise AssertionError(f"control {cluster} {action}: {resp.status} {body}")
            return body


@dataclass
class MultiWorld(World):
    workers: Mapping[str, KubeHTTP] = field(default_factory=dict)
    worker_kubeconfigs: Mapping[str, Path] = field(default_factory=dict)
    control: Control | None = None

    def config(self, **overrides: Any) -> Any:
        """The agent's configuration, reading every worker as its admin unless `multikueue`
        says otherwise."""
        overrides.setdefault(
            "multikueue",
            {
                "workers": [
                    {"name": name, "kubeconfig": str(path)}
                    for name, path in self.worker_kubeconfigs.items()
                ]
            },
        )
        overrides.setdefault("quota", {"mode": "kueue", "max_pending_per_leaf": 20})
        return super().config(**overrides)

    async def worker_objects(self, worker: str, api_version: str, plural: str) -> list[Obj]:
        got = await self.workers[worker].get(path_of(api_version, plural, self.namespace))
        return list(got.get("items") or [])

    async def workloads(self) -> list[Obj]:
        """The manager's Kueue Workloads in the test's namespace."""
        return await self.objects(KUEUE, "workloads")

    async def cluster_of(self, kind_plural: str, name: str, api_version: str) -> str | None:
        """The worker the manager's Workload of a workload is placed on (status.clusterName)."""
        for wl in await self.workloads():
            owners = wl["metadata"].get("ownerReferences") or []
            if any(o.get("name") == name for o in owners):
                return (wl.get("status") or {}).get("clusterName")
        return None


async def wait_default_service_account(http: KubeHTTP, namespace: str) -> None:
    path = path_of("v1", "serviceaccounts", namespace, "default")
    await until(lambda: http.find(path), within=90, message=f"serviceaccount {namespace}/default")


async def delete_namespace(http: KubeHTTP, namespace: str) -> None:
    with contextlib.suppress(Exception):
        await http.delete(path_of("v1", "namespaces", name=namespace))


RBAC_MANIFEST = (
    Path(__file__).resolve().parents[3]
    / "charts"
    / "launch-agent"
    / "files"
    / "multikueue-worker-rbac.yaml"
)
PLURALS = {
    "Namespace": "namespaces",
    "ServiceAccount": "serviceaccounts",
    "Secret": "secrets",
    "ClusterRole": "clusterroles",
    "RoleBinding": "rolebindings",
}


async def reader_kubeconfig(
    world: MultiWorld, worker: str, directory: Path, *, rbac: bool = True
) -> Path:
    """A kubeconfig for the worker's `launch-agent-reader` ServiceAccount, made as
    docs/multicluster.md tells an admin: the chart's worker RBAC manifest applied with its
    names edited for this namespace (`rbac=False`: the ServiceAccount and its token only, so
    the agent is refused)."""
    text = await asyncio.to_thread(RBAC_MANIFEST.read_text)
    text = (
        text.replace("namespace: launch-agent\n", f"namespace: {world.namespace}\n")
        .replace("name: launch-agent\n", f"name: {world.namespace}\n")
        .replace("namespace: team-a\n", f"namespace: {world.namespace}\n")
        .replace("wandb-api-key-launch-agent", "wandb-api-key-tier-agent")
        .replace("name: launch-agent-worker-reader\n", f"name: reader-{world.namespace}\n")
    )
    http = world.workers[worker]
    for doc in yaml.safe_load_all(text):
        kind = doc["kind"]
        if kind == "Namespace" or (not rbac and kind in ("ClusterRole", "RoleBinding")):
            continue
        namespace = doc["metadata"].get("namespace")
        api_version = doc["apiVersion"]
        await http.ensure(path_of(api_version, PLURALS[kind], namespace), doc)
    token_path = path_of("v1", "secrets", world.namespace, "launch-agent-reader-token")

    async def token() -> str | None:
        secret = await http.get(token_path)
        value = (secret.get("data") or {}).get("token")
        return base64.b64decode(value).decode() if value else None

    bearer = await until(token, within=60, message="the reader's token")
    credentials = http.credentials
    assert credentials.ca_file is not None
    return await asyncio.to_thread(
        kubeconfig.write,
        directory / f"{worker}-reader.kubeconfig",
        server=credentials.server,
        ca_file=credentials.ca_file,
        token=bearer,
        namespace=world.namespace,
    )
