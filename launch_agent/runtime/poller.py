"""The poll loop: pop only what can start, fairly across queues, at an adaptive pace.

Each round asks the admission policy how many runs may start (`Admission.room`), pops in one
batched request from every queue (a queue that filled all its pops last round gets twice as
many, up to `poll.max_pops_per_queue`; `poll_policy.PopPlan`), and hands each item to the
dispatcher in a task owned by the loop's `TaskGroup`. A popped item holds a slot from the pop
on, and a request never pops more than the room, so the agent never pops what it cannot start.

Pace: after a pop that returned work the next one follows at once while capacity allows (W&B's
agent does the same); empty pops wait `poll.active_interval_seconds`, doubling up to
`poll.idle_interval_seconds`. A run that ends wakes the loop at once when the agent was full.

The loop also asks W&B every `agent_check_seconds` whether the agent should stop polling
(`stopPolling`, set from the W&B UI) and reports the agent status (POLLING / RUNNING) when it
changes. A W&B outage pauses popping (with the idle interval); it never ends the loop.

Admission is a seam: the loop asks the admission stage (`runtime/admission/stage.py`) may I
pop, whichever of `max_jobs`, the agent's quota tree or Kueue is behind it.

`rounds` counts the loop's turns (each ends in a pop or a wait) and `round_done` is set at the
end of each, so a test waits for "N more rounds" instead of sleeping.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Sequence

from launch_agent.adapters.wandb_client import AgentStatus, RunQueueItem, WandbClient
from launch_agent.adapters.wandb_errors import WandbAuthError, WandbError
from launch_agent.aio import wait_event
from launch_agent.model.config import PollConfig
from launch_agent.model.run_item import shown_item_id
from launch_agent.runtime.admission.stage import AdmissionStage
from launch_agent.runtime.clock import Clock, monotonic
from launch_agent.runtime.dispatcher import Dispatcher
from launch_agent.runtime.health import Readiness
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.poll_policy import PollInterval, PopPlan
from launch_agent.runtime.runs import RunTable

log = logging.getLogger(__name__)


class Poller:
    def __init__(
        self,
        wandb: WandbClient,
        runs: RunTable,
        dispatcher: Dispatcher,
        metrics: Metrics,
        readiness: Readiness,
        *,
        entity: str,
        queues: Sequence[str],
        agent_id: str,
        poll: PollConfig,
        admission: AdmissionStage,
        on_stop_polling: Callable[[str], None],
        wake: asyncio.Event,
        agent_check_seconds: float = 30.0,
        clock: Clock = monotonic,
    ) -> None:
        self.wandb = wandb
        self.runs = runs
        self.dispatcher = dispatcher
        self.metrics = metrics
        self.readiness = readiness
        self.entity = entity
        self.queues = list(queues)
        self.agent_id = agent_id
        self.poll = poll
        self.admission = admission
        self.on_stop_polling = on_stop_polling
        self.agent_check_seconds = agent_check_seconds
        # Set when a run ends, the quota has room or the agent stops: a full agent waits on it.
        # The run table and the admission stage were built with its `set`.
        self.wake = wake
        self.clock = clock
        self.status: AgentStatus = "POLLING"
        self._last_check = clock()
        self.pops = 0
        self.rounds = 0
        self.round_done = asyncio.Event()

    async def run(self, stopping: asyncio.Event) -> None:
        interval = PollInterval(self.poll.active_interval_seconds, self.poll.idle_interval_seconds)
        plan = PopPlan(self.poll.max_pops_per_queue)
        turn = 0
        async with asyncio.TaskGroup() as group:
            while not stopping.is_set():
                try:
                    await self._check_agent()
                    if stopping.is_set():
                        break
                    room = self.admission.room(self.runs.inflight)
                    if room == 0:
                        self.wake.clear()
                        await wait_event(self.wake, self.poll.idle_interval_seconds)
                        continue
                    slots = plan.slots(
                        self.queues, room, turn, self.admission.queue_caps(self.queues)
                    )
                    if not slots:
                        self.wake.clear()
                        await wait_event(self.wake, self.poll.idle_interval_seconds)
                        continue
                    turn += 1
                    try:
                        popped = await self.wandb.pop_many(self.entity, slots, self.agent_id)
                    except WandbError as exc:
                        level = (
                            logging.ERROR if isinstance(exc, WandbAuthError) else logging.WARNING
                        )
                        log.log(level, "pop failed, retrying later: %s", exc)
                        self.wake.clear()
                        await wait_event(self.wake, interval.after(False))
                        continue
                    self.pops += 1
                    self.readiness.polled()
                    now = self.clock()
                    asked: Counter[str] = Counter(queue for queue, _ in popped)
                    got: Counter[str] = Counter(queue for queue, item in popped if item is not None)
                    for queue, count in asked.items():
                        plan.record(queue, count, got[queue])
                    items = [item for _, item in popped if item is not None]
                    for item in items:
                        self.metrics.popped(item.queue, item.id)
                        self.runs.dispatching += 1
                        group.create_task(self._dispatch(item, now), name=f"dispatch {item.id}")
                    if items:
                        interval.after(True)
                        await asyncio.sleep(0)  # let the dispatches start before the next pop
                        continue
                    self.metrics.empty_polls.inc()
                    self.wake.clear()
                    await wait_event(self.wake, interval.after(False))
                finally:
                    self._end_round()
        log.info("poller stopped; in-flight dispatches finished")

    def _end_round(self) -> None:
        self.rounds += 1
        self.round_done.set()
        self.round_done.clear()  # waiters already woken; the next round sets it again

    async def wait_rounds(self, count: int) -> None:
        """Return once `count` more rounds of the loop have ended (for tests)."""
        target = self.rounds + count
        while self.rounds < target:
            await self.round_done.wait()

    async def _dispatch(self, item: RunQueueItem, popped_at: float) -> None:
        try:
            await self.dispatcher.dispatch(item, popped_at)
        except Exception:
            # A bug must not take the loop down; the item's lease lapses and W&B offers it again.
            log.exception("dispatch of item %s failed unexpectedly", shown_item_id(item.id))
        finally:
            self.runs.dispatching -= 1

    async def _check_agent(self) -> None:
        now = self.clock()
        if now - self._last_check < self.agent_check_seconds:
            return
        self._last_check = now
        try:
            info = await self.wandb.launch_agent(self.agent_id)
            if info.stop_polling:
                self.on_stop_polling("W&B asked the agent to stop polling (stopPolling)")
                return
            status: AgentStatus = "RUNNING" if self.runs.inflight else "POLLING"
            if status != self.status:
                await self.wandb.update_launch_agent(self.agent_id, status)
                self.status = status
        except WandbError as exc:
            log.warning("agent status check failed, retrying later: %s", exc)
