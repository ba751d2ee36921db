"""A pop whose answer is a flood neither crashes nor exhausts the running agent.

The sandbox W&B server runs the pop (the item is leased to the agent), then answers with
200 MiB under a Content-Length, and the next time with a chunked answer that never ends.
The agent refuses both at `wandb.max_response_bytes` (32 MiB by default) and closes the
connection, and the poller pauses as after an outage; the item the first answer leased is
lost until its lease lapses, then W&B offers it again and it runs. What the server could write before the agent hung up stays near the
limit: the agent never read the rest.
"""

from __future__ import annotations

import logging

import pytest

from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until

MIB = 1024 * 1024
SOCKET_BUFFERS = 16 * MIB


async def test_flooded_pops_are_refused_and_the_item_runs_after_its_lease(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="launch_agent")
    env.state.lease_seconds = 1.0
    item = env.push(run_spec("flood-1"))
    sized = env.wandb.faults.add(FaultRule("popFromRunQueue", times=1, body_bytes=200 * MIB))
    endless = env.wandb.faults.add(FaultRule("popFromRunQueue", times=1, endless=True))
    async with env.running() as agent:
        await until(
            lambda: item.state is ItemState.CLAIMED, advance=lambda: env.advance(1), within=60
        )
        assert agent.wandb is not None
        assert agent.wandb.stats["too_large"] == 2
    assert sized.fired == endless.fired == 1
    assert item.pops >= 2  # leased by the first flood, offered again after its lease lapsed
    assert item.failure is None
    assert sized.sent < SOCKET_BUFFERS, sized.sent  # refused from its Content-Length
    assert endless.sent < 32 * MIB + SOCKET_BUFFERS, endless.sent
    refused = [r.getMessage() for r in caplog.records if "is over 32 MiB" in r.getMessage()]
    assert len(refused) == 2, refused
    assert (
        "W&B's answer to popFromRunQueue is over 32 MiB (Content-Length 209,715,200)"
        in (refused[0])
    )
    assert all(m.endswith("(limit wandb.max_response_bytes)") for m in refused), refused
    workloads = [
        j
        for j in env.jobs()
        if (j["metadata"].get("annotations") or {}).get("launch-agent.io/run-queue-item-id")
        == item.id
    ]
    assert len(workloads) == 1
