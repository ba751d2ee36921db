"""`RealCluster`: a control plane, simulated nodes and the workload controllers, started in order
and stopped in reverse, with `DIR/cluster.env` written once everything answers.

```python
async with RealCluster(Path("/tmp/rc"), nodes=[Node("sim-node-1", {...})]) as cluster:
    cluster.kubeconfig          # the admin's kubeconfig (KUBECONFIG in cluster.env)
    cluster.http                # KubeHTTP as the admin
    await cluster.script("launch-agent.io/run-queue-item=abc", "oomkilled")
```
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from launch_agent.realcluster import addons as addons_
from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.controlplane import ControlPlane
from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP
from launch_agent.realcluster.nodes import NodeSimulator, script_outcome
from launch_agent.realcluster.processes import Child, StartError, http_probe
from launch_agent.sandbox.cluster.nodes import Node

log = logging.getLogger(__name__)

DEFAULT_NODES = (
    Node(
        "sim-node-1",
        {"cpu": "64", "memory": "256Gi", "pods": "1000", "nvidia.com/gpu": "8"},
        {"node.kubernetes.io/instance-type": "sim-gpu"},
    ),
    Node(
        "sim-node-2",
        {"cpu": "64", "memory": "256Gi", "pods": "1000", "nvidia.com/gpu": "8"},
        {"node.kubernetes.io/instance-type": "sim-gpu"},
    ),
)


class RealCluster:
    def __init__(
        self,
        directory: Path,
        *,
        name: str = "cluster",
        nodes: Sequence[Node] = DEFAULT_NODES,
        addons: Sequence[str] = ("kueue",),
        bins: Binaries | None = None,
        default_outcome: str = "succeed after=5s",
        kueue_config: str = "",
    ) -> None:
        self.directory = directory
        self.name = name
        self.bins = bins or Binaries.find()
        self.control_plane = ControlPlane(
            name, directory, self.bins, addons_.ROTATED_SERVICE_NAMES, addons_.ROTATED_CA_NAMES
        )
        self.nodes = list(nodes)
        self.addon_names = list(addons)
        self.kueue_config = kueue_config
        self.default_outcome = default_outcome
        self.addon_children: dict[str, Child] = {}
        self.simulator: NodeSimulator | None = None
        self._http: KubeHTTP | None = None
        self._sim_task: asyncio.Task[None] | None = None
        self.started_seconds = 0.0

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.admin_kubeconfig

    @property
    def server(self) -> str:
        return self.control_plane.server

    @property
    def http(self) -> KubeHTTP:
        if self._http is None:
            raise RuntimeError("the cluster is not running")
        return self._http

    async def __aenter__(self) -> RealCluster:
        started = time.monotonic()
        try:
            await self.control_plane.start()
            self._http = await KubeHTTP(self.control_plane.credentials()).__aenter__()
            await self._start_nodes()
            for name in self.addon_names:
                await self._start_addon(name)
        except BaseException:
            await self.stop()
            raise
        self.started_seconds = time.monotonic() - started
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _start_nodes(self) -> None:
        pki = self.control_plane.pki
        assert pki is not None
        sim = NodeSimulator(
            self.http,
            self.nodes,
            server_cert=(pki.loopback_server.cert, pki.loopback_server.key),
            client_ca=pki.ca,
            default_outcome=self.default_outcome,
        )
        await sim.start_log_server()
        await sim.register_nodes()
        self.simulator = sim
        self._sim_task = asyncio.create_task(sim.run(), name=f"{self.name} node simulator")
        self._sim_task.add_done_callback(self._simulator_ended)

    def _simulator_ended(self, task: asyncio.Task[None]) -> None:
        # Said when it happens, not at the stop: without the simulator no pod of this cluster
        # starts or ends, and what waits on one would time out with no reason given.
        if not task.cancelled() and task.exception() is not None:
            log.error("%s: the node simulator stopped: %r", self.name, task.exception())

    async def _start_addon(self, name: str) -> None:
        if name == "kueue":
            frameworks = addons_.kueue_frameworks(self.addon_names)
            addon = addons_.kueue(self.kueue_config, frameworks)
        else:
            addon = addons_.ADDONS[name]()
        if not self.bins.has(addon.binary):
            raise StartError(
                f"{addon.binary} is not built (run `make cluster-bins`); it is needed for {name}"
            )
        pki = self.control_plane.pki
        assert pki is not None
        directory = self.directory / "addons" / name
        # controller-runtime's default certificate folder, under the controller's own $TMPDIR:
        # where the managers that take no certDir look, and never shared between clusters.
        tmp = directory / "tmp"
        cert_dir = tmp / "k8s-webhook-server" / "serving-certs"
        cert_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy(pki.loopback_server.cert, cert_dir / "tls.crt")
        shutil.copy(pki.loopback_server.key, cert_dir / "tls.key")
        layout = addons_.Layout(directory, self.kubeconfig, cert_dir, addons_.Ports())
        manifests = self.bins.directory / "manifests" / f"{name}.yaml"
        objects = addons_.rewrite(
            addons_.load_manifests(manifests), port=layout.ports.webhook, ca_file=pki.ca
        )
        late = [o for o in objects if o["kind"] in addons_.LATE_KINDS]
        await self._apply([o for o in objects if o not in late])
        if addon.cert_secret is not None:
            await self._seed_cert_secret(*addon.cert_secret)
        if addon.rotator_marker is not None:
            _mark_certs_mounted(addon.rotator_marker, pki.loopback_server.cert)
        for filename, text in addon.files(layout).items():
            (directory / filename).write_text(text)
        child = Child(
            name,
            [str(self.bins.path(addon.binary)), *addon.argv(layout)],
            self.directory / "logs" / f"{name}.log",
            env={
                "KUBECONFIG": str(self.kubeconfig),
                "POD_NAMESPACE": addon.namespace,
                "TMPDIR": str(tmp),
            },
        )
        self.addon_children[name] = child
        await child.start()
        url = f"http://127.0.0.1:{layout.ports.health}{addon.ready_path}"
        await child.wait_ready(http_probe(url), 120)
        await self._apply(late)

    async def _seed_cert_secret(self, namespace: str, name: str) -> None:
        pki = self.control_plane.pki
        assert pki is not None
        files = {
            "ca.crt": pki.ca,
            "ca.key": pki.ca.with_name("ca.key"),
            "tls.crt": pki.loopback_server.cert,
            "tls.key": pki.loopback_server.key,
        }
        data = {k: base64.b64encode(v.read_bytes()).decode() for k, v in files.items()}
        await self.http.ensure(
            f"/api/v1/namespaces/{namespace}/secrets",
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace},
                "type": "kubernetes.io/tls",
                "data": data,
            },
        )

    async def _apply(self, objects: Sequence[addons_.Obj]) -> None:
        """Namespaces and CRDs first (and wait until the CRDs are established), then the rest:
        the order `kubectl apply` of a whole install needs to succeed in one pass."""
        first = [o for o in objects if o["kind"] in ("Namespace", "CustomResourceDefinition")]
        rest = [o for o in objects if o not in first]
        for obj in first + rest:
            await self.http.ensure(_collection(obj), obj)
        for obj in first:
            if obj["kind"] == "CustomResourceDefinition":
                await self._established(obj["metadata"]["name"])
                await self._discoverable(obj)

    async def _established(self, crd: str) -> None:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{crd}"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            got = await self.http.get(path)
            conditions = (got.get("status") or {}).get("conditions") or []
            if any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            ):
                return
            await asyncio.sleep(0.1)
        raise StartError(f"CRD {crd} was not established within 60 s")

    async def _discoverable(self, crd: addons_.Obj) -> None:
        """Established is not yet discoverable: a controller that builds its REST mapping at
        start (Trainer's runtimes) fails with `no matches for kind` if discovery still lags."""
        spec = crd["spec"]
        plural = spec["names"]["plural"]
        for version in spec.get("versions") or []:
            if not version.get("served"):
                continue
            path = f"/apis/{spec['group']}/{version['name']}"
            deadline = time.monotonic() + 60
            while True:
                found = await self.http.find(path)
                names = {r.get("name") for r in (found or {}).get("resources") or []}
                if plural in names:
                    break
                if time.monotonic() > deadline:
                    raise StartError(f"{plural}.{spec['group']} is not in discovery ({path})")
                await asyncio.sleep(0.1)

    async def script(self, selector: str, outcome: str) -> None:
        """Pods of workloads matching `selector` play `outcome` (the sandbox's grammar)."""
        await script_outcome(self.http, f"{time.time_ns():020d}", selector, outcome)

    async def stop(self) -> None:
        for child in reversed(list(self.addon_children.values())):
            await child.stop()
        if self._sim_task is not None:
            self._sim_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, ApiError, OSError):
                await self._sim_task
            self._sim_task = None
        if self.simulator is not None:
            await self.simulator.close()
        if self._http is not None:
            await self._http.__aexit__(None, None, None)
            self._http = None
        await self.control_plane.stop()


def _mark_certs_mounted(folder: Path, cert: Path) -> None:
    """training-operator's rotator waits for `tls.crt` to exist in a fixed folder
    (`pkg/cert/cert.go` `certDir`, cert-controller `ensureCertsMounted` checks only that it
    exists) while its webhook server reads the certificate from under $TMPDIR, which the runner
    sets per cluster. So a file is put there if none is, and never overwritten: concurrent
    clusters share the folder but each serves its own certificate."""
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError), (folder / "tls.crt").open("xb") as out:
        out.write(cert.read_bytes())


def _collection(obj: addons_.Obj) -> str:
    """The collection path an object is created in, for the kinds an install holds."""
    kind, api_version = obj["kind"], obj["apiVersion"]
    namespace = (obj.get("metadata") or {}).get("namespace")
    plural = {
        "ClusterTrainingRuntime": "clustertrainingruntimes",
        "Namespace": "namespaces",
        "CustomResourceDefinition": "customresourcedefinitions",
        "ServiceAccount": "serviceaccounts",
        "ClusterRole": "clusterroles",
        "ClusterRoleBinding": "clusterrolebindings",
        "Role": "roles",
        "RoleBinding": "rolebindings",
        "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
        "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
    }[kind]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    scoped = kind in ("ServiceAccount", "Role", "RoleBinding") and namespace
    return f"{base}/namespaces/{namespace}/{plural}" if scoped else f"{base}/{plural}"
