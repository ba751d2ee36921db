"""The Helm chart on the real tier: `helm install` into the real API server, the workload kinds
the cluster has installed, and their queue specs.

`helm install` runs the pinned helm (`tests/chart/helm.py`) against the admin's kubeconfig;
what it created is read back with `helm get manifest` (the release as the API server took it).
The chart's agent is then run the way `tests/e2e/test_chart_install.py` runs it, as the kubelet
would start the Deployment's container (its environment, ConfigMaps at their mount paths),
with one change only: the API server is reached as the chart's ServiceAccount through a token
from the TokenRequest API in a kubeconfig, instead of the projected token of a pod.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from tests.chart.helm import CHART, Helm, Manifest

RELEASE = "agent"
CONTAINER = """\
{indent}containers:
{indent}  - name: {name}
{indent}    image: ${{image_uri}}
{indent}    resources:
{indent}      requests: {{cpu: 100m, memory: 64Mi}}"""


def container(indent: int, name: str = "main") -> str:
    return CONTAINER.format(indent=" " * indent, name=name)


@dataclass(frozen=True)
class Kind:
    """A workload kind the chart can grant, and a small template of it for a queue spec."""

    key: str  # the chart's `workloads.<key>`
    api_version: str
    kind: str
    template: str  # the queue spec's `template:` body, indented by 4
    serves: bool = False  # runs until stopped (LeaderWorkerSet) or cannot end here (RayJob)
    extra: str = ""  # more of the queue spec (`security:` for a TrainJob's runtime)


KINDS = (
    Kind(
        "job",
        "batch/v1",
        "Job",
        f"""\
    apiVersion: batch/v1
    kind: Job
    spec:
      backoffLimit: 0
      template:
        spec:
{container(10)}""",
    ),
    Kind(
        "jobset",
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        f"""\
    apiVersion: jobset.x-k8s.io/v1alpha2
    kind: JobSet
    spec:
      failurePolicy:
        maxRestarts: 0
      replicatedJobs:
        - name: workers
          replicas: 1
          template:
            spec:
              template:
                spec:
{container(18)}""",
    ),
    Kind(
        "pytorchjob",
        "kubeflow.org/v1",
        "PyTorchJob",
        f"""\
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    spec:
      pytorchReplicaSpecs:
        Master:
          replicas: 1
          restartPolicy: Never
          template:
            spec:
{container(14, "pytorch")}""",
    ),
    Kind(
        "trainjob",
        "trainer.kubeflow.org/v1alpha1",
        "TrainJob",
        """\
    apiVersion: trainer.kubeflow.org/v1alpha1
    kind: TrainJob
    spec:
      runtimeRef:
        name: torch-distributed
      trainer:
        numNodes: 1
        resourcesPerNode:
          requests: {cpu: 100m, memory: 64Mi}""",
        extra="  security:\n    trainingRuntimes: [torch-distributed]\n",
    ),
    Kind(
        "leaderworkerset",
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        f"""\
    apiVersion: leaderworkerset.x-k8s.io/v1
    kind: LeaderWorkerSet
    spec:
      replicas: 1
      leaderWorkerTemplate:
        size: 2
        leaderTemplate:
          spec:
{container(12, "leader")}
        workerTemplate:
          spec:
{container(12, "worker")}""",
        serves=True,
    ),
    Kind(
        "rayjob",
        "ray.io/v1",
        "RayJob",
        f"""\
    apiVersion: ray.io/v1
    kind: RayJob
    spec:
      entrypoint: python train.py
      rayClusterSpec:
        rayVersion: "2.40.0"
        headGroupSpec:
          rayStartParams: {{}}
          template:
            spec:
{container(14, "ray-head")}""",
        # KubeRay asks the head's dashboard for the job's result; no simulated pod serves one.
        serves=True,
    ),
)


async def installed(http: KubeHTTP) -> list[Kind]:
    """The kinds whose API the cluster serves (their controller's CRDs were applied)."""
    return [k for k in KINDS if await http.plural(k.api_version, k.kind) is not None]


def queue_spec(kind: Kind, queue: str, namespace: str, placement: str) -> str:
    """A queue spec for `kind` serving `queue` in `namespace`; `placement` is its `quota:` or
    `kueue:` block (indented by 2), or empty."""
    return (
        "apiVersion: launch-agent/v1\n"
        "kind: QueueSpec\n"
        f"metadata:\n  name: {queue}\n"
        f"spec:\n  queues: [{queue}]\n  namespace: {namespace}\n"
        f"{placement}{kind.extra}"
        f"  template:\n{kind.template}\n"
    )


async def _helm(helm: Helm, *args: str) -> str:
    result = await asyncio.to_thread(helm.run, *args)
    if result.returncode != 0:
        raise AssertionError(f"helm {args[0]} failed: {result.stderr.strip()}")
    return result.stdout


@contextlib.asynccontextmanager
async def helm_release(
    helm: Helm, kubeconfig: Path, namespace: str, values: dict[str, Any], scratch: Path
) -> AsyncIterator[list[Manifest]]:
    """`helm install` of the chart; yields the release's manifests; uninstalls it after."""
    values_file = scratch / "values.yaml"
    await asyncio.to_thread(values_file.write_text, yaml.safe_dump(values))
    where = ["--namespace", namespace, "--kubeconfig", str(kubeconfig)]
    await _helm(helm, "install", RELEASE, str(CHART), *where, "--values", str(values_file))
    try:
        text = await _helm(helm, "get", "manifest", RELEASE, *where)
        yield [doc for doc in yaml.safe_load_all(text) if doc]
    finally:
        await _helm(helm, "uninstall", RELEASE, *where, "--wait", "--timeout", "60s")


async def object_path(http: KubeHTTP, manifest: Manifest, namespace: str) -> str:
    """Where the API server serves the object a manifest describes."""
    plural = await http.plural(manifest["apiVersion"], manifest["kind"])
    assert plural is not None, f"{manifest['kind']} is not served by the API server"
    meta = manifest["metadata"]
    scoped = meta.get("namespace") or namespace
    doc = await http.get(
        "/api/v1" if manifest["apiVersion"] == "v1" else f"/apis/{manifest['apiVersion']}"
    )
    namespaced = next(r["namespaced"] for r in doc["resources"] if r["name"] == plural)
    return path_of(manifest["apiVersion"], plural, scoped if namespaced else None, meta["name"])


async def forbidden(http: KubeHTTP, method: str, path: str, body: Any = None) -> ApiError:
    """The API server's refusal of a request (the test fails if it was allowed)."""
    try:
        await http.request(method, path, body=body)
    except ApiError as exc:
        return exc
    raise AssertionError(f"{method} {path} was allowed")
