"""A refused value W&B sends is clipped wherever the running agent shows or keeps it (issue 23):
a 200,000-character item id, offered again each time its lease lapses (W&B refuses to fail
it), is never written whole to the log, `/api/status` or W&B's failure message."""

from __future__ import annotations

import io
import logging
import re
from typing import Any

import aiohttp

from launch_agent.runtime.logs import configure_logging
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until
from tests.terminal import unsafe_characters

TOKEN = "refused-values-token"
HUGE_ID = "Q" * 200_000
# The documented bound: ids are at most 256 characters; a longer one is shown as its first 256
# and its length.
LONGEST_RUN = re.compile("Q{257,}")


async def api_status(port: int | None) -> tuple[str, dict[str, Any]]:
    assert port is not None
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"Bearer {TOKEN}"}
        ) as resp,
    ):
        assert resp.status == 200
        return await resp.text(), await resp.json()


async def test_a_huge_item_id_is_clipped_in_logs_status_and_wandb(env: Env) -> None:
    item = env.state.push(
        env.state.queue("ent", "model-registry", "q1"), run_spec("r1"), item_id=HUGE_ID
    )
    ordinary = env.push(run_spec("r2"))
    stream = io.StringIO()
    handler = configure_logging("text", verbosity=1, stream=stream)
    # W&B refuses the failure, so the item comes back after each lease (3 s here).
    refusal = env.wandb.faults.add(
        FaultRule("failRunQueueItem", graphql_error=True, message="cannot fail it now")
    )
    try:
        async with env.running(env.agent(env.config(status={"token": TOKEN}))) as agent:
            await until(lambda: ordinary.state is ItemState.CLAIMED, message="the ordinary run")
            await until(lambda: item.pops >= 3, within=30, message="three offers of the item")
            text, status = await api_status(agent.health_port)
            env.wandb.faults.remove(refusal)
            await until(lambda: item.state is ItemState.FAILED, within=30, message="failed")
    finally:
        logging.getLogger("launch_agent").removeHandler(handler)

    log = stream.getvalue()
    assert "failing item QQQQ" in log and "(200,000 characters)" in log
    assert not LONGEST_RUN.search(log)
    assert unsafe_characters(log) == []
    failures = [f for f in status["failures"] if f["item"].startswith("QQQ")]
    assert len(failures) >= 2  # one per offer, each clipped
    assert {f["item"] for f in failures} == {"Q" * 256 + "... (200,000 characters)"}, failures
    assert not LONGEST_RUN.search(text) and len(text) < 100_000
    assert item.failure is not None
    assert "runQueueItemId" in item.failure.message and "at most 256" in item.failure.message
    assert not LONGEST_RUN.search(item.failure.message)
