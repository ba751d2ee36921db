"""The Helm chart on the real API server (issue 27, item 7), real tier only.

`helm install` of `charts/launch-agent` into the real cluster, whose API server authorizes with
RBAC (and Node): every object the release holds is accepted. Then the chart's agent runs as its
Deployment's container would, authenticated as the chart's ServiceAccount (a token from the
TokenRequest API in a kubeconfig), and dispatches every workload kind the cluster has installed,
a build (a Kaniko Job on the simulated nodes, scripted to succeed) and a failure, in both quota
modes: what the chart's Roles grant is enough for all of it. And that identity is confined: no
Secret the chart does not name, nothing outside its namespaces (403 from the real RBAC
authorizer).

`real_only`: deselected on the sandbox tier, whose API server authorizes nothing (every request
is allowed), so these tests would pass there without proving anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from launch_agent.realcluster.kubehttp import KubeHTTP, path_of
from launch_agent.sandbox.registry import RegistryServer
from launch_agent.sandbox.wandb import ItemState
from tests.chart.helm import Helm, Manifest, find, install_helm
from tests.cluster.chart_support import (
    Kind,
    forbidden,
    helm_release,
    installed,
    object_path,
    queue_spec,
)
from tests.cluster.conftest import RealBackend
from tests.cluster.identity import token_credentials, token_kubeconfig, token_of, user_of
from tests.cluster.world import Obj, World, reported_once, run_spec, until
from tests.e2e.test_chart_install import (
    container_environment,
    container_of,
    lay_out_mounts,
    running_container,
)
from tests.git_repos import GitHttpServer
from tests.loopback_stores import moto_s3

pytestmark = pytest.mark.real_only

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "launch-agent.io/run-id"
IMAGE_TAG = "launch-agent.io/image-tag"  # render/kaniko.IMAGE_TAG, on a Kaniko Job and its pods
REPOSITORY = "ml/train"
START = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def create_namespace(http: KubeHTTP, name: str) -> None:
    await http.create(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )


@contextlib.asynccontextmanager
async def namespaces(http: KubeHTTP, *names: str) -> AsyncIterator[None]:
    try:
        for name in names:
            await create_namespace(http, name)
        yield
    finally:
        for name in names:
            await http.delete(f"/api/v1/namespaces/{name}")


def service_account_of(manifests: list[Manifest], namespace: str) -> str:
    """The agent's ServiceAccount (the Deployment's), not Kaniko's."""
    deployment = next(m for m in find(manifests, "Deployment"))
    name = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    assert any(
        sa["metadata"]["name"] == name and sa["metadata"].get("namespace", namespace) == namespace
        for sa in find(manifests, "ServiceAccount")
    ), name
    return str(name)


def api_key_secret(manifests: list[Manifest]) -> str:
    _, container = container_of(manifests)
    env = {e["name"]: e for e in container["env"]}
    return str(env["LAUNCH_AGENT_API_KEY_SECRET"]["value"])


def base_values(world: World, runs_ns: str, kaniko_ns: str) -> dict[str, Any]:
    return {
        "agent": {"apiKey": world.wandb.api_key, "image": "launch-agent:test"},
        "baseUrl": world.wandb.url,
        "healthPort": free_port(),
        "additionalTargetNamespaces": [runs_ns],
        "kaniko": {"enabled": True, "namespace": kaniko_ns},
        "launchConfig": yaml.safe_dump({"queues": ["q1"], "entity": "ent", "max_jobs": -1}),
    }


async def test_every_object_of_the_chart_is_accepted_and_its_identity_is_confined(
    world: World, real_backend: RealBackend, tmp_path: Path
) -> None:
    ns = world.namespace
    runs_ns, kaniko_ns, outside = f"{ns}-runs", f"{ns}-kaniko", f"{ns}-other"
    helm = Helm(binary=await asyncio.to_thread(install_helm), home=tmp_path / "helm-home")
    values = base_values(world, runs_ns, kaniko_ns)
    values |= {"quota": {"mode": "kueue"}, "workloads": {"job": True, "jobset": True}}
    async with (
        namespaces(world.http, runs_ns, outside),
        helm_release(helm, world.kubeconfig, ns, values, tmp_path) as manifests,
    ):
        # Every object of the release, as the API server stored it.
        kinds = sorted({m["kind"] for m in manifests})
        for manifest in manifests:
            path = await object_path(world.http, manifest, ns)
            assert await world.http.find(path) is not None, path
        assert {"Deployment", "Role", "RoleBinding", "ClusterRole", "Secret"} <= set(kinds)
        sa = service_account_of(manifests, ns)
        secret = api_key_secret(manifests)
        # A Secret in the agent's own namespace that the chart does not name.
        await world.create(
            "v1",
            "secrets",
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "unrelated"}},
        )
        token = await token_of(world.http, ns, sa)
        user = user_of(ns, sa)
        async with KubeHTTP(token_credentials(real_backend.credentials(), token)) as agent:
            # What the chart grants, as that identity.
            assert await agent.get(path_of("v1", "secrets", ns, secret))
            assert await agent.get(path_of("v1", "secrets", runs_ns, secret))
            assert "items" in await agent.get(path_of("batch/v1", "jobs", runs_ns))
            refusals = [
                await forbidden(agent, "GET", path_of("v1", "secrets", ns, "unrelated")),
                await forbidden(agent, "GET", path_of("v1", "secrets", ns)),
                await forbidden(agent, "GET", path_of("v1", "pods", outside)),
                await forbidden(
                    agent,
                    "POST",
                    path_of("batch/v1", "jobs", outside),
                    {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}},
                ),
                await forbidden(agent, "GET", path_of("v1", "secrets", kaniko_ns, secret)),
                await forbidden(agent, "GET", "/api/v1/namespaces"),
            ]
    for refusal in refusals:
        # The RBAC authorizer's own words, naming the identity.
        assert refusal.status == 403 and refusal.reason == "Forbidden", refusal
        assert f'User "{user}" cannot' in refusal.message, refusal.message


# --- the chart's agent dispatching everything -----------------------------------------------


def kueue_objects(ns: str) -> list[tuple[str, Obj]]:
    api = "/apis/kueue.x-k8s.io/v1beta2"
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": f"{ns}-flavor"},
    }
    queue = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": f"{ns}-cq"},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": f"{ns}-flavor",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "8"},
                                {"name": "memory", "nominalQuota": "16Gi"},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    return [(f"{api}/resourceflavors", flavor), (f"{api}/clusterqueues", queue)]


@contextlib.asynccontextmanager
async def pushed_images(
    http: KubeHTTP, namespace: str, registry: RegistryServer
) -> AsyncIterator[list[str]]:
    """Kaniko's push, played: a Kaniko Job that completed puts its --destination into the
    registry (the simulated node ran no executor). Yields the Kaniko Jobs seen."""
    seen: list[str] = []

    async def watch() -> None:
        pushed: set[str] = set()
        while True:
            listed = await http.get(path_of("batch/v1", "jobs", namespace))
            for job in listed.get("items") or []:
                name = job["metadata"]["name"]
                if name not in seen:
                    seen.append(name)
                done = any(
                    c.get("type") == "Complete" and c.get("status") == "True"
                    for c in (job.get("status") or {}).get("conditions") or []
                )
                if done and name not in pushed:
                    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
                    dest = next(a.split("=", 1)[1] for a in args if a.startswith("--destination="))
                    repo, tag = dest.split("/", 1)[1].rsplit(":", 1)
                    registry.put_image(repo, tag)
                    pushed.add(name)
            await asyncio.sleep(0.5)

    task = asyncio.create_task(watch(), name="kaniko-push")
    try:
        yield seen
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def workloads_of(world: World, kind: Kind, namespace: str, run: str) -> list[Obj]:
    plural = await world.http.plural(kind.api_version, kind.kind)
    assert plural is not None
    got = await world.http.get(
        path_of(kind.api_version, plural, namespace), labelSelector=f"{RUN_ID}={run}"
    )
    return list(got.get("items") or [])


@pytest.mark.parametrize("mode", ["agent", "kueue"])
async def test_the_charts_agent_dispatches_every_installed_kind_a_build_and_a_failure(
    world: World, real_backend: RealBackend, tmp_path: Path, mode: str
) -> None:
    ns = world.namespace
    runs_ns, kaniko_ns = f"{ns}-runs", f"{ns}-kaniko"
    world.state.lease_seconds = 60  # builds take real seconds
    kinds = await installed(world.http)
    if mode == "agent":
        # quota.mode agent holds pending runs as suspended workloads: a LeaderWorkerSet has no
        # suspend field, and the agent refuses to serve it so (it runs in the kueue mode).
        kinds = [k for k in kinds if k.key != "leaderworkerset"]
    else:
        # Jobs, admitted by Kueue through a LocalQueue, prove this mode's grants (LocalQueues
        # and Workloads read, no patch); the LeaderWorkerSet runs beside, unmanaged.
        kinds = [k for k in kinds if k.key in ("job", "leaderworkerset")]
    specs = {}
    for kind in kinds:
        queue = f"q-{kind.key}"
        world.state.add_queue(queue)
        placement = "  quota:\n    leaf: team\n" if mode == "agent" else ""
        if mode == "kueue" and kind.key == "job":
            placement = "  kueue:\n    queueName: lq\n"
        specs[f"{queue}.yaml"] = queue_spec(kind, queue, runs_ns, placement)
    helm = Helm(binary=await asyncio.to_thread(install_helm), home=tmp_path / "helm-home")
    served = tmp_path / "served"
    served.mkdir()
    async with _moto() as s3_url:
        s3 = await asyncio.to_thread(
            boto3.client,
            "s3",
            endpoint_url=s3_url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        )
        await asyncio.to_thread(s3.create_bucket, Bucket="contexts")
        async with (
            RegistryServer(auth=False) as registry,
            _git(served) as git,
            namespaces(world.http, runs_ns),
        ):
            url, sha = await asyncio.to_thread(git.add, "train", {"train.py": "print('hi')\n"})
            world.state.add_job(
                "ent", "proj", "train", repo=url, commit=sha, entrypoint=["python", "train.py"]
            )
            launch = {
                "queues": sorted(f"q-{k.key}" for k in kinds),
                "entity": "ent",
                "max_jobs": -1,
                "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.2},
                "tracking": {"stop_check_seconds": 0.2},
                "stopped_run_timeout": 0,
                "builder": {
                    "type": "kaniko",
                    "build-context-store": "s3://contexts/builds",
                    "destination": f"{registry.hostport}/{REPOSITORY}",
                    "git": {"allowed_schemes": ["http"]},
                },
            }
            values = base_values(world, runs_ns, kaniko_ns) | {
                "launchConfig": yaml.safe_dump(launch),
                "queueSpecs": specs,
                "workloads": {k.key: True for k in kinds},
                "additionalEnvVars": [
                    {"name": "AWS_ENDPOINT_URL_S3", "value": s3_url},
                    {"name": "AWS_ACCESS_KEY_ID", "value": "testing"},
                    {"name": "AWS_SECRET_ACCESS_KEY", "value": "testing"},
                    {"name": "AWS_DEFAULT_REGION", "value": "us-east-1"},
                ],
            }
            if mode == "agent":
                tree = {"root": {"name": "team", "min": {"cpu": 8}, "max": {"cpu": 8}}}
                values["quota"] = {"mode": "agent", "tree": tree}
            else:
                values["quota"] = {"mode": "kueue"}
            kueue: list[tuple[str, Obj]] = kueue_objects(ns) if mode == "kueue" else []
            async with (
                _cluster_scoped(world.http, kueue),
                helm_release(helm, world.kubeconfig, ns, values, tmp_path) as manifests,
                pushed_images(world.http, kaniko_ns, registry) as kaniko_jobs,
            ):
                if mode == "kueue":
                    await world.http.create(
                        path_of("kueue.x-k8s.io/v1beta2", "localqueues", runs_ns),
                        {
                            "apiVersion": "kueue.x-k8s.io/v1beta2",
                            "kind": "LocalQueue",
                            "metadata": {"name": "lq"},
                            "spec": {"clusterQueue": f"{ns}-cq"},
                        },
                    )
                await _dispatch_everything(
                    world,
                    real_backend,
                    tmp_path,
                    manifests,
                    kinds,
                    runs_ns,
                    kaniko_jobs,
                    mode,
                    registry.hostport,
                )


async def _dispatch_everything(
    world: World,
    real_backend: RealBackend,
    tmp_path: Path,
    manifests: list[Manifest],
    kinds: list[Kind],
    runs_ns: str,
    kaniko_jobs: list[str],
    mode: str,
    registry_host: str,
) -> None:
    ns = world.namespace
    sa = service_account_of(manifests, ns)
    kubeconfig = await token_kubeconfig(
        world.http, real_backend.credentials(), ns, sa, tmp_path / "agent.kubeconfig"
    )
    runs: dict[str, tuple[Kind, str]] = {}  # run id -> (kind, what it does)
    items = {}
    for kind in kinds:
        run = f"chart-{kind.key}"
        runs[run] = (kind, "serve" if kind.serves else "succeed")
        items[run] = world.push(run_spec(run), queue=f"q-{kind.key}")
        await world.script(
            f"{RUN_ID}={run}", "succeed after=1h" if kind.serves else "succeed after=3s"
        )
    job = next(k for k in kinds if k.key == "job")
    runs["chart-fail"] = (job, "fail")
    items["chart-fail"] = world.push(run_spec("chart-fail"), queue="q-job")
    await world.script(f"{RUN_ID}=chart-fail", 'exit code=3 after=2s log="bad batch"')
    if mode == "agent":
        runs["chart-build"] = (job, "succeed")
        build = run_spec("chart-build", job="ent/proj/train:latest")
        del build["docker"]
        items["chart-build"] = world.push(build, queue="q-job")
        await world.script(f"{RUN_ID}=chart-build", "succeed after=2s")
        # Kaniko's pods carry the run id too: the last script wins, so the build succeeds.
        await world.script(IMAGE_TAG, "succeed after=2s")
    _, container = container_of(manifests)
    root = tmp_path / "container"
    mounts = await asyncio.to_thread(lay_out_mounts, manifests, root)
    environ = container_environment(manifests, mounts, root)
    environ.update(
        PATH=os.environ.get("PATH", "/usr/bin:/bin"),
        KUBECONFIG=str(kubeconfig),
        NETRC=os.devnull,
        PYTHONPATH=str(ROOT),
    )
    expected = {
        run: ItemState.FAILED if what == "fail" else ItemState.CLAIMED
        for run, (_, what) in runs.items()
    }
    async with running_container(container, environ, "chart-agent") as (process, lines):

        def log() -> str:
            return "\n".join(lines[-60:])

        await until(
            lambda: all(i.state is not ItemState.PENDING for i in items.values()),
            within=START,
            message=f"every item popped\n{log()}",
        )
        for run, (kind, what) in runs.items():
            if what != "serve":
                continue

            # Created and tracked is what the grants are about: a LeaderWorkerSet's leader
            # pods come from a StatefulSet, whose controller this control plane does not run.
            async def created(kind: Kind = kind, run: str = run) -> bool:
                return bool(await workloads_of(world, kind, runs_ns, run))

            await until(created, within=START, message=f"{run} created\n{log()}")

            def claimed(run: str = run) -> bool:
                return items[run].state is ItemState.CLAIMED

            await until(
                claimed,
                within=START,
                message=f"{run} claimed\n{log()}",
            )
            world.state.set_run_state("ent", "proj", run, "running")
            world.state.stop_run("ent", "proj", run)

            async def gone(kind: Kind = kind, run: str = run) -> bool:
                return not await workloads_of(world, kind, runs_ns, run)

            await until(gone, within=START, message=f"{run} deleted once stopped\n{log()}")
        await until(
            lambda: all(i.state is expected[run] for run, i in items.items()),
            within=300,
            message=f"every run reported\n{log()}",
        )
        for run, (kind, what) in runs.items():
            if what != "succeed":
                continue

            async def succeeded(kind: Kind = kind, run: str = run) -> bool:
                # A Job stays, Complete (for its TTL); a custom resource that ended is deleted.
                found = await workloads_of(world, kind, runs_ns, run)
                if kind.key != "job":
                    return not found
                return bool(found) and any(
                    c.get("type") == "Complete" and c.get("status") == "True"
                    for c in (found[0].get("status") or {}).get("conditions") or []
                )

            await until(succeeded, within=300, message=f"{run} succeeded\n{log()}")

        async def failed_job_settled() -> bool:
            # quota.mode agent grants patch: the failed Job is kept, marked reported. Without
            # it (kueue) the patch is refused and the agent deletes the Job instead, so that a
            # restart cannot report it twice.
            found = await workloads_of(world, job, runs_ns, "chart-fail")
            if mode != "agent":
                return not found
            notes = (found[0]["metadata"].get("annotations") or {}) if found else {}
            return notes.get("launch-agent.io/reported") == "failed"

        await until(failed_job_settled, within=120, message=f"the failed Job settled\n{log()}")
        if mode == "agent":
            (built,) = await workloads_of(world, job, runs_ns, "chart-build")
            image = built["spec"]["template"]["spec"]["containers"][0]["image"]
            assert image.startswith(f"{registry_host}/{REPOSITORY}:"), image
        forbidden_lines = [line for line in lines if "403" in line or "Forbidden" in line]
    assert process.returncode == 0, log()
    for run, item in items.items():
        assert reported_once(item, expected[run]), (run, item.history)
    failure = items["chart-fail"].failure
    assert failure is not None and "exited with code 3" in failure.message, failure
    if mode == "agent":
        assert kaniko_jobs, "no Kaniko Job ran"
    # The chart's Roles were enough: the agent was refused nothing it asked for, except the
    # patch it does not get outside quota.mode agent (it deletes reported Jobs instead).
    unexpected = [line for line in forbidden_lines if "no RBAC to annotate" not in line]
    assert not unexpected, unexpected


@contextlib.asynccontextmanager
async def _git(served: Path) -> AsyncIterator[GitHttpServer]:
    server = GitHttpServer(served)
    await asyncio.to_thread(server.__enter__)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.__exit__, None, None, None)


@contextlib.asynccontextmanager
async def _cluster_scoped(http: KubeHTTP, objects: list[tuple[str, Obj]]) -> AsyncIterator[None]:
    from tests.cluster.identity import cluster_objects

    async with cluster_objects(http, *objects):
        yield


@contextlib.asynccontextmanager
async def _moto() -> AsyncIterator[str]:
    """moto's S3 server (a child process), started and stopped off the event loop."""
    with contextlib.ExitStack() as stack:
        url = await asyncio.to_thread(stack.enter_context, moto_s3())
        try:
            yield url
        finally:
            await asyncio.to_thread(stack.close)
