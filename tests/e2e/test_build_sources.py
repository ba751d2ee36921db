"""Hostile build sources through the running agent, end to end on the sandbox.

A submitter controls `runSpec.git` and the job artifact's `wandb-job.json`. Before the fix,
`runSpec.git.version: --upload-pack=<command>` with a local repository path ran the command in
the agent's pod. Here each hostile item must end as a failed run queue item in W&B whose
message names the offending runSpec (or job artifact) path, no command runs (the marker file
never exists), git is never asked anything (the loopback git server sees no request), no
Kaniko Job is created, and the next ordinary item still builds and runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from launch_agent.sandbox.git_http import bare_repo
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e import build_support
from tests.e2e.build_support import Builds
from tests.e2e.conftest import run_spec, until

s3_endpoint = build_support.s3_endpoint
s3_builds = build_support.s3_builds

TRAIN = {"train.py": "print('training')\n", "requirements.txt": "numpy\n"}


@pytest.fixture
def marker() -> Iterator[Path]:
    """`/tmp/pwned-<uuid>`: what `touch` would create if a command ever ran."""
    path = Path(tempfile.gettempdir()) / f"pwned-{uuid.uuid4().hex}"
    yield path
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _failed(item: RunQueueItem) -> bool:
    return item.state is ItemState.FAILED


def add_job_json(b: Builds, name: str, source: dict[str, Any]) -> str:
    """A job artifact with exactly this `wandb-job.json` source (W&B stores what it is given)."""
    info = {"source_type": "repo", "source": source, "runtime": "3.11"}
    files = {"wandb-job.json": json.dumps(info).encode()}
    b.env.state.add_artifact("ent", "proj", name, "job", files=files)
    return f"ent/proj/{name}:latest"


async def test_hostile_sources_fail_their_items_and_the_next_item_still_builds(
    s3_builds: Builds, tmp_path: Path, marker: Path
) -> None:
    b, env = s3_builds, s3_builds.env
    upload_pack = f"--upload-pack=touch {marker}"
    local, _ = await asyncio.to_thread(bare_repo, tmp_path / "local", "local", TRAIN)
    served, sha = await asyncio.to_thread(b.make_repo, "train", TRAIN)
    b.git.requests.clear()
    good_job = add_job_json(
        b, "good", {"git": {"remote": served, "commit": sha}, "entrypoint": ["python", "t.py"]}
    )

    def item(run_id: str, job: str, **extra: Any) -> dict[str, Any]:
        return run_spec(run_id, docker=None, job=job, **extra)

    cases: list[tuple[dict[str, Any], list[str]]] = [
        # The attack: a local repository and an option as the version.
        (
            item("h1", good_job, git={"repo": str(local), "version": upload_pack}),
            ["runSpec.git.repo", "local path"],
        ),
        (
            item("h2", good_job, git={"repo": served, "version": upload_pack}),
            ["runSpec.git.version", "starts with '-'"],
        ),
        (
            item("h3", good_job, git={"repo": local.as_uri()}),
            ["runSpec.git.repo", "file:// URLs"],
        ),
        (
            item("h4", good_job, git={"repo": f"ext::sh -c touch% {marker}"}),
            ["runSpec.git.repo"],
        ),
        # The same values from the job artifact instead of the run spec.
        (
            item(
                "h5",
                add_job_json(b, "evil-commit", {"git": {"remote": served, "commit": upload_pack}}),
            ),
            ["job artifact ent/proj/evil-commit:latest: source.git.commit", "starts with '-'"],
        ),
        (
            item(
                "h6",
                add_job_json(b, "evil-remote", {"git": {"remote": str(local), "commit": sha}}),
            ),
            ["job artifact ent/proj/evil-remote:latest: source.git.remote", "local path"],
        ),
        (
            item(
                "h7",
                add_job_json(
                    b,
                    "evil-dockerfile",
                    {"git": {"remote": served, "commit": sha}, "dockerfile": "../../etc/passwd"},
                ),
            ),
            ["job artifact ent/proj/evil-dockerfile:latest: source.dockerfile", "'..'"],
        ),
        (
            item(
                "h8",
                good_job,
                overrides={"dockerfile": "/var/run/secrets/kubernetes.io/token"},
            ),
            ["runSpec.overrides.dockerfile", "relative path"],
        ),
        # The job's name reaches the wandb SDK: checked before the job artifact is read.
        (item("h9", "ent/proj/../../x:latest"), ["runSpec.job", "is not an artifact name"]),
    ]
    async with env.running(env.agent(b.config())) as agent:
        # One at a time: each refusal is followed by the agent taking the next item.
        for spec, expected in cases:
            hostile = env.push(spec)
            await until(partial(_failed, hostile), within=30)
            assert hostile.failure is not None
            assert hostile.failure.stage == "agent"
            message = hostile.failure.message
            assert message.startswith("cannot build this run: "), message
            for text in expected:
                assert text in message, (text, message)
        assert not await asyncio.to_thread(marker.exists)
        assert b.git.requests == []  # git was never run against anything
        assert b.kaniko_jobs == []

        # The agent goes on: an ordinary item is built and run.
        ordinary = env.push(item("ok", good_job))
        await until(
            lambda: ordinary.state is ItemState.CLAIMED,
            advance=lambda: env.advance(1),
            within=30,
            message="ordinary item acked",
        )
        await until(
            lambda: agent.runs.get(ordinary.id) is None,
            advance=lambda: env.advance(1),
            message="ordinary run finished",
        )
        assert ordinary.failure is None
        assert len(b.kaniko_jobs) == 1
        assert b.git.requests != []
    assert not await asyncio.to_thread(marker.exists)
    assert await b.leftovers() == ([], [], [])
