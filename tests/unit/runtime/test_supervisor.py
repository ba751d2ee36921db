"""The supervisor's stop order: first exit stops all, grace period, then cancel."""

from __future__ import annotations

import asyncio

import pytest

from launch_agent.runtime.supervisor import Supervisor


async def _until_stopped(stopping: asyncio.Event, record: list[str], name: str) -> None:
    await stopping.wait()
    record.append(f"{name} stopped")


async def test_stop_request_stops_every_root_and_runs_callbacks() -> None:
    record: list[str] = []
    sup = Supervisor(grace_seconds=1)
    sup.add("poller", lambda s: _until_stopped(s, record, "poller"))
    sup.add("informers", lambda s: _until_stopped(s, record, "informers"))

    async def report_killed() -> None:
        record.append("KILLED reported")

    sup.on_stop(report_killed)
    runner = asyncio.create_task(sup.run(), name="supervisor")
    await asyncio.sleep(0.01)
    sup.stop("test")
    await asyncio.wait_for(runner, 2)
    assert sorted(record) == ["KILLED reported", "informers stopped", "poller stopped"]


async def test_first_root_to_end_stops_the_others() -> None:
    record: list[str] = []
    sup = Supervisor(grace_seconds=1)

    async def short(_: asyncio.Event) -> None:
        record.append("short done")

    sup.add("short", short)
    sup.add("long", lambda s: _until_stopped(s, record, "long"))
    await asyncio.wait_for(sup.run(), 2)
    assert record == ["short done", "long stopped"]


async def test_a_failing_root_is_raised_after_the_others_stopped() -> None:
    record: list[str] = []
    sup = Supervisor(grace_seconds=1)

    async def broken(_: asyncio.Event) -> None:
        raise RuntimeError("watch exploded")

    sup.add("broken", broken)
    sup.add("other", lambda s: _until_stopped(s, record, "other"))
    with pytest.raises(RuntimeError, match="watch exploded"):
        await asyncio.wait_for(sup.run(), 2)
    assert record == ["other stopped"]


async def test_a_root_that_ignores_the_stop_is_cancelled_after_the_grace_period() -> None:
    cancelled = asyncio.Event()
    sup = Supervisor(grace_seconds=0.05)

    async def stubborn(_: asyncio.Event) -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    sup.add("stubborn", stubborn)
    runner = asyncio.create_task(sup.run(), name="supervisor")
    await asyncio.sleep(0.01)
    sup.stop()
    await asyncio.wait_for(runner, 2)
    assert cancelled.is_set()
