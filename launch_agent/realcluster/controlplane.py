"""One Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler, as upstream builds them, each a child process with its log in the directory.

The flags are kubeadm's and envtest's, cut to a cluster without nodes of its own:
- kube-apiserver: client certificates and service-account tokens (keys made at start), RBAC
  and Node authorization, the admission plugins NamespaceLifecycle, ServiceAccount, PodSecurity,
  LimitRanger and ResourceQuota on top of the default set (webhooks included), API priority
  and fairness on (its default), and `--endpoint-reconciler-type=none`: the `kubernetes`
  Service's endpoint would be 127.0.0.1, which endpoint validation refuses (envtest does the
  same).
- kube-controller-manager: the controllers a batch cluster needs (job, ttl-after-finished,
  garbage collector, pod GC, namespace, service account and its tokens, resource quota, the
  root-CA publisher, cluster-role aggregation, and the StatefulSet controller, which makes a
  LeaderWorkerSet's pods from the StatefulSets LWS creates), each with its own service account
  (`--use-service-account-credentials`), no leader election.
- kube-scheduler: its default profile, no leader election.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from launch_agent.realcluster import kubeconfig, pki
from launch_agent.realcluster.bins import Binaries
from launch_agent.realcluster.kubehttp import Credentials
from launch_agent.realcluster.processes import Child, Probe, http_probe

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
CONTROLLERS = (
    "job-controller",
    "ttl-after-finished-controller",
    "garbage-collector-controller",
    "pod-garbage-collector-controller",
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "resourcequota-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
    # LeaderWorkerSet runs each group as a leader StatefulSet and a workers' StatefulSet.
    "statefulset-controller",
)
ADMISSION = ("NamespaceLifecycle", "ServiceAccount", "PodSecurity", "LimitRanger", "ResourceQuota")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Ports:
    etcd_client: int = field(default_factory=free_port)
    etcd_peer: int = field(default_factory=free_port)
    apiserver: int = field(default_factory=free_port)
    controller_manager: int = field(default_factory=free_port)
    scheduler: int = field(default_factory=free_port)


class ControlPlane:
    def __init__(
        self,
        name: str,
        directory: Path,
        bins: Binaries,
        extra_names: tuple[str, ...] = (),
        ca_names: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.extra_names = extra_names
        self.ca_names = ca_names
        self.directory = directory
        self.bins = bins
        self.ports = Ports()
        self.pki: pki.ControlPlanePKI | None = None
        self.children: dict[str, Child] = {}

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports.apiserver}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.directory / "admin.kubeconfig"

    def credentials(self) -> Credentials:
        assert self.pki is not None
        return Credentials(self.server, self.pki.ca, self.pki.admin.cert, self.pki.admin.key)

    def _log(self, name: str) -> Path:
        return self.directory / "logs" / f"{name}.log"

    async def start(self, *, controllers: bool = True) -> None:
        """etcd and kube-apiserver, then (`controllers`) kube-controller-manager and
        kube-scheduler; without them nothing acts on what is created (`bench dispatch --cluster
        real` measures the API server's create rate alone)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self.pki = pki.create(self.directory / "pki", SERVICE_IP, self.extra_names, self.ca_names)
        p = self.pki
        kubeconfig.write(
            self.admin_kubeconfig,
            server=self.server,
            ca_file=p.ca,
            cert_file=p.admin.cert,
            key_file=p.admin.key,
        )
        await self.start_etcd()
        await self.start_apiserver()
        if not controllers:
            return
        for who, pair in (("controller-manager", p.controller_manager), ("scheduler", p.scheduler)):
            kubeconfig.write(
                self.directory / f"{who}.kubeconfig",
                server=self.server,
                ca_file=p.ca,
                cert_file=pair.cert,
                key_file=pair.key,
            )
        await self.start_controller_manager()
        await self.start_scheduler()

    async def start_etcd(self) -> None:
        ports = self.ports
        client = f"http://127.0.0.1:{ports.etcd_client}"
        peer = f"http://127.0.0.1:{ports.etcd_peer}"
        child = Child(
            "etcd",
            [
                str(self.bins.path("etcd")),
                f"--name={self.name}",
                f"--data-dir={self.directory / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster={self.name}={peer}",
                "--log-level=warn",
                # A test's etcd: no fsync per write, a small quota (its default is 2 GiB).
                "--unsafe-no-fsync",
                "--quota-backend-bytes=1073741824",
            ],
            self._log("etcd"),
        )
        await self._start(child, http_probe(f"{client}/health"), 60)

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.etcd_client}"

    def apiserver_argv(self) -> list[str]:
        p = self.pki
        assert p is not None
        return [
            str(self.bins.path("kube-apiserver")),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.ports.apiserver}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--endpoint-reconciler-type=none",
            f"--client-ca-file={p.ca}",
            f"--tls-cert-file={p.apiserver.cert}",
            f"--tls-private-key-file={p.apiserver.key}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p.sa_public}",
            f"--service-account-signing-key-file={p.sa_private}",
            f"--kubelet-client-certificate={p.kubelet_client.cert}",
            f"--kubelet-client-key={p.kubelet_client.key}",
            "--kubelet-preferred-address-types=InternalIP",
            f"--requestheader-client-ca-file={p.ca}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={p.front_proxy.cert}",
            f"--proxy-client-key-file={p.front_proxy.key}",
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins={','.join(ADMISSION)}",
            "--enable-priority-and-fairness=true",
            "--allow-privileged=true",
            f"--cert-dir={self.directory / 'pki' / 'apiserver-generated'}",
            "--profiling=false",
            "--v=1",
        ]

    async def start_apiserver(self) -> None:
        p = self.pki
        assert p is not None
        context = ssl.create_default_context(cafile=str(p.ca))
        context.load_cert_chain(p.admin.cert, p.admin.key)
        child = Child("kube-apiserver", self.apiserver_argv(), self._log("kube-apiserver"))
        await self._start(child, http_probe(f"{self.server}/readyz", context), 120)

    async def start_controller_manager(self) -> None:
        p = self.pki
        assert p is not None
        config = self.directory / "controller-manager.kubeconfig"
        child = Child(
            "kube-controller-manager",
            [
                str(self.bins.path("kube-controller-manager")),
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.controller_manager}",
                "--leader-elect=false",
                f"--controllers={','.join(CONTROLLERS)}",
                f"--service-account-private-key-file={p.sa_private}",
                f"--root-ca-file={p.ca}",
                "--use-service-account-credentials=true",
                f"--cert-dir={self.directory / 'pki' / 'controller-manager-generated'}",
                "--v=1",
            ],
            self._log("kube-controller-manager"),
        )
        url = f"https://127.0.0.1:{self.ports.controller_manager}/healthz"
        await self._start(child, http_probe(url, _insecure()), 60)

    async def start_scheduler(self) -> None:
        config = self.directory / "scheduler.kubeconfig"
        child = Child(
            "kube-scheduler",
            [
                str(self.bins.path("kube-scheduler")),
                f"--kubeconfig={config}",
                f"--authentication-kubeconfig={config}",
                f"--authorization-kubeconfig={config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={self.ports.scheduler}",
                "--leader-elect=false",
                f"--cert-dir={self.directory / 'pki' / 'scheduler-generated'}",
                "--v=1",
            ],
            self._log("kube-scheduler"),
        )
        url = f"https://127.0.0.1:{self.ports.scheduler}/healthz"
        await self._start(child, http_probe(url, _insecure()), 60)

    async def _start(self, child: Child, probe: Probe, within: float) -> None:
        self.children[child.name] = child
        await child.start()
        await child.wait_ready(probe, within)

    async def restart_apiserver(self, *, down_for: float = 0.0) -> None:
        """Stop kube-apiserver (SIGTERM), wait, start it again on the same port and etcd."""
        await self.children["kube-apiserver"].stop()
        if down_for:
            await asyncio.sleep(down_for)
        await self.start_apiserver()

    async def stop(self) -> None:
        for name in reversed(list(self.children)):
            await self.children[name].stop()


def _insecure() -> ssl.SSLContext:
    # The components' own serving certificates are self-signed at their start (`--cert-dir`);
    # only their health is read from them.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context
