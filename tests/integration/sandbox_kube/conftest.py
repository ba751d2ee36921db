"""Fixtures for the sandbox Kubernetes API server tests: a server per test, real clients."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from launch_agent.sandbox.cluster import SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer
from launch_agent.sandbox.kube.apiserver import load_crd_documents
from launch_agent.sandbox.kube.validation import core_walker

ROOT = Path(__file__).resolve().parents[3]
CRDS = ROOT / "tests" / "fixtures" / "crds"

# kubernetes_asyncio builds an SSL context for every ApiClient, even for plain http; loading the
# system CA bundle takes ~40 ms on the event loop (over the 100 ms guardrail on a busy 2-core
# machine). Pointing it at this one small self-signed certificate (never used: the sandbox
# speaks http) makes that ~4 ms. Its key was thrown away.
TEST_CA = """\
-----BEGIN CERTIFICATE-----
MIIBpTCCAUugAwIBAgIUcGifAUCuaoeqtOVbYUUE7Mtoxu8wCgYIKoZIzj0EAwIw
JzElMCMGA1UEAwwcbGF1bmNoLWFnZW50IHNhbmRib3ggdGVzdCBDQTAgFw0yNjEx
MzAwMDIzMDNaGA8yMTI2MTEwNjAwMjMwM1owJzElMCMGA1UEAwwcbGF1bmNoLWFn
ZW50IHNhbmRib3ggdGVzdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABJnS
+fMf8Y6HuG8KZhk1doKn+4+6QDF1wTCeLLjjOVO6C1p/DXwbPINKzTseJVJCyR6v
BgykKq+Ulg9ExrYMlUijUzBRMB0GA1UdDgQWBBQv5wnV7PhNAAmnTilvqW/Vnt5J
6jAfBgNVHSMEGDAWgBQv5wnV7PhNAAmnTilvqW/Vnt5J6jAPBgNVHRMBAf8EBTAD
AQH/MAoGCCqGSM49BAMCA0gAMEUCIQDslPDguJomp52k/CRDNOydBYdPANmvJ+NJ
hRu2Z5sXjwIgDPXdfZ35obP84r5y17n6p2lacMwDBHaJrms71xTH7v4=
-----END CERTIFICATE-----
"""


def job_body(
    name: str | None = "job-a", labels: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"labels": labels or {}}
    if name:
        meta["name"] = name
    else:
        meta["generateName"] = "launch-"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta,
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            },
            **spec,
        },
    }


# The CRD file of each custom workload kind the simulated cluster runs (tests/fixtures/crds).
CRD_FILES = {
    "JobSet": "jobset.x-k8s.io_jobsets.yaml",
    "PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "LeaderWorkerSet": "leaderworkerset.x-k8s.io_leaderworkersets.yaml",
    "RayJob": "ray.io_rayjobs.yaml",
    "RayCluster": "ray.io_rayclusters.yaml",
    "Job": "batch.volcano.sh_jobs.yaml",
}


@pytest.fixture
async def kube() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.2) as server:
        yield server


@pytest.fixture(scope="session")
def crds() -> Path:
    """The vendored CRD folder (tests/fixtures/crds), parsed before any event loop runs (libyaml holds the GIL)."""
    for path in sorted(CRDS.glob("*.yaml")):
        load_crd_documents(path)
    return CRDS


@pytest.fixture
async def cluster(kube: KubeApiServer, crds: Path) -> AsyncIterator[SimulatedCluster]:
    """The simulated cluster over `kube`, with every custom workload kind's CRD loaded (a
    module that needs Kueue's CRDs or `kueue=True` defines its own)."""
    for name in CRD_FILES.values():
        await kube.load_crd_file(crds / name)
    async with SimulatedCluster(kube) as sim:
        yield sim


@pytest.fixture(scope="session", autouse=True)
def _core_schemas() -> None:
    """Strict-validation schemas of the kinds the tests create, read before any loop runs."""
    for kind, api_version in (("Job", "batch/v1"), ("Pod", "v1"), ("ConfigMap", "v1")):
        core_walker(kind, api_version)


@pytest.fixture(scope="session")
def test_ca(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ca") / "ca.pem"
    path.write_text(TEST_CA)
    return str(path)


@pytest.fixture(autouse=True)
def _small_default_ca(test_ca: str) -> Iterator[None]:
    """`watch.Watch()` builds its own ApiClient from the default configuration: same fix."""
    saved = client.Configuration._default  # type: ignore[attr-defined]  # private, untyped
    default = client.Configuration()
    default.ssl_ca_cert = test_ca
    client.Configuration.set_default(default)
    yield
    client.Configuration._default = saved  # type: ignore[attr-defined]


def client_config(url: str, ca: str) -> client.Configuration:
    config = client.Configuration(host=url)
    config.ssl_ca_cert = ca
    return config


@pytest.fixture
async def api(kube: KubeApiServer, test_ca: str) -> AsyncIterator[client.ApiClient]:
    config = client_config(kube.url, test_ca)
    async with client.ApiClient(config) as api_client:
        yield api_client


@pytest.fixture
def batch(api: client.ApiClient) -> client.BatchV1Api:
    return client.BatchV1Api(api)


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def custom(api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)
