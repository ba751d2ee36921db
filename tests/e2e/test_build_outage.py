"""A W&B outage while the agent reads a job artifact does not fail the run (issue: bench chaos).

During an outage wandb-core retries the artifact's file-URL query itself for a minute, then the
SDK raises "the service process is busy and did not respond in time" (a `WandbApiFailedError`,
no `CommError`), which the agent took for a definite answer and failed the item with. The
outage here is W&B's artifact service answering 503: the agent's first read fails after
wandb-core's own retries, the outage ends as its second read begins (an observer on the
sandbox server, at the moment that request arrives), and the run is created and claimed.
"""

from __future__ import annotations

import asyncio

import pytest

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState
from tests.e2e import build_support
from tests.e2e.build_support import Builds
from tests.e2e.conftest import run_spec, until

s3_endpoint = build_support.s3_endpoint
s3_builds = build_support.s3_builds

FIRST_QUERY = "ArtifactMembershipByName"  # the first request of each read of the artifact
OUTAGE = "GetArtifactMembershipFileUrls"  # what the download asks, answered 503 meanwhile
# One failed read: wandb-core's minute of retries, on a loaded machine.
READ_BOUND = 150.0
# A stop while a read is stuck: well under wandb-core's minute.
STOP_BOUND = 20.0


@pytest.mark.long
async def test_a_job_read_through_a_wandb_outage_is_retried_not_failed(s3_builds: Builds) -> None:
    b, env = s3_builds, s3_builds.env
    env.state.add_job("ent", "proj", "train-img", image="registry.example/ml/train:1")
    item = env.push(run_spec("o1", docker=None, job="ent/proj/train-img:latest"))
    faults = env.wandb.faults
    outage = faults.add(FaultRule(OUTAGE, status=503, message="artifact service unavailable"))
    reads: list[ItemState] = []

    def on_request(key: str, path: str, rule: FaultRule | None) -> None:
        if key != FIRST_QUERY:
            return
        reads.append(item.state)
        if len(reads) == 2:
            faults.remove(outage)  # the outage is over when the agent reads again

    faults.observers.append(on_request)
    async with env.running(env.agent(b.config())):
        await until(
            lambda: item.state is ItemState.FAILED or len(reads) >= 2,
            within=READ_BOUND,
            message="the first read failed and the agent read again (or failed the item)",
        )
        assert item.failure is None, item.failure
        assert outage.fired >= 1
        await until(lambda: item.state is ItemState.CLAIMED, within=60, message="ack")
    assert item.failure is None
    assert reads == [ItemState.LEASED, ItemState.LEASED]
    created = env.jobs()
    assert len(created) == 1
    image = created[0]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example/ml/train:1"


async def test_a_stop_during_a_job_read_outage_leaves_the_item_for_the_next_start(
    s3_builds: Builds,
) -> None:
    b, env = s3_builds, s3_builds.env
    env.state.add_job("ent", "proj", "train-img", image="registry.example/ml/train:1")
    item = env.push(run_spec("o2", docker=None, job="ent/proj/train-img:latest"))
    outage = env.wandb.faults.add(FaultRule(OUTAGE, status=503, message="unavailable"))
    async with env.running(env.agent(b.config())):
        await until(lambda: outage.fired >= 1, within=60, message="the agent reads the job")
        stopping_at = asyncio.get_running_loop().time()
    # The agent did not wait for wandb-core's minute of retries to stop (nor does the test's
    # loop at its end: the read runs in a daemon thread), and did not fail the item: it is
    # still leased (W&B offers it again after its lease), nothing was created.
    assert asyncio.get_running_loop().time() - stopping_at < STOP_BOUND
    assert item.state is ItemState.LEASED
    assert item.failure is None
    assert env.jobs() == []
    env.wandb.faults.remove(outage)
