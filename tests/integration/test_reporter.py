"""The reporter's retries, through the one retry engine, against the sandbox's W&B server.

A report is retried until W&B answers (each try is a whole retry budget of the W&B client), and
the agent's stop event wakes the reporter's wait and ends the retries after one last try.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from launch_agent.adapters.retry import RetryPolicy
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.reporter import Declined, ItemRef, NotSent, Reporter, Sent
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, LaunchState, WandbServer

ATTEMPTS = 2  # per try of the W&B client
FAST = RetryPolicy(attempts=ATTEMPTS, base_delay=0.01, max_delay=0.02, timeout=2.0)
SPEC: dict[str, Any] = {"resource": "kubernetes", "docker": {"docker_image": "busybox:latest"}}


@pytest.fixture
def idle_server() -> WandbServer:
    state = LaunchState(entity="ent")
    state.add_queue("q1")
    return WandbServer(state)


@pytest.fixture
async def wb(idle_server: WandbServer) -> AsyncIterator[WandbServer]:
    async with idle_server as server:
        yield server


@pytest.fixture
async def client(wb: WandbServer) -> AsyncIterator[WandbClient]:
    async with WandbClient(wb.url, wb.api_key, retry=FAST) as wandb:
        yield wandb


async def popped_item(wb: WandbServer, client: WandbClient) -> str:
    wb.state.push(wb.state.queue("ent", "model-registry", "q1"), SPEC)
    item = (await client.pop("ent", ["q1"], None))["q1"]
    assert item is not None
    return item.id


async def test_a_failure_report_outlasts_several_client_budgets(
    wb: WandbServer, client: WandbClient
) -> None:
    item = await popped_item(wb, client)
    # Three whole client budgets (2 attempts each) fail before W&B answers.
    wb.faults.add(FaultRule("failRunQueueItem", status=503, times=6))
    reporter = Reporter(client, Metrics(), asyncio.Event(), retry_base=0.01, retry_cap=0.02)
    sent = await reporter.fail(item, "OOMKilled in container main", stage="run", reason="OOMKilled")
    assert sent == Sent(None)
    assert wb.log.count("failRunQueueItem") == 7
    assert reporter.sent["fail"] == 1
    assert wb.state.items[item].state is ItemState.FAILED


async def test_stopping_wakes_the_wait_and_gives_up_after_one_last_try(wb: WandbServer) -> None:
    budget_spent = asyncio.Event()
    tries: list[int | None] = []

    def observe(operation: str, status: int | None, _: float) -> None:
        if operation == "failRunQueueItem":
            tries.append(status)
            if len(tries) == ATTEMPTS:
                budget_spent.set()

    async with WandbClient(wb.url, wb.api_key, retry=FAST, observer=observe) as client:
        item = await popped_item(wb, client)
        wb.faults.add(FaultRule("failRunQueueItem", status=503))
        stopping = asyncio.Event()
        # An hour between two tries: only the stop event can end this wait within the timeout.
        reporter = Reporter(client, Metrics(), stopping, retry_base=3600.0, retry_cap=3600.0)
        async with asyncio.timeout(10):
            report = asyncio.create_task(
                reporter.fail(item, "lost", stage="run", reason="ExitCode")
            )
            await budget_spent.wait()  # the first try (a whole client budget) failed
            stopping.set()
            # Not "refused": the caller must keep the run for the next start to report.
            assert isinstance(await report, NotSent)
    # One more budget after the wake-up, then nothing: the next start reports the run.
    assert tries == [503] * (2 * ATTEMPTS)
    assert wb.log.count("failRunQueueItem") == 2 * ATTEMPTS
    assert reporter.sent["fail"] == 0
    assert wb.state.items[item].state is not ItemState.FAILED


async def test_a_refusal_is_told_apart_from_not_sent(wb: WandbServer, client: WandbClient) -> None:
    item = await popped_item(wb, client)
    wb.faults.add(FaultRule("failRunQueueItem", graphql_error=True, message="no such item"))
    reporter = Reporter(client, Metrics(), asyncio.Event(), retry_base=0.01, retry_cap=0.02)
    refused = await reporter.fail(item, "lost", stage="run", reason="ExitCode")
    assert isinstance(refused, Declined)
    assert "no such item" in refused.error
    assert reporter.sent["fail"] == 0


async def test_a_verified_failure_is_not_sent_to_an_item_w_and_b_failed_already(
    wb: WandbServer, client: WandbClient
) -> None:
    item = await popped_item(wb, client)
    reporter = Reporter(client, Metrics(), asyncio.Event(), retry_base=0.01, retry_cap=0.02)
    ref = ItemRef("ent", "q1", item)
    assert await reporter.fail(
        item, "exit code 3", stage="run", reason="ExitCode", verify=ref
    ) == Sent(None)
    assert reporter.sent["fail"] == 1
    # The same failure again, as a process that adopted the run would send it.
    assert await reporter.fail(
        item, "exit code 3", stage="run", reason="ExitCode", verify=ref
    ) == Sent(None)
    assert reporter.sent["fail"] == 1
    assert wb.log.count("failRunQueueItem") == 1
    assert wb.log.count("GetRunQueueItem") == 2
    assert sum(1 for _, s in wb.state.items[item].history if s is ItemState.FAILED) == 1


async def test_a_verification_w_and_b_cannot_answer_is_not_sent(wb: WandbServer) -> None:
    """An outage on the question: neither a blind report nor a dropped one."""
    budget_spent = asyncio.Event()
    asked: list[int | None] = []

    def observe(operation: str, status: int | None, _: float) -> None:
        if operation == "GetRunQueueItem":
            asked.append(status)
            if len(asked) == ATTEMPTS:
                budget_spent.set()

    async with WandbClient(wb.url, wb.api_key, retry=FAST, observer=observe) as client:
        item = await popped_item(wb, client)
        wb.faults.add(FaultRule("GetRunQueueItem", status=503))
        stopping = asyncio.Event()
        reporter = Reporter(client, Metrics(), stopping, retry_base=3600.0, retry_cap=3600.0)
        ref = ItemRef("ent", "q1", item)
        async with asyncio.timeout(10):
            report = asyncio.create_task(
                reporter.fail(item, "lost", stage="run", reason="ExitCode", verify=ref)
            )
            await budget_spent.wait()
            stopping.set()
            assert isinstance(await report, NotSent)
    assert asked == [503] * (2 * ATTEMPTS)
    assert wb.log.count("failRunQueueItem") == 0
    assert wb.state.items[item].state is ItemState.LEASED


async def test_a_requeue_already_pushed_is_found_by_run_id_and_resume_count(
    wb: WandbServer, client: WandbClient
) -> None:
    item = await popped_item(wb, client)
    reporter = Reporter(client, Metrics(), asyncio.Event(), retry_base=0.01, retry_cap=0.02)
    ref = ItemRef("ent", "q1", item)
    again = SPEC | {"run_id": "r1", "_resume_count": 1}
    assert await reporter.requeued_as(ref, again) == Sent(None)
    pushed = await reporter.requeue("ent", "q1", again, item)
    assert isinstance(pushed, Sent)
    assert await reporter.requeued_as(ref, again) == Sent(pushed.value)
    # Another resume of the same run, or another run: not this requeue.
    assert await reporter.requeued_as(ref, again | {"_resume_count": 2}) == Sent(None)
    assert await reporter.requeued_as(ref, again | {"run_id": "r2"}) == Sent(None)
