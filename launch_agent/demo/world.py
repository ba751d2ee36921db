"""The loopback world the demo (and the dispatch benchmark) runs an agent against.

`SandboxWorld` starts the sandbox's three parts in this process: the Kubernetes API server, the
simulated cluster on a real-time clock (pods start and finish in wall-clock seconds) and the
W&B Launch server. It registers the custom resource definitions of every workload kind the
agent can render, creates the namespaces the queue specs target and writes a kubeconfig.

CRDs: a checkout holds the upstream CRDs in `tests/fixtures/crds` and uses them when present.
An installed package does not have them, so the
fallback builds each CRD from the schema the render layer ships
(`launch_agent/render/schemas/crds/<plural>.<group>_<version>.json`) and the kind table of
`launch_agent.render.kinds`: the same schema the agent's output validation uses, so the API
server's strict field validation agrees with what the agent renders.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import TracebackType
from typing import Any

from launch_agent.render.kinds import KINDS, KindInfo
from launch_agent.sandbox.cluster import Node, RealClock, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.wandb import LaunchState, WandbServer

SHARED_CRDS = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "crds"

# One node large enough for every example spec at once (GPUs and TPUs included), so only the
# runs scripted to be unschedulable are.
BIG_NODE = Node(
    "sandbox-node",
    {
        "cpu": "2000",
        "memory": "16000Gi",
        "nvidia.com/gpu": "512",
        "google.com/tpu": "512",
        "pods": "100000",
    },
)


class WorldError(Exception):
    """The sandbox could not be set up (a CRD that does not load, a port in use, ...)."""


def packaged_crds(kinds: Iterable[KindInfo] = KINDS) -> list[dict[str, Any]]:
    """A CRD for every custom kind whose schema the render layer ships."""
    crds = []
    root = resources.files("launch_agent.render").joinpath("schemas", "crds")
    for info in kinds:
        if info.builtin:
            continue
        group, _, version = info.api_version.rpartition("/")
        entry = root.joinpath(f"{info.plural}.{group}_{version}.json")
        if not entry.is_file():
            continue
        schema = json.loads(entry.read_text(encoding="utf-8"))
        schema.pop("x-launch-agent-source", None)
        crds.append(crd_for(info, schema))
        if info.kind == "RayJob":
            crds.append(_raycluster_crd(info))
    return crds


def _raycluster_crd(rayjob: KindInfo) -> dict[str, Any]:
    """KubeRay installs the RayCluster CRD beside RayJob's, and the sandbox's RayJob controller
    creates a RayCluster per RayJob (`sandbox/cluster/raycluster.py`). The agent never renders
    one, so its schema is not shipped: served without validation."""
    group = rayjob.api_version.rpartition("/")[0]
    crd = crd_for(rayjob, {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    crd["metadata"]["name"] = f"rayclusters.{group}"
    crd["spec"]["names"] = {
        "plural": "rayclusters",
        "singular": "raycluster",
        "kind": "RayCluster",
        "listKind": "RayClusterList",
    }
    return crd


def crd_for(info: KindInfo, schema: dict[str, Any]) -> dict[str, Any]:
    """The CustomResourceDefinition an operator's installation would apply for `info`."""
    group, _, version = info.api_version.rpartition("/")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": info.crd_name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": info.plural,
                "singular": info.kind.lower(),
                "kind": info.kind,
                "listKind": f"{info.kind}List",
            },
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": schema},
                    "subresources": {"status": {}},
                }
            ],
        },
    }


@dataclass
class WorldSettings:
    entity: str = "ent"
    queues: tuple[str, ...] = ("q1",)
    namespaces: tuple[str, ...] = ("default",)
    # How long a popped, unacknowledged item stays leased (W&B: a few minutes).
    lease_seconds: float = 60.0
    default_outcome: str = "succeed after=2s"
    # "auto": tests/fixtures/crds of a checkout if present, else the packaged schemas;
    # "packaged"; "none"; or a directory of CRD YAML files.
    crds: str = "auto"
    nodes: tuple[Node, ...] = (BIG_NODE,)
    cluster: bool = True


class SandboxWorld:
    """`async with SandboxWorld(settings) as world:` everything is up and loopback-only."""

    def __init__(self, settings: WorldSettings | None = None, directory: Path | None = None):
        self.settings = settings or WorldSettings()
        self._directory = directory
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.state = LaunchState(
            entity=self.settings.entity, lease_seconds=self.settings.lease_seconds
        )
        for name in self.settings.queues:
            self.state.add_queue(name)
        self.kube = KubeApiServer(host="127.0.0.1", port=0)
        self.wandb = WandbServer(self.state)
        self.cluster: SimulatedCluster | None = None
        self.crd_source = ""
        self.kubeconfig = Path()

    @property
    def directory(self) -> Path:
        if self._directory is None:
            raise WorldError("the world is not started")
        return self._directory

    async def __aenter__(self) -> SandboxWorld:
        if self._directory is None:
            self._tmp = await asyncio.to_thread(
                tempfile.TemporaryDirectory, prefix="launch-agent-sandbox-"
            )
            self._directory = Path(self._tmp.name)
        await self.kube.__aenter__()
        try:
            await self.wandb.__aenter__()
            try:
                await self._prepare()
                if self.settings.cluster:
                    self.cluster = SimulatedCluster(
                        self.kube,
                        clock=RealClock(),
                        nodes=list(self.settings.nodes),
                        default_outcome=self.settings.default_outcome,
                    )
                    await self.cluster.__aenter__()
            except BaseException:
                await self.wandb.__aexit__(None, None, None)
                raise
        except BaseException:
            await self.kube.__aexit__(None, None, None)
            await asyncio.to_thread(self._cleanup)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self.cluster is not None:
                await self.cluster.__aexit__(exc_type, exc, tb)
        finally:
            try:
                await self.wandb.__aexit__(exc_type, exc, tb)
            finally:
                await self.kube.__aexit__(exc_type, exc, tb)
                await asyncio.to_thread(self._cleanup)

    def _cleanup(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def _prepare(self) -> None:
        choice = self.settings.crds
        crds: Path | None = None
        if choice == "none":
            self.crd_source = "none"
        elif choice == "auto" and await asyncio.to_thread(SHARED_CRDS.is_dir):
            crds = SHARED_CRDS
        elif choice not in ("auto", "packaged"):
            crds = Path(choice)
        try:
            if choice == "none":
                pass
            elif crds is not None:
                await self.kube.load_crds_from(crds)
                self.crd_source = str(crds)
            else:
                for crd in await asyncio.to_thread(packaged_crds):
                    self.kube.register_crd(crd, "launch_agent/render/schemas/crds")
                self.crd_source = "the schemas shipped in launch_agent/render/schemas/crds"
        except Exception as exc:
            raise WorldError(f"registering CRDs from {crds or 'the package'}: {exc}") from exc
        for ns in self.settings.namespaces:
            if self.kube.objects.find("namespaces", ns, namespace="") is None:
                self.kube.objects.create("namespaces", {"metadata": {"name": ns}}, namespace="")
        self.kubeconfig = await asyncio.to_thread(
            write_kubeconfig, self.directory / "kubeconfig", self.kube.url
        )
