"""W&B's PVC build contexts through the agent: the context is written into the claim's mount,
the Kaniko Job mounts the claim at /context and builds `tar:///context/<tag>.tgz`, and the
context is gone after the build (wandb's kaniko_builder.py: `WANDB_LAUNCH_KANIKO_PVC_NAME`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from launch_agent.render.kaniko import IMAGE_TAG
from launch_agent.sandbox.kaniko import SimulatedKaniko
from launch_agent.sandbox.registry import RegistryServer
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.build_support import Builds, _common, _git_server
from tests.e2e.conftest import Env, until
from tests.e2e.test_builds import git_job, image_of, job_spec, workload_of

CLAIM = "kaniko-contexts"


@pytest.fixture
async def pvc_builds(
    env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Builds, Path]]:
    mount = tmp_path / "kaniko-mount"
    mount.mkdir()
    async with RegistryServer(users={"ci": "pw"}) as registry, _git_server(tmp_path) as git:
        await _common(env, tmp_path, monkeypatch, registry)
        kaniko = SimulatedKaniko(env.kube.store, env.cluster, registry)
        try:
            yield Builds(env, registry, "tar:///context", git, kaniko), mount
        finally:
            kaniko.close()


async def test_a_build_context_goes_through_the_pvc(pvc_builds: tuple[Builds, Path]) -> None:
    b, mount = pvc_builds
    env = b.env
    job = await git_job(b)
    item = env.push(job_spec("p1", job))
    config = b.config(kaniko_pvc_name=CLAIM, kaniko_pvc_mount_path=str(mount))
    async with env.running(env.agent(config)) as agent:
        # The simulated cluster runs the build Job only when its clock moves: the context is
        # in the claim, whole, while the Job exists.
        await until(lambda: b.kaniko_jobs, message="build Job created")
        seen = await asyncio.to_thread(lambda: sorted(p.name for p in mount.iterdir()))
        workload = await until(
            lambda: workload_of(env, item), advance=lambda: env.advance(1), within=30
        )
        (kaniko,) = b.kaniko_jobs
        tag = kaniko["metadata"]["labels"][IMAGE_TAG]
        assert image_of(workload) == f"{b.destination}@{b.pushed_digest(tag)}"
        pod = kaniko["spec"]["template"]["spec"]
        assert f"--context=tar:///context/{tag}.tgz" in pod["containers"][0]["args"]
        claim = {"claimName": CLAIM, "readOnly": True}
        assert {"name": "kaniko-pvc", "persistentVolumeClaim": claim} in pod["volumes"]
        mounts = pod["containers"][0]["volumeMounts"]
        assert {"name": "kaniko-pvc", "mountPath": "/context", "readOnly": True} in mounts
        # The context was in the claim, whole, when the Job was created.
        assert seen == [f"{tag}.tgz"]
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        await until(
            lambda: agent.runs.get(item.id) is None,
            advance=lambda: env.advance(1),
            message="run finished",
        )
    assert item.failure is None
    assert await asyncio.to_thread(lambda: list(mount.iterdir())) == [], "context deleted"
    assert b.build_jobs() == []
