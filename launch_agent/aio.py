"""Small asyncio helpers shared by the adapters and the runtime (its own layer, under both).

- `wait_event(event, seconds)`: a sleep that `event` ends early (kopf's `aiotime.sleep`): the
  agent's loops wait on their wake-up or stop event instead of sleeping blindly, so a stop or
  new work is seen at once and tests wait on the event that proves something happened.
- `race(work, stop)`: run `work` until it finishes or `stop` is set, whichever comes first, and
  never leave a task behind.

Not a pure layer (it is asyncio); it imports nothing of the agent's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` at most `seconds`; True if it is set."""
    if event.is_set():
        return True
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def race(
    work: Coroutine[Any, Any, T], stop: asyncio.Event, *, name: str | None = None
) -> asyncio.Task[T] | None:
    """Run `work` as a task until it finishes or `stop` is set.

    The finished task (its result or exception still to be read), or None when `stop` came
    first or the work was cancelled from elsewhere; either way no task is left running, and
    cancelling the caller cancels the work too."""
    task = asyncio.create_task(work, name=name)
    waiter = asyncio.create_task(stop.wait(), name=None if name is None else f"{name} (stop)")
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for each in (task, waiter):
            each.cancel()
        await asyncio.gather(task, waiter, return_exceptions=True)
    if task.cancelled():
        return None
    return task
