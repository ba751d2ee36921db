"""The build side of the chaos bench: runs that name a job artifact and no image.

As the e2e build tests set it up (`tests/e2e/build_support.py`, `test_build_contexts.py`):
the job's source is a git repository on the sandbox's smart-HTTP server (the builder allows
`http` for it, the admin's knob); contexts go through a PVC (W&B's `kanikoPvcName`: the
agent writes `<tag>.tgz` into the claim's mount, here a local directory, so what is left in it
is visible); images go to the sandbox registry with token auth, the agents reading their
credentials from `$DOCKER_CONFIG/config.json`; the simulated cluster runs each Kaniko Job, and
`sandbox/kaniko.py` plays the executor's push and its digest file (the chaos run attaches it).

`jobs` artifacts of distinct commits, so several builds happen, and later runs of a job find
its image in the registry and skip the build.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch_agent.sandbox.git_http import GitHttpServer
from launch_agent.sandbox.registry import RegistryServer
from launch_agent.sandbox.wandb import LaunchState

KANIKO_NS = "kaniko"
SERVICE_ACCOUNT = "kaniko-builder"
CLAIM = "kaniko-contexts"
REPOSITORY = "ml/train"
IMAGE_TAG = "launch-agent.io/image-tag"  # render/kaniko.IMAGE_TAG, on the Job and its pods


@dataclass
class BuildWorld:
    registry: RegistryServer
    git: GitHttpServer
    mount: Path  # the claim's mount in the agents: contexts left here are orphans
    docker_config: Path
    jobs: list[str] = field(default_factory=list)  # "ent/proj/name:latest"
    kaniko_jobs: list[str] = field(default_factory=list)  # every one ever created

    def agent_config(self) -> dict[str, Any]:
        return {
            "builder": {
                "type": "kaniko",
                "build-context-store": "tar:///context",
                "destination": f"{self.registry.hostport}/{REPOSITORY}",
                "git": {"allowed_schemes": ["http"]},
            },
            "kaniko_namespace": KANIKO_NS,
            "kaniko_service_account": SERVICE_ACCOUNT,
            "kaniko_pvc_name": CLAIM,
            "kaniko_pvc_mount_path": str(self.mount),
        }

    def environment(self) -> dict[str, str]:
        return {"DOCKER_CONFIG": str(self.docker_config)}

    def listener(self, storage: str, kind: str, obj: dict[str, Any]) -> None:
        """Counts Kaniko Jobs (the push is `SimulatedKaniko`'s)."""
        meta = obj.get("metadata") or {}
        if storage != "batch/jobs" or IMAGE_TAG not in (meta.get("labels") or {}):
            return
        if kind == "ADDED":
            self.kaniko_jobs.append(str(meta.get("name")))

    def contexts_left(self) -> list[str]:
        return sorted(p.name for p in self.mount.iterdir())


def _prepare(root: Path, registry: RegistryServer) -> tuple[Path, Path]:
    mount = root / "kaniko-mount"
    mount.mkdir()
    docker = root / "docker"
    docker.mkdir()
    auth = base64.b64encode(b"ci:pw").decode()
    (docker / "config.json").write_text(json.dumps({"auths": {registry.hostport: {"auth": auth}}}))
    return mount, docker


@contextlib.asynccontextmanager
async def build_world(
    root: Path, state: LaunchState, kube_objects: Any, *, entity: str, project: str, jobs: int
) -> AsyncIterator[BuildWorld]:
    served = root / "served"
    await asyncio.to_thread(served.mkdir)
    git = GitHttpServer(served)
    await asyncio.to_thread(git.__enter__)
    try:
        async with RegistryServer(users={"ci": "pw"}) as registry:
            mount, docker = await asyncio.to_thread(_prepare, root, registry)
            world = BuildWorld(registry, git, mount, docker)
            kube_objects.create("namespaces", {"metadata": {"name": KANIKO_NS}}, "")
            # The builds run as this ServiceAccount; the API server refuses pods naming one
            # that does not exist (the ServiceAccount admission plugin).
            kube_objects.create(
                "serviceaccounts", {"metadata": {"name": SERVICE_ACCOUNT}}, KANIKO_NS
            )
            for n in range(jobs):
                name = f"train-{n}"
                files = {"train.py": f"print('chaos {n}')\n", "requirements.txt": "numpy\n"}
                url, sha = await asyncio.to_thread(git.add, name, files)
                state.add_job(
                    entity, project, name, repo=url, commit=sha, entrypoint=["python", "train.py"]
                )
                world.jobs.append(f"{entity}/{project}/{name}:latest")
            yield world
    finally:
        await asyncio.to_thread(git.__exit__, None, None, None)
