"""Settling an item: W&B will not offer it again once it is acked (CLAIMED) or failed.

Names are deterministic, so while a run's workload exists a second pop of its item answers 409
and adopts it: the workload is the proof that the item ran. An item W&B may still offer again
(its ack lost: a kill between the create and the ack, a lapsed lease, an ack answered
`WandbAckUncertain`) must therefore keep its workload until it is settled, or W&B offers it once
the lease lapses and it is created a second time. This module is every part of that:

- `ack`: the dispatcher's ack once the workload exists (`success: false` or an uncertain ack
  leaves the record tracked and the item unsettled);
- `offered_again`: W&B offers an item this process has a workload for: acked, never created
  again;
- `settle`: before a finished run is cleaned up, whether its item is settled, acking it while
  the lease of the process that created it still runs (`Finisher._finish`);
- `wait` / `settled`: runs over whose item is not settled yet, held (with their workload) until
  the dispatcher acks the offer (`Unsettled`); the finisher takes them back once that happened.

Neither the W&B run (a run that never called wandb.init has none) nor anything a deleted
workload leaves says the item ran; the item's state in W&B is the one record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import assert_never

from launch_agent.adapters.wandb_client import RunQueueItem, WandbClient
from launch_agent.adapters.wandb_errors import WandbAckUncertain, WandbError, WandbUnavailable
from launch_agent.model.run_item import shown_item_id
from launch_agent.model.run_state import RunState
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.reporter import Declined, ItemRef, NotSent, Reporter, Sent
from launch_agent.runtime.runs import RunRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Unsettled:
    """A run that is over, whose item W&B may still offer again: its record and workload stay
    until the item is acked, then the run's end is handled again with `state`."""

    record: RunRecord
    state: RunState


class Settlement:
    """Acks and item states for the dispatcher and the finisher (module docstring)."""

    def __init__(
        self, wandb: WandbClient, reporter: Reporter, metrics: Metrics, *, queue_entity: str
    ) -> None:
        self.wandb = wandb
        self.reporter = reporter
        self.metrics = metrics
        self.queue_entity = queue_entity
        # Runs over whose item W&B may still offer again, by item id (`wait`).
        self.unsettled: dict[str, Unsettled] = {}

    # --- the dispatcher's ------------------------------------------------------------------

    async def ack(self, item: RunQueueItem, record: RunRecord) -> None:
        """`ackRunQueueItem` for a workload that now exists."""
        try:
            won = await self.wandb.ack(item.id, record.run_id)
        except WandbAckUncertain as exc:
            # It may have landed or not (the chaos bench saw such items offered again): the
            # workload stays tracked, the item not known acked; the offer is acked if it comes,
            # and W&B's item state is read before the run's clean-up (`settle`).
            log.warning("%s; the item is settled when offered again or when the run ends", exc)
            return
        except WandbUnavailable as exc:
            log.warning(
                "ack of item %s not sent (%s): W&B offers it again after its lease and the"
                " existing workload is adopted then",
                item.id,
                exc,
            )
            return
        except WandbError as exc:
            log.error("W&B refused the ack of item %s: %s", shown_item_id(item.id), exc)
            return
        if not won:
            if record.acked:
                return  # claimed meanwhile by this process (the finisher settling the run)
            # Our lease lapsed: W&B offers the item again (or another agent claimed it). The
            # workload's name is the item's, so any claim of the item is of this workload: it
            # stays tracked (dropping it left an unreported run and its quota held), and the
            # item is acked when offered again or settled when the run ends (`settle`).
            log.warning(
                "ack of item %s answered success: false (our lease lapsed): %s stays tracked",
                item.id,
                record.workload,
            )
            return
        record.acked = True

    async def offered_again(self, item: RunQueueItem, record: RunRecord) -> None:
        """W&B offers an item this process has a workload for (created or adopted): its ack
        was lost and its lease lapsed. The run is never rendered or created again, whatever
        became of its workload (a custom resource that ended is deleted, and then a create
        would succeed): the offer is acked. A run already over waits for this ack before its
        clean-up (`wait`). A record without a workload yet is a dispatch of the same item
        still in flight: that dispatch acks."""
        if record.last is None:
            return  # a record whose create has not answered is a dispatch's: it acks
        log.warning(
            "item %s offered again by W&B (its ack was lost, its lease lapsed): %s exists"
            " already; acking it, not creating it again",
            item.id,
            record.workload,
        )
        # Counted as a create answering 409 is: the pop found its workload.
        self.metrics.submits.labels(queue=item.queue, kind=record.kind, outcome="adopted").inc()
        await self.ack(item, record)

    # --- the finisher's --------------------------------------------------------------------

    async def settle(self, record: RunRecord) -> bool | None:
        """True once W&B will not offer the run's item again: it is CLAIMED (acked) or FAILED.
        False while it may (PENDING or LEASED, its ack lost); None: stopping during an outage.

        An un-acked item is acked here while its lease (the killed process's) still runs; once
        it lapsed, W&B accepts no ack (`success: false` for any item not LEASED: the sandbox's
        model of wandb's server, whose agent reads that as "already acknowledged",
        `Api.ack_run_queue_item` in wandb/sdk/internal/internal_api.py), so the record and its
        workload stay until W&B offers the item again and `offered_again` acks that offer.
        """
        if record.acked:
            return True
        ref = ItemRef(self.queue_entity, record.queue, record.rqi_id)
        state = await self.reporter.item_state(ref)
        match state:
            case NotSent():
                return None
            case Declined(error=error):
                return await self._unknown_state(record, error)
            case Sent(value=None):
                log.warning(
                    "item %s of %s is not in queue %r in W&B: nothing left to settle",
                    record.rqi_id,
                    record.workload,
                    record.queue,
                )
                return True
            case Sent(value="CLAIMED"):
                record.acked = True
                return True
            case Sent(value="FAILED"):
                return True
            case Sent(value="LEASED"):
                return await self._claim(record)
            case Sent():
                log.info(
                    "item %s of %s is offered again by W&B (its ack was lost and its lease"
                    " lapsed): the workload stays until the item is popped and acked",
                    record.rqi_id,
                    record.workload,
                )
                return False
            case _:
                assert_never(state)

    async def _unknown_state(self, record: RunRecord, error: str) -> bool | None:
        """An error answer (an older server without `runQueueItem`): asking again gets the
        same. An ack still settles a LEASED item; otherwise the run is cleaned up as it was
        before W&B could be asked, rather than kept for ever."""
        claimed = await self.reporter.claim(record.rqi_id, record.run_id)
        if isinstance(claimed, NotSent):
            return None
        if claimed == Sent(True):
            record.acked = True
        else:
            log.warning(
                "W&B cannot say whether item %s of %s was acked (%s): cleaned up",
                record.rqi_id,
                record.workload,
                error,
            )
        return True

    async def _claim(self, record: RunRecord) -> bool | None:
        """A LEASED item whose ack was lost: ack it while the lease runs."""
        claimed = await self.reporter.claim(record.rqi_id, record.run_id)
        match claimed:
            case NotSent():
                return None
            case Sent(value=True):
                log.info(
                    "acked item %s of %s (its ack had been lost)", record.rqi_id, record.workload
                )
                record.acked = True
                return True
            case Sent() | Declined():
                # The lease lapsed meanwhile, or the dispatcher acked the offer first.
                return record.acked
            case _:
                assert_never(claimed)

    def wait(self, record: RunRecord, state: RunState) -> None:
        """Hold a run that is over until its item is acked (`settled` gives it back)."""
        self.unsettled[record.rqi_id] = Unsettled(record, state)

    def settled(self) -> list[Unsettled]:
        """The runs held by `wait` whose item has been acked since, no longer held."""
        done = [u for u in self.unsettled.values() if u.record.acked]
        for unsettled in done:
            del self.unsettled[unsettled.record.rqi_id]
        return done

    def forget(self, rqi_id: str) -> None:
        self.unsettled.pop(rqi_id, None)
