"""Images are trusted by the digest the agent built, not by the tag the registry holds.

Kaniko runs a submitter's `RUN` steps in the container holding the push credential, so any
build can push any tag of the repository (Kaniko issue #2153). Played here by the test writing
an attacker's manifest under a victim's content-addressed tag in the sandbox registry, as such
a `RUN` step would. Through the whole agent (sandbox W&B, API server, simulated cluster,
registry; Kaniko's push and digest file from `sandbox/kaniko.py`):

- a tag moved after the agent built it is built again, reported (log, metric, the run's W&B
  warning), and the run is pinned to the new build's digest;
- a tag pushed before the agent ever built that content is not trusted either;
- with `builder.trust.untrusted_tag: refuse` the run fails at stage `build` naming the
  digest, and nothing is built;
- the record lives in the agent's namespace, never the Kaniko namespace, and the build pod has
  no API token to write it with.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from launch_agent.sandbox.wandb import ItemState
from tests.e2e import build_support
from tests.e2e.build_support import KANIKO_NS, REPO, Builds
from tests.e2e.conftest import until
from tests.e2e.test_builds import (
    git_job,
    image_of,
    job_spec,
    status_and_metrics,
    tag_of,
    workload_of,
)

s3_endpoint = build_support.s3_endpoint
s3_builds = build_support.s3_builds

ATTACKER = "attacker's RUN step"


async def _ran(b: Builds, run_id: str, job: str, **config: Any) -> Any:
    """Push a run of `job`, run an agent until it is acked and its workload exists."""
    env = b.env
    item = env.push(job_spec(run_id, job))
    async with env.running(env.agent(b.config(**config))) as agent:
        workload = await until(
            lambda: workload_of(env, item), advance=lambda: env.advance(1), within=30
        )
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        _, metrics = await status_and_metrics(agent)
    return item, workload, metrics


async def _tag_without_an_image(b: Builds, job: str) -> str:
    """The tag `job` builds to, learnt from a build that fails (nothing pushed, nothing
    recorded): what an attacker computes from the victim's public source."""
    env = b.env
    env.cluster.script("launch-agent.io/image-tag", "fail after=1s")
    item = env.push(job_spec("learn", job))
    async with env.running(env.agent(b.config())):
        await until(lambda: item.state is ItemState.FAILED, advance=lambda: env.advance(1))
    env.cluster.clear_scripts()
    assert b.registry.manifests == {} and b.record() == {}
    return tag_of(b.kaniko_jobs[-1])


async def test_a_tag_moved_after_the_build_is_rebuilt_reported_and_pinned(
    s3_builds: Builds, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="launch_agent")
    b = s3_builds
    job = await git_job(b)
    first, workload, _ = await _ran(b, "t1", job)
    tag = tag_of(b.kaniko_jobs[0])
    built = b.pushed_digest(tag)
    assert image_of(workload) == f"{b.destination}@{built}"
    # Another build's RUN step pushes its own image under this context's tag.
    evil = b.registry.put_image(REPO, tag, build=ATTACKER)
    second, again, metrics = await _ran(b, "t2", job)
    assert len(b.kaniko_jobs) == 2  # built again, not skipped
    rebuilt = b.pushed_digest(tag)
    assert rebuilt not in (built, evil)
    assert image_of(again) == f"{b.destination}@{rebuilt}"  # pinned: the tag is not trusted
    warnings = [w.message for w in second.warnings]
    assert any(f"points at {evil}, which this agent did not build" in w for w in warnings)
    assert 'launch_agent_build_untrusted_tags_total{action="rebuilt"} 1.0' in metrics
    assert any(f"untrusted image tag: the registry's {b.destination}:{tag}" in r.getMessage()
               for r in caplog.records)  # fmt: skip
    assert first.warnings == []
    # Both of the agent's builds are on the record; the attacker's digest is not.
    assert b.record()[tag].split()[1:] == [rebuilt, built]
    assert await b.leftovers() == ([], [], [])


async def test_a_tag_pushed_before_the_first_build_is_not_trusted(s3_builds: Builds) -> None:
    b = s3_builds
    job = await git_job(b)
    tag = await _tag_without_an_image(b, job)
    evil = b.registry.put_image(REPO, tag, build=ATTACKER)
    item, workload, metrics = await _ran(b, "p1", job)
    built = b.pushed_digest(tag)
    assert built != evil
    assert image_of(workload) == f"{b.destination}@{built}"
    assert any(evil in w.message for w in item.warnings)
    assert 'launch_agent_build_untrusted_tags_total{action="rebuilt"} 1.0' in metrics
    assert b.record()[tag].split()[1:] == [built]


async def test_refuse_fails_the_run_naming_the_digest_and_builds_nothing(
    s3_builds: Builds,
) -> None:
    b, env = s3_builds, s3_builds.env
    job = await git_job(b)
    tag = await _tag_without_an_image(b, job)
    evil = b.registry.put_image(REPO, tag, build=ATTACKER)
    builds_before = len(b.kaniko_jobs)
    item = env.push(job_spec("r1", job))
    config = b.config()
    assert config.builder is not None
    trust = config.builder.trust.model_copy(update={"untrusted_tag": "refuse"})
    config = config.model_copy(
        update={"builder": config.builder.model_copy(update={"trust": trust})}
    )
    async with env.running(env.agent(config)) as agent:
        await until(lambda: item.state is ItemState.FAILED, advance=lambda: env.advance(1))
        _, metrics = await status_and_metrics(agent)
    assert item.failure is not None and item.failure.stage == "build"
    assert f"points at {evil}, which this agent did not build" in item.failure.message
    assert "builder.trust.untrusted_tag is refuse" in item.failure.message
    assert 'launch_agent_build_untrusted_tags_total{action="refused"} 1.0' in metrics
    assert len(b.kaniko_jobs) == builds_before  # nothing built
    assert workload_of(env, item) is None
    assert b.record() == {}


async def test_the_record_is_out_of_the_builds_reach(s3_builds: Builds) -> None:
    b, env = s3_builds, s3_builds.env
    job = await git_job(b)
    await _ran(b, "o1", job)
    (kaniko,) = b.kaniko_jobs
    pod = kaniko["spec"]["template"]["spec"]
    # The build pod gets no API credential at all, and runs in the Kaniko namespace.
    assert pod["automountServiceAccountToken"] is False
    assert kaniko["metadata"]["namespace"] == KANIKO_NS
    records = [
        (c["metadata"]["namespace"], c["metadata"]["name"])
        for c in await asyncio.to_thread(env.kube.objects.list, "configmaps")
        if c["metadata"]["name"].endswith("-image-digests")
    ]
    assert records == [("default", "test-agent-image-digests")]
