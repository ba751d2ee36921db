"""A build cut short by a SIGKILL leaves its Kaniko Job and context behind; the next build of
the same image cleans them up.

Found by `launch-agent bench chaos --runs 40 --kills 7 --seed 4`: the leader was killed while
its Kaniko Job ran; Kaniko pushed, so the successor found the image in the registry and
skipped the build, and nothing ever deleted the dead agent's Job or its context object.
"""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from launch_agent.sandbox.wandb import ItemState
from tests.e2e import build_support
from tests.e2e.build_support import KANIKO_NS, REPO, Builds
from tests.e2e.conftest import until
from tests.e2e.test_builds import git_job, image_of, job_spec, tag_of, workload_of

s3_endpoint = build_support.s3_endpoint
s3_builds = build_support.s3_builds


def _as_left_by_a_killed_agent(job: dict[str, Any]) -> dict[str, Any]:
    """The Kaniko Job as the API server kept it after its agent died: finished, not deleted."""
    left = copy.deepcopy(job)
    for key in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
        left["metadata"].pop(key, None)
    left["metadata"].pop("finalizers", None)
    left.pop("status", None)
    return left


async def _built_once(b: Builds) -> tuple[str, str]:
    """A git job built and run to its end by one agent: (the job, its image tag); the
    agent's record has the digest it built."""
    env = b.env
    job = await git_job(b)
    first = env.push(job_spec("first", job))
    async with env.running(env.agent(b.config())) as agent:
        workload = await until(
            lambda: workload_of(env, first), advance=lambda: env.advance(1), within=30
        )
        tag = tag_of(b.kaniko_jobs[0])
        assert image_of(workload) == f"{b.destination}@{b.pushed_digest(tag)}"
        await until(
            lambda: agent.runs.get(first.id) is None,
            advance=lambda: env.advance(1),
            message="first run finished",
        )
    assert await b.leftovers() == ([], [], [])
    return job, tag


async def _leave_context(b: Builds, tag: str) -> None:
    """The context object as the killed agent uploaded it."""
    key = f"contexts/{tag}.tgz"
    await asyncio.to_thread(b.s3.put_object, Bucket=b.bucket, Key=key, Body=b"context")
    assert await b.context_objects() == [key]


async def test_a_build_job_and_context_left_by_a_killed_agent_go_with_the_next_build(
    s3_builds: Builds,
) -> None:
    b, env = s3_builds, s3_builds.env
    job, tag = await _built_once(b)
    # What an agent SIGKILLed during that build would have left: its Kaniko Job (Kaniko had
    # pushed: the image is in the registry) and the context it uploaded.
    (kaniko,) = b.kaniko_jobs
    env.kube.objects.create("jobs", _as_left_by_a_killed_agent(kaniko), KANIKO_NS)
    await _leave_context(b, tag)
    assert [j["metadata"]["name"] for j in b.build_jobs()] == [kaniko["metadata"]["name"]]

    second = env.push(job_spec("second", job))
    async with env.running(env.agent(b.config())):
        again = await until(
            lambda: workload_of(env, second), advance=lambda: env.advance(1), within=30
        )
        # The build was skipped: the registry's digest is one of this agent's builds (the
        # first, on the record, or the re-created leftover's, which its Job reports).
        assert image_of(again) == f"{b.destination}@{b.registry.digest(REPO, tag)}"
        await until(lambda: second.state is ItemState.CLAIMED, message="second ack")
        await until(
            lambda: not b.build_jobs(), advance=lambda: env.advance(1), message="leftover Job"
        )
    assert len(b.kaniko_jobs) == 2  # the first build's and the re-created leftover: no new one
    assert await b.leftovers() == ([], [], [])


async def test_a_context_left_by_an_agent_killed_between_its_two_deletes_goes_with_the_next_build(
    s3_builds: Builds,
) -> None:
    """Found by the short chaos test in a fresh-clone CI run (seed 2): a kill aimed at
    clean-up hit the DELETE of the Kaniko Job, before the context's delete. The successor
    skipped the build (the image exists) and saw no Job left, so it kept the context."""
    b, env = s3_builds, s3_builds.env
    job, tag = await _built_once(b)
    await _leave_context(b, tag)  # and no Kaniko Job: its delete went through

    second = env.push(job_spec("second", job))
    async with env.running(env.agent(b.config())):
        again = await until(
            lambda: workload_of(env, second), advance=lambda: env.advance(1), within=30
        )
        # Skipped: the registry's digest is on the record.
        assert image_of(again) == f"{b.destination}@{b.pushed_digest(tag)}"
        await until(lambda: second.state is ItemState.CLAIMED, message="second ack")
        # The build's skip deletes it before the build returns, so before the workload exists.
        assert await b.context_objects() == []
    assert len(b.kaniko_jobs) == 1  # no build ran for the second run
    assert await b.leftovers() == ([], [], [])
