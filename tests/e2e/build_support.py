"""Fixtures for builds through the agent: context stores, the sandbox registry, "Kaniko's push".

- S3 is moto's server (one per session, a fresh bucket per test); the agent's boto3 finds it
  through `AWS_ENDPOINT_URL_S3`, as any S3-compatible endpoint would be configured. GCS is
  `gcp-storage-emulator`, found through `STORAGE_EMULATOR_HOST` (google-cloud-storage's own).
- The registry is the sandbox's Docker Registry v2 server with token auth; the agent reads its
  pull credentials from `$DOCKER_CONFIG/config.json`, as it would from a mounted Secret.
- The simulated cluster runs the Kaniko Job with its scripted outcome; `sandbox/kaniko.py`
  plays the executor: when a build Job completes its `--destination` is pushed to the registry
  (a manifest of that Job's own, so each build has its own digest) and the container's
  termination message is that digest (Kaniko's `--digest-file`). It also records every build
  Job ever created, so a test can count builds after the Jobs are deleted.
- Job artifacts (`wandb-job.json`) and code artifacts are seeded in the sandbox W&B server;
  git sources are bare repositories made in the test, served over smart HTTP by the sandbox's
  `GitHttpServer` on loopback (the agent refuses local paths and `file://` from submitters);
  the builder's `git.allowed_schemes` adds `http` for it, the admin's knob.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from launch_agent.model.config import AgentConfig
from launch_agent.sandbox.kaniko import SimulatedKaniko
from launch_agent.sandbox.registry import RegistryServer
from tests.e2e.conftest import Env
from tests.git_repos import GitHttpServer
from tests.loopback_stores import gcs_emulator, moto_s3

KANIKO_NS = "kaniko"
REPO = "ml/train"
GCS_BUCKET = "ctx-gcs"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    with moto_s3() as url:
        yield url


@pytest.fixture(scope="session")
def gcs_host() -> Iterator[str]:
    with gcs_emulator(GCS_BUCKET) as url:
        yield url


@dataclass
class Builds:
    """The build side of one e2e test: what the agent talks to and what it left behind."""

    env: Env
    registry: RegistryServer
    store: str  # the build-context-store URI
    git: GitHttpServer
    kaniko: SimulatedKaniko
    s3: Any = None
    bucket: str = ""

    @property
    def kaniko_jobs(self) -> list[dict[str, Any]]:
        """Every Kaniko Job ever created."""
        return self.kaniko.jobs

    def pushed_digest(self, tag: str) -> str:
        """The digest the (last) build of `tag` pushed, as Kaniko reported it."""
        return next(d for _, t, d in reversed(self.kaniko.pushed) if t == tag)

    def record(self, agent: str = "test-agent") -> dict[str, str]:
        """The agent's build record (its ConfigMap's data); empty when there is none."""
        found = self.env.kube.objects.list("configmaps", namespace="default")
        name = f"{agent}-image-digests"
        return next((dict(c.get("data") or {}) for c in found if c["metadata"]["name"] == name), {})

    @property
    def destination(self) -> str:
        return f"{self.registry.hostport}/{REPO}"

    def make_repo(self, name: str, files: dict[str, str]) -> tuple[str, str]:
        """A served repository with one commit of `files`: (http URL, commit sha)."""
        return self.git.add(name, files)

    def config(self, **overrides: Any) -> AgentConfig:
        builder = {
            "type": "kaniko",
            "build-context-store": self.store,
            "destination": self.destination,
            "git": {"allowed_schemes": ["http"]},
        }
        return self.env.config(
            builder=builder,
            kaniko_namespace=KANIKO_NS,
            kaniko_service_account="kaniko-builder",
            **overrides,
        )

    def build_jobs(self) -> list[dict[str, Any]]:
        """Kaniko Jobs that exist now."""
        return self.env.kube.objects.list("jobs", namespace=KANIKO_NS)

    def build_pods(self) -> list[dict[str, Any]]:
        return self.env.kube.objects.list("pods", namespace=KANIKO_NS)

    async def context_objects(self) -> list[str]:
        if self.store.startswith("s3://"):
            listing = await asyncio.to_thread(self.s3.list_objects_v2, Bucket=self.bucket)
            return [o["Key"] for o in listing.get("Contents", [])]
        from google.cloud import storage

        def names() -> list[str]:
            return [b.name for b in storage.Client().list_blobs(GCS_BUCKET)]

        return await asyncio.to_thread(names)

    async def leftovers(self) -> tuple[list[str], list[str], list[str]]:
        """(build Jobs, build pods, context objects) still there: all empty after a build."""
        return (
            [j["metadata"]["name"] for j in self.build_jobs()],
            [p["metadata"]["name"] for p in self.build_pods()],
            await self.context_objects(),
        )

    def manifest_heads(self, status: int) -> int:
        """HEAD requests on manifests the registry answered with `status`."""
        return sum(
            1
            for method, path, code in self.registry.requests
            if method == "HEAD" and "/manifests/" in path and code == status
        )


@contextlib.asynccontextmanager
async def _git_server(tmp_path: Path) -> AsyncIterator[GitHttpServer]:
    root = tmp_path / "served"
    root.mkdir()
    server = GitHttpServer(root)
    await asyncio.to_thread(server.__enter__)
    try:
        yield server
    finally:
        await asyncio.to_thread(server.__exit__, None, None, None)


async def _common(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, registry: RegistryServer
) -> None:
    # Builds take real seconds (git, packing, uploads) while the manual clock stands still: a
    # W&B lease long enough that no item is offered twice in these tests.
    env.state.lease_seconds = 60
    docker = tmp_path / "docker"
    docker.mkdir()
    auth = base64.b64encode(b"ci:pw").decode()
    (docker / "config.json").write_text(json.dumps({"auths": {registry.hostport: {"auth": auth}}}))
    monkeypatch.setenv("DOCKER_CONFIG", str(docker))
    env.kube.objects.create(
        "namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KANIKO_NS}}, ""
    )
    # The builds run as `kaniko_service_account`; the API server refuses pods naming a
    # ServiceAccount that does not exist (the ServiceAccount admission plugin).
    env.kube.objects.create("serviceaccounts", {"metadata": {"name": "kaniko-builder"}}, KANIKO_NS)


@pytest.fixture
async def s3_builds(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, s3_endpoint: str
) -> AsyncIterator[Builds]:
    """Builds with the context store in S3 (moto)."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL_S3": s3_endpoint,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = f"ctx-{tmp_path.name.lower().replace('_', '-')[-40:].strip('-')}"
    s3 = await asyncio.to_thread(
        boto3.client, "s3", endpoint_url=s3_endpoint, region_name="us-east-1"
    )
    await asyncio.to_thread(s3.create_bucket, Bucket=bucket)
    async with RegistryServer(users={"ci": "pw"}) as registry, _git_server(tmp_path) as git:
        await _common(env, tmp_path, monkeypatch, registry)
        kaniko = SimulatedKaniko(env.kube.store, env.cluster, registry)
        builds = Builds(env, registry, f"s3://{bucket}/contexts", git, kaniko, s3=s3, bucket=bucket)
        try:
            yield builds
        finally:
            kaniko.close()


@pytest.fixture
async def gcs_builds(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gcs_host: str
) -> AsyncIterator[Builds]:
    """Builds with the context store in GCS (the emulator)."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_host)
    async with RegistryServer(users={"ci": "pw"}) as registry, _git_server(tmp_path) as git:
        await _common(env, tmp_path, monkeypatch, registry)
        kaniko = SimulatedKaniko(env.kube.store, env.cluster, registry)
        builds = Builds(env, registry, f"gs://{GCS_BUCKET}/contexts", git, kaniko)
        try:
            yield builds
        finally:
            kaniko.close()
