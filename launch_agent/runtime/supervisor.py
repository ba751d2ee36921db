"""Root tasks of the agent and the order in which they stop.

Modelled on kopf's `run_tasks`: every root task is named and owned here; the first root task
that ends (or a stop request from a signal) stops all of them; the others get a grace period to
finish what they are doing (in-flight creates, the final `KILLED` report) and are then
cancelled. A root task that ends with an exception is logged and makes `run()` raise it after
the shutdown, so the process exits non-zero; a clean stop returns normally.

Stopping goes through an `asyncio.Event`, never through exceptions thrown into tasks: a signal
handler only sets the event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

RootFactory = Callable[[asyncio.Event], Coroutine[Any, Any, None]]


@dataclass
class Supervisor:
    """Runs root tasks until one of them ends or `stop()` is called."""

    grace_seconds: float = 10.0
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    _roots: list[tuple[str, RootFactory]] = field(default_factory=list)
    _on_stop: list[Callable[[], Awaitable[None]]] = field(default_factory=list)

    def add(self, name: str, factory: RootFactory) -> None:
        """Register a root task; `factory(stopping)` is called once `run()` starts."""
        self._roots.append((name, factory))

    def on_stop(self, callback: Callable[[], Awaitable[None]]) -> None:
        """Awaited once the stop was requested, while the roots wind down (same grace period)."""
        self._on_stop.append(callback)

    def stop(self, reason: str = "requested") -> None:
        if not self.stopping.is_set():
            log.info("stopping: %s", reason)
            self.stopping.set()

    def install_signal_handlers(self) -> Callable[[], None]:
        """SIGTERM and SIGINT request a graceful stop; returns a function that removes them."""
        loop = asyncio.get_running_loop()
        installed = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, self.stop, signal.Signals(signum).name)
                installed.append(signum)

        def remove() -> None:
            for signum in installed:
                loop.remove_signal_handler(signum)

        return remove

    async def run(self) -> None:
        tasks: dict[asyncio.Task[Any], str] = {
            asyncio.create_task(factory(self.stopping), name=name): name
            for name, factory in self._roots
        }
        waiter = asyncio.create_task(self.stopping.wait(), name="supervisor-stop-request")
        failure: BaseException | None = None
        try:
            done, _ = await asyncio.wait([*tasks, waiter], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is waiter:
                    continue
                failure = failure or _failure_of(task, tasks[task])
                self.stop(f"root task {tasks[task]!r} ended")
            self.stopping.set()
            for callback in self._on_stop:
                try:
                    await asyncio.wait_for(callback(), timeout=self.grace_seconds)
                except Exception:
                    log.exception("shutdown callback failed")
            pending = [t for t in tasks if not t.done()]
            if pending:
                _, still = await asyncio.wait(pending, timeout=self.grace_seconds)
                for task in still:
                    log.warning("root task %r did not stop within the grace period", tasks[task])
                    task.cancel()
                if still:
                    await asyncio.gather(*still, return_exceptions=True)
            for task, name in tasks.items():
                if task.done() and not task.cancelled():
                    failure = failure or _failure_of(task, name)
        finally:
            waiter.cancel()
            leftovers = [t for t in (*tasks, waiter) if not t.done()]
            for task in leftovers:
                task.cancel()
            await asyncio.gather(*leftovers, return_exceptions=True)
        if failure is not None:
            raise failure


def _failure_of(task: asyncio.Task[Any], name: str) -> BaseException | None:
    if task.cancelled():
        return None
    exc = task.exception()
    if exc is not None:
        log.error("root task %r failed", name, exc_info=exc)
    return exc
