"""`ImageBuilder` end to end on loopback: sandbox API server + simulated cluster (real time),
S3 on moto, the sandbox registry (token auth) and git repositories made in the test.

The simulated cluster runs the Kaniko Job with a scripted outcome; Kaniko's push and its
digest file are played by `sandbox/kaniko.py` (the registry gets a manifest of that Job's own
when it completes; the container's termination message is its digest). The builder keeps its
record of the digests it built in a ConfigMap of the sandbox API server.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from launch_agent.adapters.builder import (
    BuildFailed,
    BuildSpec,
    Credentials,
    ImageBuilder,
)
from launch_agent.adapters.digest_record import DigestRecord
from launch_agent.adapters.kube import KubeClient
from launch_agent.adapters.object_store import ObjectStore
from launch_agent.adapters.registry import RegistryClient
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.build import SourceKind, parse_destination
from launch_agent.model.config import BuilderConfig
from launch_agent.render.kaniko import IMAGE_TAG, KanikoSettings
from launch_agent.sandbox.cluster import RealClock, SimulatedCluster
from launch_agent.sandbox.kaniko import SimulatedKaniko
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.registry import RegistryServer
from launch_agent.sandbox.wandb import WandbServer
from tests.git_repos import LOOPBACK_GIT, GitHttpServer

NS = "kaniko"
RECORD = "agent-a-image-digests"


@dataclass
class Rig:
    kube: KubeApiServer
    cluster: SimulatedCluster
    registry: RegistryServer
    builder: ImageBuilder
    s3: Any
    bucket: str
    jobs_created: list[str]
    wandb: WandbServer
    job_created: asyncio.Event
    kaniko: SimulatedKaniko

    def pinned(self, tag: str) -> str:
        """The image a build of `tag` pushed, by the digest Kaniko reported."""
        digest = next(d for _, t, d in reversed(self.kaniko.pushed) if t == tag)
        return f"{self.registry.hostport}/ml/train@{digest}"


def count_jobs(kube: KubeApiServer, created: list[str], event: asyncio.Event) -> None:
    def on_write(storage: str, kind: str, obj: dict[str, Any]) -> None:
        if obj.get("kind") != "Job" or IMAGE_TAG not in obj["metadata"].get("labels", {}):
            return
        if kind == "ADDED":
            created.append(obj["metadata"]["name"])
            event.set()

    kube.store.listeners.append(on_write)


@pytest.fixture
async def rig(tmp_path: Path, s3_endpoint: str, s3_bucket: str) -> AsyncIterator[Rig]:
    async with (
        KubeApiServer(host="127.0.0.1", port=0, bookmark_interval=60.0) as kube,
        SimulatedCluster(
            kube, clock=RealClock(), default_outcome="succeed after=0.3s start=0.1s"
        ) as cluster,
        RegistryServer(users={"ci": "pw"}) as registry,
        WandbServer() as wandb_server,
    ):
        created: list[str] = []
        job_created = asyncio.Event()
        count_jobs(kube, created, job_created)
        kaniko = SimulatedKaniko(kube.store, cluster, registry)
        path = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url, NS)
        policy = RetryPolicy(base_delay=0.01, max_delay=0.05)
        store = ObjectStore(f"s3://{s3_bucket}/ctx", endpoint_url=s3_endpoint, region="us-east-1")
        builder_config = BuilderConfig.model_validate(
            {"type": "kaniko", "build-context-store": f"s3://{s3_bucket}/ctx"}
        )
        settings = KanikoSettings(builder_config, NS, "kaniko-builder")
        dest = parse_destination(f"{registry.hostport}/ml/train")
        s3 = await asyncio.to_thread(
            boto3.client, "s3", endpoint_url=s3_endpoint, region_name="us-east-1"
        )
        async with (
            await KubeClient.from_kubeconfig(str(path), policy=policy) as client,
            RegistryClient({registry.hostport: ("ci", "pw")}) as reg,
            ImageBuilder(
                client,
                store,
                reg,
                settings,
                dest,
                agent="agent-a",
                workdir=tmp_path,
                credentials=Credentials(wandb_server.url, wandb_server.api_key, LOOPBACK_GIT),
                record=DigestRecord(client, NS, RECORD, agent="agent-a"),
            ) as builder,  # fmt: skip
        ):
            await client.create(
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}, NS
            )
            # The ServiceAccount admission plugin refuses pods naming one that does not exist.
            await client.create(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": "kaniko-builder"},
                },
                NS,
            )
            yield Rig(
                kube, cluster, registry, builder, s3, s3_bucket, created, wandb_server,
                job_created, kaniko,
            )  # fmt: skip


def spec(url: str, run_id: str = "run-1", ref: str | None = None, **kw: Any) -> BuildSpec:
    return BuildSpec(
        run_id, SourceKind.GIT, url, ref, base_image="python:3.11-slim",
        entrypoint=("python", "train.py"), **kw,
    )  # fmt: skip


async def leftovers(rig: Rig) -> tuple[list[str], list[str]]:
    jobs = [j["metadata"]["name"] for j in rig.kube.store.list(rig.kube.store.rt("jobs"), NS)]
    listing = await asyncio.to_thread(rig.s3.list_objects_v2, Bucket=rig.bucket)
    return jobs, [o["Key"] for o in listing.get("Contents", [])]


async def test_build_then_skip(rig: Rig, git_repo: tuple[str, str, str]) -> None:
    origin, first, _ = git_repo
    built = await rig.builder.build(spec(origin, ref=first))
    (job,) = rig.jobs_created
    assert built.image == rig.pinned(job.rsplit("-", 1)[1])
    assert not built.cached and built.warnings == ()
    assert await leftovers(rig) == ([], [])
    # The same job again: the registry's digest is on the record, no second Job.
    again = await rig.builder.build(spec(origin, run_id="run-2", ref=first))
    assert again.image == built.image and again.cached
    assert len(rig.jobs_created) == 1
    assert (rig.builder.stats.builds, rig.builder.stats.skipped) == (1, 1)
    # Another commit is another image.
    moved = await rig.builder.build(spec(origin, run_id="run-3"))
    assert moved.image != built.image
    assert len(rig.jobs_created) == 2


async def test_concurrent_requests_share_one_build(
    rig: Rig, git_repo: tuple[str, str, str]
) -> None:
    origin, first, _ = git_repo
    images = await asyncio.gather(
        *(rig.builder.build(spec(origin, run_id=f"run-{i}", ref=first)) for i in range(5))
    )
    assert len(set(images)) == 1
    assert len(rig.jobs_created) == 1
    assert rig.builder.stats.builds == 1
    assert await leftovers(rig) == ([], [])


async def test_failed_build_raises_with_the_log_tail(
    rig: Rig, git_repo: tuple[str, str, str]
) -> None:
    origin, first, _ = git_repo
    rig.cluster.script(
        f"{IMAGE_TAG}",
        'fail after=0.2s start=0.1s log="Step 3/5 : RUN pip install nope" '
        'log="error building image: exit status 1"',
    )
    with pytest.raises(BuildFailed) as caught:
        await rig.builder.build(spec(origin, ref=first))
    assert caught.value.stage == "build"
    assert "error building image: exit status 1" in caught.value.log_tail
    assert "BackoffLimitExceeded" in caught.value.reason
    assert not caught.value.explained  # the log tail explains it, with the Dockerfile advice
    assert await leftovers(rig) == ([], [])
    assert rig.builder.stats.failed == 1


async def test_bad_source_fails_before_any_job(rig: Rig, git_server: GitHttpServer) -> None:
    with pytest.raises(BuildFailed, match="preparing the build context: git fetch"):
        await rig.builder.build(spec(git_server.repo_url("missing")))
    assert rig.jobs_created == []


@pytest.mark.parametrize(
    ("url", "ref", "reason"),
    [
        ("LOCAL", None, "is a local path"),
        ("FILE", None, "file:// URLs"),
        ("SERVED", "--upload-pack=touch MARKER", "starts with '-'"),
        ("ext::sh -c touch% MARKER", None, "whitespace"),
        ("https://example.com/r.git", None, "the https scheme is not allowed"),
    ],
)
async def test_a_hostile_source_never_reaches_git(
    rig: Rig,
    git_repo: tuple[str, str, str],
    git_server: GitHttpServer,
    tmp_path: Path,
    url: str,
    ref: str | None,
    reason: str,
) -> None:
    """The builder refuses what spec_for would have refused, whoever calls it: no git
    request reaches the server, no command runs, no Job is created."""
    marker = tmp_path / "pwned"
    bare = git_server.root / "repo.git"
    url = {"LOCAL": str(bare), "FILE": bare.as_uri(), "SERVED": git_repo[0]}.get(url, url)
    url = url.replace("MARKER", str(marker))
    ref = ref.replace("MARKER", str(marker)) if ref else None
    before = len(git_server.requests)
    with pytest.raises(BuildFailed, match=reason):
        await rig.builder.build(spec(url, ref=ref))
    assert not marker.exists()
    assert len(git_server.requests) == before
    assert rig.jobs_created == []


async def test_image_source_needs_no_build(rig: Rig) -> None:
    got = await rig.builder.build(BuildSpec("run-1", SourceKind.IMAGE, "busybox:1.36"))
    assert got.image == "busybox:1.36"
    assert rig.jobs_created == []


async def test_code_artifact_build_then_skip(rig: Rig) -> None:
    files = {"train.py": b"print('art')\n", "requirements.txt": b"numpy\n"}
    rig.wandb.state.add_artifact("ent", "proj", "code-train", "code", files=files)
    art = BuildSpec(
        "run-a", SourceKind.ARTIFACT, "wandb-artifact://ent/proj/code-train:latest",
        base_image="python:3.11-slim", entrypoint=("python", "train.py"),
    )  # fmt: skip
    built = await rig.builder.build(art)
    assert len(rig.jobs_created) == 1
    assert (await rig.builder.build(art)).image == built.image
    assert len(rig.jobs_created) == 1
    assert await leftovers(rig) == ([], [])


async def test_a_cancelled_caller_does_not_cancel_the_shared_build(
    rig: Rig, git_repo: tuple[str, str, str]
) -> None:
    origin, first, _ = git_repo
    rig.cluster.script(IMAGE_TAG, "succeed after=1s start=0.1s")
    quitter = asyncio.create_task(rig.builder.build(spec(origin, ref=first)), name="q")
    stayer = asyncio.create_task(
        rig.builder.build(spec(origin, run_id="run-2", ref=first)), name="s"
    )
    async with asyncio.timeout(10):
        await rig.job_created.wait()
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    built = await stayer
    assert built.image == rig.pinned(rig.jobs_created[0].rsplit("-", 1)[1])
    assert len(rig.jobs_created) == 1
    assert await leftovers(rig) == ([], [])


async def test_aclose_cancels_builds_and_cleans_up(
    rig: Rig, git_repo: tuple[str, str, str]
) -> None:
    origin, first, _ = git_repo
    rig.cluster.script(IMAGE_TAG, "succeed after=60s")
    caller = asyncio.create_task(rig.builder.build(spec(origin, ref=first)), name="c")
    async with asyncio.timeout(10):
        await rig.job_created.wait()
    await rig.builder.aclose()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert await leftovers(rig) == ([], [])


def sibling(
    rig: Rig, tmp_path: Path, settings: KanikoSettings | None = None, **kw: Any
) -> ImageBuilder:
    b = rig.builder
    return ImageBuilder(b.kube, b.store, b.registry, settings or b.settings, b.destination,
                        workdir=tmp_path, credentials=b.credentials, record=b.record,
                        **kw)  # fmt: skip


def build_watches(builder: ImageBuilder) -> list[tuple[str, int, int]]:
    assert builder.informers is not None
    return sorted(
        (i.resource.plural, i.stats.watches, i.stats.relists_after_gone)
        for i in builder.informers.informers.values()
    )


async def test_the_wait_resumes_when_the_watch_ends(
    rig: Rig, git_repo: tuple[str, str, str], tmp_path: Path
) -> None:
    # Watches of 1 s against a 2.5 s build: the informers' streams end twice and are resumed.
    origin, first, _ = git_repo
    rig.cluster.script(IMAGE_TAG, "succeed after=2.5s start=0.1s")
    async with sibling(rig, tmp_path, watch_timeout=1) as builder:
        built = await builder.build(spec(origin, ref=first))
        watches = build_watches(builder)
    assert built.image.startswith(rig.registry.hostport)
    assert [w[0] for w in watches] == ["jobs", "pods"]
    assert all(count >= 3 for _, count, _ in watches), watches
    assert await leftovers(rig) == ([], [])


async def test_a_dropped_stream_and_a_410_do_not_hang_the_build(
    rig: Rig, git_repo: tuple[str, str, str]
) -> None:
    origin, first, _ = git_repo
    rig.cluster.script(IMAGE_TAG, "succeed after=1.5s start=0.1s")
    task = asyncio.create_task(rig.builder.build(spec(origin, ref=first)), name="b")
    async with asyncio.timeout(10):
        await rig.job_created.wait()
    # History compacted and every stream cut: the informers' resume answers 410, they relist.
    rig.kube.compact()
    assert rig.kube.drop_watches() == 2
    async with asyncio.timeout(20):
        built = await task
    assert built.image.startswith(rig.registry.hostport)
    assert all(relists >= 1 for _, _, relists in build_watches(rig.builder))
    assert await leftovers(rig) == ([], [])


async def test_a_missing_docker_config_secret_fails_at_once_naming_it(
    rig: Rig, git_repo: tuple[str, str, str], tmp_path: Path
) -> None:
    origin, first, _ = git_repo
    # No Secret kaniko-config in the namespace: kubelet would leave the pod ContainerCreating
    # on FailedMount (the sandbox's does too), so the builder reads the Secret first.
    settings = KanikoSettings(rig.builder.settings.builder, NS, "kaniko-builder", "kaniko-config")
    async with sibling(rig, tmp_path, settings) as builder:
        with pytest.raises(BuildFailed) as caught:
            async with asyncio.timeout(20):
                await builder.build(spec(origin, ref=first))
    reason = caught.value.reason
    assert "Secret kaniko-config (the registry's docker config Secret" in reason
    assert f"missing in namespace {NS}" in reason
    assert caught.value.log_tail == ""  # the executor never started
    assert caught.value.explained
    assert rig.jobs_created == []
    assert await leftovers(rig) == ([], [])


async def test_an_unschedulable_build_pod_fails_after_the_timeout(
    rig: Rig, git_repo: tuple[str, str, str], tmp_path: Path
) -> None:
    origin, first, _ = git_repo
    said = "0/2 nodes are available: 2 Insufficient cpu."
    rig.cluster.script(IMAGE_TAG, f'unschedulable message="{said}"')
    loop = asyncio.get_running_loop()
    async with sibling(rig, tmp_path, unschedulable_timeout=0.5) as builder:
        started = loop.time()
        with pytest.raises(BuildFailed) as caught:
            async with asyncio.timeout(20):
                await builder.build(spec(origin, ref=first))
        waited = loop.time() - started
    # No event comes for a pod that stays Pending: the builder re-assessed at the deadline.
    assert waited >= 0.5
    assert said in caught.value.reason
    assert "could not be scheduled" in caught.value.reason
    assert await leftovers(rig) == ([], [])


async def test_a_job_deleted_under_the_build_fails_it(
    rig: Rig, git_repo: tuple[str, str, str], tmp_path: Path
) -> None:
    origin, first, _ = git_repo
    rig.cluster.script(IMAGE_TAG, "succeed after=60s")
    task = asyncio.create_task(rig.builder.build(spec(origin, ref=first)), name="b")
    async with asyncio.timeout(10):
        await rig.job_created.wait()
    store = rig.kube.store
    store.delete(store.rt("jobs"), NS, rig.jobs_created[0])
    with pytest.raises(BuildFailed, match="was deleted"):
        await task
    assert await leftovers(rig) == ([], [])
