"""Build pods that cannot start, end to end on the sandbox: the item fails at stage `build`
with a reason naming what to change, long before the Kaniko Job's `activeDeadlineSeconds`;
and however many builds run, the agent follows them on two watch streams (Jobs and pods in the
Kaniko namespace), not one per build.

The pod outcomes are the simulated cluster's: a scripted `imagepullbackoff` / `oomkilled` for
the Kaniko pods (selected by the image-tag label), and a real scheduling failure for a build
whose `kaniko-config` asks for more memory than the sandbox's node has.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from launch_agent.model.config import AgentConfig
from launch_agent.render.kaniko import IMAGE_TAG
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e import build_support
from tests.e2e.build_support import KANIKO_NS, Builds
from tests.e2e.conftest import run_spec, until

s3_endpoint = build_support.s3_endpoint
s3_builds = build_support.s3_builds

TRAIN = {"train.py": "print('training')\n", "requirements.txt": "numpy\n"}
MISSING_EXECUTOR = "registry.invalid/kaniko-project/executor:no-such-tag"
DEADLINE = 1800  # KanikoSettings.deadline_seconds: the Job's activeDeadlineSeconds


def config(b: Builds, unschedulable_s: float = 120, **builder: Any) -> AgentConfig:
    return b.env.config(
        builder={
            "type": "kaniko",
            "build-context-store": b.store,
            "destination": b.destination,
            "git": {"allowed_schemes": ["http"]},  # the loopback git server
            **builder,
        },
        kaniko_namespace=KANIKO_NS,
        kaniko_service_account="kaniko-builder",
        tracking={"stop_check_seconds": 0.1, "unschedulable_timeout_seconds": unschedulable_s},
    )


async def push_job(b: Builds, tmp_path: Path, name: str) -> RunQueueItem:
    files = {**TRAIN, "train.py": f"print('{name}')\n"}  # its own source: its own image tag
    url, sha = await asyncio.to_thread(b.make_repo, name, files)
    b.env.state.add_job(
        "ent", "proj", name, repo=url, commit=sha, entrypoint=["python", "train.py"]
    )
    return b.env.push(run_spec(f"r-{name}", docker=None, job=f"ent/proj/{name}:latest"))


async def failed_build(b: Builds, item: RunQueueItem, cfg: AgentConfig) -> str:
    env = b.env
    started = env.clock.seconds()
    async with env.running(env.agent(cfg)):
        await until(
            lambda: item.state is ItemState.FAILED,
            advance=lambda: env.advance(1),
            within=40,
            message="item failed",
        )
        await until(lambda: not b.build_jobs(), message="build Job deleted")
    assert item.failure is not None
    assert item.failure.stage == "build"
    # Long before the Job's own deadline would have failed it.
    assert env.clock.seconds() - started < DEADLINE / 10
    assert "DeadlineExceeded" not in item.failure.message
    assert await b.leftovers() == ([], [], [])
    return item.failure.message


async def test_an_unpullable_kaniko_image_fails_the_item_naming_the_image(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b = s3_builds
    b.env.cluster.script(IMAGE_TAG, "imagepullbackoff after=2s")
    item = await push_job(b, tmp_path, "pull")
    message = await failed_build(b, item, config(b, **{"kaniko-image": MISSING_EXECUTOR}))  # type: ignore[arg-type]
    assert f"the Kaniko executor image {MISSING_EXECUTOR} cannot be pulled" in message
    assert "builder.kaniko-image" in message
    assert "--- build log (tail) ---" not in message  # the executor never ran


async def test_an_unschedulable_build_pod_fails_the_item_with_the_schedulers_message(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b = s3_builds
    too_big = {"requests": {"cpu": "1", "memory": "9000Gi"}, "limits": {"memory": "9000Gi"}}
    overlay = {"spec": {"template": {"spec": {"containers": [{"resources": too_big}]}}}}
    item = await push_job(b, tmp_path, "huge")
    message = await failed_build(b, item, config(b, 1.0, **{"kaniko-config": overlay}))
    assert "could not be scheduled" in message
    assert "Insufficient memory" in message  # the simulated scheduler's own words
    assert "memory 9000Gi" in message
    assert "tracking.unschedulable_timeout_seconds" in message


async def test_an_oomkilled_executor_fails_the_item_naming_the_memory_limit(
    s3_builds: Builds, tmp_path: Path
) -> None:
    b = s3_builds
    b.env.cluster.script(IMAGE_TAG, 'oomkilled after=2s log="Step 3/5 : RUN pip install torch"')
    item = await push_job(b, tmp_path, "oom")
    message = await failed_build(b, item, config(b))
    assert "the Kaniko executor in pod" in message
    assert "was OOMKilled" in message
    assert "memory limit 4Gi" in message
    assert "--- build log (tail) ---" in message
    assert "RUN pip install torch" in message


def kaniko_watches(b: Builds) -> list[str]:
    """The watch streams open now in the Kaniko namespace, by resource storage."""
    return sorted(w.storage for w in b.env.kube.store.watchers() if w.namespace == KANIKO_NS)


async def test_concurrent_builds_share_two_watch_streams(s3_builds: Builds, tmp_path: Path) -> None:
    b, env = s3_builds, s3_builds.env
    # Builds that take 30 simulated seconds: all four wait at once while the clock stands.
    env.cluster.script(IMAGE_TAG, "succeed after=30s")
    items = [await push_job(b, tmp_path, f"job{i}") for i in range(4)]
    async with env.running(env.agent(config(b))):
        await until(lambda: len(b.kaniko_jobs) == 4, within=40, message="4 build Jobs")
        await until(lambda: len(b.build_pods()) == 4, message="4 build pods")
        during = kaniko_watches(b)
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items),
            advance=lambda: env.advance(1),
            within=40,
            message="every item built and acked",
        )
        after = kaniko_watches(b)
    assert len({j["metadata"]["name"] for j in b.kaniko_jobs}) == 4
    assert during == after, (during, after)
    assert len(set(during)) == len(during) == 2, during  # Jobs, pods: not one per build
    assert await b.leftovers() == ([], [], [])
