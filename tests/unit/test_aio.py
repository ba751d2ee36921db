"""The asyncio helpers: a sleep an event wakes, and work raced against a stop event."""

from __future__ import annotations

import asyncio

import pytest

from launch_agent.aio import race, wait_event


async def test_wait_event_returns_at_once_when_set() -> None:
    event = asyncio.Event()
    event.set()
    async with asyncio.timeout(5):
        assert await wait_event(event, 3600) is True


async def test_wait_event_is_woken_by_the_event() -> None:
    event = asyncio.Event()
    waiting = asyncio.create_task(wait_event(event, 3600))
    await asyncio.sleep(0)
    assert not waiting.done()
    event.set()
    async with asyncio.timeout(5):
        assert await waiting is True


async def test_wait_event_times_out_false() -> None:
    assert await wait_event(asyncio.Event(), 0.01) is False


async def test_race_returns_the_finished_work() -> None:
    async def work() -> int:
        return 42

    task = await race(work(), asyncio.Event(), name="work")
    assert task is not None and task.result() == 42


async def test_race_keeps_the_works_exception_for_the_caller() -> None:
    async def work() -> int:
        raise KeyError("boom")

    task = await race(work(), asyncio.Event())
    assert task is not None
    assert isinstance(task.exception(), KeyError)


async def test_race_cancels_the_work_when_stop_comes_first() -> None:
    stop = asyncio.Event()
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def work() -> int:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return 1

    async def stop_when_started() -> None:
        await started.wait()
        stop.set()

    async with asyncio.timeout(5), asyncio.TaskGroup() as group:
        group.create_task(stop_when_started())
        result = await race(work(), stop)
    assert result is None
    assert cancelled.is_set()


async def test_cancelling_the_caller_cancels_the_work() -> None:
    started = asyncio.Event()
    cancelled = asyncio.Event()

    async def work() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    caller = asyncio.create_task(race(work(), asyncio.Event()))
    async with asyncio.timeout(5):
        await started.wait()
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
    assert cancelled.is_set()
