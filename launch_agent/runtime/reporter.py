"""Everything the agent tells W&B about an item: failures, warnings and requeues.

Nothing is dropped on a W&B outage. `fail` and `requeue` are awaited by the task that owns the
run (a dispatch or a finisher) and retry `WandbUnavailable` with a capped backoff (the retry
engine, `adapters/retry.py`) until W&B answers or the agent stops, so a run's slot is released
only once W&B knows. Warnings are not worth holding a task for: `warn` queues them
(deduplicated per run by the tracker) and one worker sends them in order, pausing while W&B is
unavailable.

Every report says what became of it with a `Delivery`: `Sent` (W&B accepted it), `Declined`
(W&B answered no for good: retrying gives the same answer) or `NotSent` (the agent is stopping
during an outage: nothing reached W&B, so the run must stay recorded for the next start to
report). Callers match it exhaustively (`assert_never`): a bool once merged "not sent" into
"refused" and a failure cut by a shutdown was cleaned up as if W&B knew (issue 16).

Two questions come before a report whose outcome W&B may have already (a run another process
led when it ended): `already_failed` (the item's state) and `requeued_as` (the queue's items).
They are retried like reports and answer with a `Delivery` too, so an outage on the question
is `NotSent`, never a blind report (docs/reliability.md, "Reported exactly once").

Messages are written for the person reading the W&B UI and are cut to `MAX_MESSAGE` characters:
a log tail must not make the mutation itself fail.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeAlias, TypeVar, assert_never

from launch_agent.adapters.retry import GaveUp, Retryable, RetryPolicy, call_with_retries
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.adapters.wandb_documents import RUN_QUEUE_ITEMS_PAGE
from launch_agent.adapters.wandb_errors import WandbError, WandbUnavailable
from launch_agent.aio import wait_event
from launch_agent.model.run_item import shown_item_id
from launch_agent.runtime.metrics import Metrics

log = logging.getLogger(__name__)

MAX_MESSAGE = 16_000
MAX_PENDING_WARNINGS = 10_000
# The item state `failRunQueueItem` leaves (wandb's `RunQueueItemState`).
FAILED = "FAILED"
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True, slots=True)
class Sent(Generic[T_co]):
    """W&B accepted the report; `value` is its answer (the new item's id for a requeue)."""

    value: T_co


@dataclass(frozen=True, slots=True)
class Declined:
    """W&B answered no for good (an error, `success: false`): the same call gets the same no."""

    error: str


@dataclass(frozen=True, slots=True)
class NotSent:
    """The agent stopped during a W&B outage: nothing reached W&B; the next start reports it."""

    last_error: str


Delivery: TypeAlias = Sent[T_co] | Declined | NotSent


def clip(message: str, limit: int = MAX_MESSAGE) -> str:
    if len(message) <= limit:
        return message
    # Keep the head (the reason) and the end of the log tail, which is where the error is.
    head = limit // 3
    return message[:head] + "\n[...]\n" + message[-(limit - head - 7) :]


@dataclass(frozen=True, slots=True)
class ItemRef:
    """Where W&B keeps an item: the queue's entity and name (items live in its launch
    project, `model-registry`), and the item's id."""

    entity: str
    queue: str
    item_id: str


@dataclass(frozen=True, slots=True)
class Warning_:
    item_id: str
    message: str
    stage: str


class Reporter:
    """W&B reports with retries; `stopping` ends the retrying (the run is adopted on restart)."""

    def __init__(
        self,
        wandb: WandbClient,
        metrics: Metrics,
        stopping: asyncio.Event,
        *,
        retry_base: float = 0.5,
        retry_cap: float = 30.0,
    ) -> None:
        self.wandb = wandb
        self.metrics = metrics
        self.stopping = stopping
        # Until W&B answers or the agent stops; plain doubling, one task per report.
        self.policy = RetryPolicy(
            attempts=None, base_delay=retry_base, max_delay=retry_cap, jitter=0.0
        )
        self._warnings: deque[Warning_] = deque()
        self._wake = asyncio.Event()
        self.dropped_warnings = 0
        self.sent = {"fail": 0, "warn": 0, "requeue": 0, "verify": 0}

    async def retrying(self, what: str, call: Callable[[], Awaitable[T]]) -> Delivery[T]:
        """`call` through W&B outages until it answers or the agent stops: the one retry loop
        for everything the agent sends W&B or asks it about a run's outcome."""

        async def attempt() -> T:
            try:
                return await call()
            except WandbUnavailable as exc:
                raise Retryable(exc) from exc

        def on_retry(_: int, failure: Retryable, delay: float) -> None:
            log.warning("%s: W&B unavailable (%s); retrying in %.1fs", what, failure, delay)

        try:
            value = await call_with_retries(
                attempt, self.policy, stop=self.stopping, on_retry=on_retry
            )
        except GaveUp as gave_up:
            log.warning("%s not sent, the agent is stopping: %s", what, gave_up.last)
            return NotSent(str(gave_up.last))
        except WandbError as exc:
            log.error("W&B refused %s: %s", what, exc)
            return Declined(str(exc))
        return Sent(value)

    async def fail(
        self,
        item_id: str,
        message: str,
        *,
        stage: str,
        reason: str,
        verify: ItemRef | None = None,
    ) -> Delivery[None]:
        """`failRunQueueItem`: `stage` is W&B's failure kind (`agent`, `build`, `run`),
        `reason` the failure metric's label. With `verify` (the item's queue), first ask W&B
        whether the item is already `FAILED`: then the failure is `Sent` without a second
        mutation."""
        if verify is not None:
            known = await self.already_failed(verify)
            match known:
                case Sent(value=True):
                    log.info(
                        "item %s is already FAILED in W&B: not failed again",
                        shown_item_id(item_id),
                    )
                    return Sent(None)
                case Sent() | Declined():
                    # A refusal cannot tell "reported" from "not": the mutation is the report
                    # that must not be lost; W&B's own answer to it decides.
                    pass
                case NotSent():
                    return known
                case _:
                    assert_never(known)
        # The id is sent whole (W&B's name for the item) but shown and kept clipped.
        shown = shown_item_id(item_id)
        self.metrics.failed(item_id, stage, reason, message)  # the status clips it itself
        log.info("failing item %s (stage %s, %s): %s", shown, stage, reason, message[:500])
        text = clip(message)
        outcome = await self.retrying(
            f"failRunQueueItem {shown}", lambda: self.wandb.fail(item_id, text, stage)
        )
        match outcome:
            case Sent(value=True):
                self.sent["fail"] += 1
                return Sent(None)
            case Sent():
                log.error("W&B answered success: false to failRunQueueItem for %s", shown)
                return Declined("failRunQueueItem answered success: false")
            case Declined() | NotSent():
                return outcome
            case _:
                assert_never(outcome)

    async def already_failed(self, ref: ItemRef) -> Delivery[bool]:
        """Whether W&B has the item `FAILED` (wandb `QueuedRun.state`), retried through an
        outage like a report: `NotSent` when the agent stops first."""
        state = await self.item_state(ref)
        match state:
            case Sent(value=found):
                return Sent(found == FAILED)
            case Declined() | NotSent():
                return state
            case _:
                assert_never(state)

    async def item_state(self, ref: ItemRef) -> Delivery[str | None]:
        """The item's state in W&B (`PENDING`, `LEASED`, `CLAIMED`, `FAILED`; None: the queue
        holds no such item), retried through an outage like a report."""
        outcome = await self.retrying(
            f"state of item {shown_item_id(ref.item_id)}",
            lambda: self.wandb.run_queue_item(ref.entity, ref.queue, ref.item_id),
        )
        match outcome:
            case Sent(value=found):
                self.sent["verify"] += 1
                return Sent(None if found is None else found.state)
            case Declined() | NotSent():
                return outcome
            case _:
                assert_never(outcome)

    async def claim(self, item_id: str, run_name: str) -> Delivery[bool]:
        """`ackRunQueueItem` for a workload that exists already (an adopted run whose ack was
        lost), retried through an outage; `Sent(False)`: W&B answered `success: false`."""
        outcome = await self.retrying(
            f"ackRunQueueItem {shown_item_id(item_id)}", lambda: self.wandb.ack(item_id, run_name)
        )
        match outcome:
            case Sent(value=won):
                return Sent(won)
            case Declined() | NotSent():
                return outcome
            case _:
                assert_never(outcome)

    async def requeued_as(self, ref: ItemRef, run_spec: Mapping[str, Any]) -> Delivery[str | None]:
        """The item that already carries this requeue, if W&B has one: another item of the
        queue whose runSpec has the same `run_id` and `_resume_count`.

        The pair identifies the requeue: W&B keeps the run id across resumes and the agent
        pushes resume n+1 of a run only from the item that ran resume n, so an item with both
        can only be this push landing earlier (before a kill, or before a clean-up that
        failed). `None`: W&B's listing has no such item. If the listing is a full page
        (`RUN_QUEUE_ITEMS_PAGE`, wandb's own bound) the item may be past it; that is logged and
        the answer is `None`, as a report must not be lost.
        """
        outcome = await self.retrying(
            f"items of queue {ref.queue!r}",
            lambda: self.wandb.run_queue_items(ref.entity, ref.queue),
        )
        match outcome:
            case Sent(value=items):
                self.sent["verify"] += 1
            case Declined() | NotSent():
                return outcome
            case _:
                assert_never(outcome)
        key = (run_spec.get("run_id"), run_spec.get("_resume_count"))
        for item in items:
            found = (item.run_spec.get("run_id"), item.run_spec.get("_resume_count"))
            if item.id != ref.item_id and found == key:
                return Sent(item.id)
        if len(items) >= RUN_QUEUE_ITEMS_PAGE:
            log.warning(
                "queue %r lists %d items or more: whether item %s was requeued already cannot"
                " be read from the first page; taken as not requeued",
                ref.queue,
                RUN_QUEUE_ITEMS_PAGE,
                shown_item_id(ref.item_id),
            )
        return Sent(None)

    async def requeue(
        self, entity: str, queue: str, run_spec: Mapping[str, Any], item_id: str
    ) -> Delivery[str]:
        """`pushToRunQueueByName`; `Sent` carries the new item's id."""
        outcome = await self.retrying(
            f"requeue of {shown_item_id(item_id)} onto {queue!r}",
            lambda: self.wandb.push_to_run_queue_by_name(entity, queue, run_spec),
        )
        match outcome:
            case Sent(value=pushed):
                self.sent["requeue"] += 1
                return Sent(pushed.id)
            case Declined() | NotSent():
                return outcome
            case _:
                assert_never(outcome)

    def warn(self, item_id: str, message: str, stage: str) -> None:
        """Queue a warning; the worker sends it."""
        if len(self._warnings) >= MAX_PENDING_WARNINGS:
            # Bounded even through a long outage; the oldest is the least useful by now.
            dropped = self._warnings.popleft()
            self.dropped_warnings += 1
            log.warning(
                "warning for item %s not sent (backlog full)", shown_item_id(dropped.item_id)
            )
        self._warnings.append(Warning_(item_id, clip(message, 4000), stage))
        self._wake.set()

    @property
    def pending_warnings(self) -> int:
        return len(self._warnings)

    async def run_warnings(self, stopping: asyncio.Event) -> None:
        """Send queued warnings until `stopping`; then what is left, within the grace period."""
        while True:
            while self._warnings:
                warning = self._warnings[0]
                outcome = await self.retrying(
                    f"warning for {shown_item_id(warning.item_id)}",
                    functools.partial(
                        self.wandb.warn, warning.item_id, warning.message, warning.stage
                    ),
                )
                match outcome:
                    case NotSent():
                        return  # stopping during an outage
                    case Sent() | Declined():
                        pass  # refused for good: retrying gives the same answer
                    case _:
                        assert_never(outcome)
                self._warnings.popleft()
                self.sent["warn"] += 1
            if stopping.is_set():
                return
            self._wake.clear()
            # A short wait instead of a second task racing two events: cheap and always owned.
            await wait_event(self._wake, 0.5)
