"""The workload controllers on a real control plane: Kueue, JobSet, LeaderWorkerSet, KubeRay,
Kubeflow's training-operator and Trainer, each run from its upstream binary with its upstream
manifests.

`make cluster-bins` renders each project's own install (`kubectl kustomize` of its
`config/default`, or the overlay named in `scripts/build_cluster_bins.py`) from the module it
built. From that install this module applies what a cluster-side install creates, the CRDs,
the webhook configurations, namespaces and RBAC, and leaves out what runs the controller in a
pod (Deployment, Services, Secrets, APIServices): the controller runs here as a process on
loopback instead. So every `clientConfig.service` (the admission webhooks' and the CRDs'
conversion webhooks') is rewritten to `url: https://127.0.0.1:<port><path>` with the cluster's
CA as `caBundle`, which is what envtest's `WebhookInstallOptions` does, and the controllers'
own certificate management is off: they serve the loopback certificate the cluster made.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launch_agent.realcluster.controlplane import free_port

Obj = dict[str, Any]
APPLIED_KINDS = (
    "Namespace",
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
)
# Applied once the controller serves: its own webhooks validate them.
LATE_KINDS = ("ClusterTrainingRuntime",)
WEBHOOK_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


@dataclass
class Ports:
    webhook: int = field(default_factory=free_port)
    metrics: int = field(default_factory=free_port)
    health: int = field(default_factory=free_port)


@dataclass(frozen=True)
class Layout:
    """Where one controller's files go, and what it is given."""

    directory: Path
    kubeconfig: Path
    cert_dir: Path
    ports: Ports


@dataclass(frozen=True)
class Addon:
    name: str
    binary: str
    # The namespace its install creates and the controller works in.
    namespace: str
    argv: Callable[[Layout], list[str]]
    # Files the controller reads, written before it starts (name -> text).
    files: Callable[[Layout], dict[str, str]] = lambda layout: {}
    # The health endpoint (path on the health port) that says it is serving.
    ready_path: str = "/readyz"
    # (namespace, name) of the Secret a controller that always manages its own certificate
    # (cert-controller's rotator) keeps it in: seeded with the cluster's, which the rotator
    # then keeps, since it is valid for the Service name the rotator checks.
    cert_secret: tuple[str, str] | None = None
    # A fixed folder whose `tls.crt` its rotator waits for (see `cluster._mark_certs_mounted`).
    rotator_marker: Path | None = None


def load_manifests(path: Path) -> list[Obj]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    return [d for d in docs if d.get("kind") in (*APPLIED_KINDS, *LATE_KINDS)]


def _url_config(config: Obj, port: int, ca_bundle: str) -> Obj:
    service = config.get("service") or {}
    path = service.get("path") or "/"
    return {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca_bundle}


def rewrite(objects: Iterable[Obj], *, port: int, ca_file: Path) -> list[Obj]:
    """The install's objects with every webhook pointed at the controller on loopback."""
    ca_bundle = base64.b64encode(ca_file.read_bytes()).decode()
    out = []
    for source in objects:
        obj = copy.deepcopy(source)
        if obj["kind"] in WEBHOOK_KINDS:
            for hook in obj.get("webhooks") or []:
                hook["clientConfig"] = _url_config(hook.get("clientConfig") or {}, port, ca_bundle)
        elif obj["kind"] == "CustomResourceDefinition":
            webhook = ((obj.get("spec") or {}).get("conversion") or {}).get("webhook")
            if isinstance(webhook, dict) and "clientConfig" in webhook:
                webhook["clientConfig"] = _url_config(webhook["clientConfig"], port, ca_bundle)
        out.append(obj)
    return out


def _kueue_config(layout: Layout, frameworks: Sequence[str], extra: str = "") -> str:
    p = layout.ports
    lines = [
        "apiVersion: config.kueue.x-k8s.io/v1beta2",
        "kind: Configuration",
        "namespace: kueue-system",
        "health:",
        f"  healthProbeBindAddress: 127.0.0.1:{p.health}",
        "metrics:",
        f"  bindAddress: 127.0.0.1:{p.metrics}",
        "webhook:",
        "  host: 127.0.0.1",
        f"  port: {p.webhook}",
        f"  certDir: {layout.cert_dir}",
        "leaderElection:",
        "  leaderElect: false",
        # On, with its Secret seeded (`Addon.cert_secret`): with it off, Kueue reads its metrics
        # certificate from a fixed /etc/kueue/metrics/certs (`cmd/kueue/main.go`).
        "internalCertManagement:",
        "  enable: true",
        "clientConnection:",
        "  qps: 50",
        "  burst: 100",
        "integrations:",
        "  frameworks:",
        *[f'  - "{f}"' for f in frameworks],
    ]
    return "\n".join(lines) + "\n" + extra


# Kueue's integrations, by the add-on that installs each one's CRD. Kueue enables only those
# whose CRDs are there: MultiKueue, for one, watches every enabled kind on every worker and
# refuses a worker that lacks one (`multikueuecluster.go`, "Unable to start the watcher").
KUEUE_FRAMEWORKS: dict[str, tuple[str, ...]] = {
    "": ("batch/job",),
    "jobset": ("jobset.x-k8s.io/jobset",),
    "training-operator": ("kubeflow.org/pytorchjob",),
    "trainer": ("trainer.kubeflow.org/trainjob",),
    "kuberay": ("ray.io/rayjob", "ray.io/raycluster"),
    "lws": ("leaderworkerset.x-k8s.io/leaderworkerset",),
}


def kueue_frameworks(addons: Sequence[str]) -> list[str]:
    return [
        f for name, kinds in KUEUE_FRAMEWORKS.items() if not name or name in addons for f in kinds
    ]


def kueue(extra_config: str = "", frameworks: Sequence[str] = ("batch/job",)) -> Addon:
    """Kueue with the integrations of the installed kinds; `extra_config` adds Configuration
    fields (MultiKueue's)."""
    return Addon(
        name="kueue",
        binary="kueue",
        namespace="kueue-system",
        argv=lambda layout: [
            f"--config={layout.directory / 'config.yaml'}",
            # The visibility API would need its APIService and a fixed port (8082) per
            # cluster; nothing here reads it.
            "--feature-gates=VisibilityOnDemand=false",
            "--zap-log-level=2",
        ],
        files=lambda layout: {"config.yaml": _kueue_config(layout, frameworks, extra_config)},
        cert_secret=("kueue-system", "kueue-webhook-server-cert"),
    )


def _manager_config(api_version: str, layout: Layout, cert_field: str) -> str:
    """A kubebuilder manager's `Configuration`: loopback ports, the cluster's certificate, no
    leader election and its own certificate management off."""
    p = layout.ports
    return (
        f"apiVersion: {api_version}\n"
        "kind: Configuration\n"
        f"health:\n  healthProbeBindAddress: 127.0.0.1:{p.health}\n"
        f"metrics:\n  bindAddress: 127.0.0.1:{p.metrics}\n"
        f"webhook:\n  host: 127.0.0.1\n  port: {p.webhook}\n"
        + (f"  certDir: {layout.cert_dir}\n" if cert_field == "internalCertManagement" else "")
        + "leaderElection:\n  leaderElect: false\n"
        f"{cert_field}:\n  enable: false\n"
    )


def _configured(name: str, binary: str, namespace: str, api_version: str, cert: str) -> Addon:
    return Addon(
        name=name,
        binary=binary,
        namespace=namespace,
        argv=lambda layout: [f"--config={layout.directory / 'config.yaml'}"],
        files=lambda layout: {"config.yaml": _manager_config(api_version, layout, cert)},
    )


def jobset() -> Addon:
    return _configured(
        "jobset",
        "jobset",
        "jobset-system",
        "config.jobset.x-k8s.io/v1alpha1",
        "internalCertManagement",
    )


def lws() -> Addon:
    return _configured(
        "lws", "lws", "lws-system", "config.lws.x-k8s.io/v1alpha1", "internalCertManagement"
    )


def trainer() -> Addon:
    # Trainer's webhook server reads its certificate from controller-runtime's default folder
    # under $TMPDIR, which the runner sets per controller (`Layout.cert_dir`).
    return _configured(
        "trainer",
        "trainer",
        "kubeflow-system",
        "config.trainer.kubeflow.org/v1alpha1",
        "certManagement",
    )


def kuberay() -> Addon:
    # KubeRay's default install has no webhooks.
    return Addon(
        name="kuberay",
        binary="kuberay-operator",
        namespace="ray-system",
        argv=lambda layout: [
            f"--metrics-addr=127.0.0.1:{layout.ports.metrics}",
            f"--health-probe-bind-address=127.0.0.1:{layout.ports.health}",
            "--enable-leader-election=false",
        ],
    )


def training_operator() -> Addon:
    return Addon(
        name="training-operator",
        binary="training-operator",
        namespace="kubeflow",
        argv=lambda layout: [
            f"--metrics-bind-address=127.0.0.1:{layout.ports.metrics}",
            f"--health-probe-bind-address=127.0.0.1:{layout.ports.health}",
            f"--webhook-server-port={layout.ports.webhook}",
            "--leader-elect=false",
            # Kueue admits PyTorchJobs; the operator only runs them.
            "--enable-scheme=pytorchjob",
        ],
        cert_secret=("kubeflow", "training-operator-webhook-cert"),
        rotator_marker=Path("/tmp/k8s-webhook-server/serving-certs"),
    )


ADDONS: dict[str, Callable[[], Addon]] = {
    "kueue": kueue,
    "jobset": jobset,
    "lws": lws,
    "trainer": trainer,
    "kuberay": kuberay,
    "training-operator": training_operator,
}
# The Service names the rotators check the seeded certificate against
# (`<service>.<namespace>.svc`, cert-controller `ValidCert`).
ROTATED_SERVICE_NAMES = ("training-operator.kubeflow.svc", "kueue-webhook-service.kueue-system.svc")
# ... and the names the rotators check the seeded CA against (`validCACert`).
ROTATED_CA_NAMES = ("training-operator-ca", "kueue-ca")
