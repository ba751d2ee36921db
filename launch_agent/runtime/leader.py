"""Leader election over a `coordination.k8s.io/v1` Lease: the I/O loop around `model/lease.py`.

client-go's `LeaderElector.Run` (tools/leaderelection/leaderelection.go): `acquire` tries every
`retry_period` (jittered with `adapters/retry.backoff_delay`, so replicas that start together
do not write together) until the Lease is this replica's; `renew` then tries every
`retry_period` and, if no renewal succeeded for `renew_deadline`, leadership ends at that
moment, whatever a request still in flight may do later. Each attempt is one GET and one
conditional write (`resourceVersion`; a 409 Conflict is another replica's write winning);
attempts are bounded by the time left, so a hung API server cannot stretch a term.

Losing leadership calls `on_lost` (the agent stops, as kube-controller-manager exits: a fresh
start as a standby is the simple safe state) and the loop ends. On a clean exit a leader
releases the Lease (holder emptied, as client-go's `ReleaseOnCancel`), so the standby takes
over in one `retry_period` instead of a `lease_duration`: a rolling update has no dispatch gap.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import datetime
from typing import Any

from launch_agent.adapters.kube import KubeClient, KubeError
from launch_agent.adapters.kube.errors import KubeConflict, KubeNotFound
from launch_agent.adapters.retry import backoff_delay
from launch_agent.aio import race, wait_event
from launch_agent.model.lease import Election, LeaderRecord, LeaseTiming, record_of, spec_of
from launch_agent.runtime.clock import Clock
from launch_agent.tracking.views import Meta

log = logging.getLogger(__name__)

API_VERSION = "coordination.k8s.io/v1"
STRICT = (("fieldValidation", "Strict"), ("fieldManager", "launch-agent"))


class LeaderElector:
    """Acquires and renews one Lease; `leading` is set while this replica leads."""

    def __init__(
        self,
        kube: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        timing: LeaseTiming,
        clock: Clock,
        now: Callable[[], datetime],
        on_change: Callable[[str], None],
        on_holder: Callable[[str], None] | None = None,
        on_lost: Callable[[str], None],
        rng: random.Random | None = None,
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.election = Election(identity, timing)
        self.timing = timing
        self.clock = clock
        self.now = now
        self.on_change = on_change  # "leader" / "standby": for /readyz and metrics
        self.on_holder = on_holder  # the holder's identity, when it changes (status page)
        self.on_lost = on_lost
        self.rng = rng or random.Random()
        self.leading = asyncio.Event()
        self.tried = asyncio.Event()  # the first attempt is over: `leader` is known
        self.leader: str = ""  # the holder last observed
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._lease: dict[str, Any] | None = None  # the last object read or written

    @property
    def identity(self) -> str:
        return self.election.identity

    @property
    def path(self) -> str:
        return f"/apis/{API_VERSION}/namespaces/{self.namespace}/leases/{self.name}"

    async def __aenter__(self) -> LeaderElector:
        self._task = asyncio.create_task(self._run(), name="leader-election")
        return self

    async def __aexit__(self, *_: object) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self.leading.is_set():
            self.leading.clear()
            await self._release()

    async def wait_tried(self, stopping: asyncio.Event) -> None:
        await race(self.tried.wait(), stopping, name="wait-lease-tried")

    async def wait_leading(self, stopping: asyncio.Event) -> bool:
        """Until this replica leads (True) or `stopping` is set (False)."""
        task = await race(self.leading.wait(), stopping, name="wait-leading")
        return task is not None and self.leading.is_set()

    async def _run(self) -> None:
        self.on_change("standby")
        while not self._stop.is_set():
            won = await self._attempt()
            if won:
                break
            self.tried.set()
            await wait_event(self._stop, self._jittered())
        if self._stop.is_set():
            return
        self.leading.set()
        self.tried.set()
        log.info("leading: this replica (%s) holds Lease %s/%s", self.identity, *self._where)
        self.on_change("leader")
        reason = await self._renew_until_lost()
        if reason is None:
            return
        self.leading.clear()
        self.election.resign()
        log.error("lost the leader Lease %s/%s: %s", *self._where, reason)
        self.on_change("standby")
        self.on_lost(reason)

    @property
    def _where(self) -> tuple[str, str]:
        return self.namespace, self.name

    def _jittered(self) -> float:
        # client-go's `wait.JitterUntil(..., RetryPeriod, JitterFactor=1.2, ...)` in `acquire`.
        spread = 1.2 * self.timing.retry_period
        return self.timing.retry_period + backoff_delay(spread, spread, 0, self.rng.random(), 1.0)

    async def _renew_until_lost(self) -> str | None:
        """Renew every retry_period; the reason leadership ended, None on a clean stop."""
        while not self._stop.is_set():
            await wait_event(self._stop, self.timing.retry_period)
            while not self._stop.is_set():
                until = self.election.leading_until()
                left = 0.0 if until is None else until - self.clock()
                if left <= 0:
                    return f"no renewal succeeded within {self.timing.renew_deadline:g}s"
                try:
                    async with asyncio.timeout(left):
                        renewed = await self._attempt()
                except TimeoutError:
                    continue  # the loop above ends the term now
                if renewed:
                    break
                if self.election.held_by_other(self.clock()):
                    return f"the Lease is held by {self.leader!r}"
                # Measured again: the attempt took time, and the term ends on time regardless.
                left = 0.0 if until is None else until - self.clock()
                await wait_event(self._stop, min(self.timing.retry_period, max(left, 0.0)))
        return None

    async def _attempt(self) -> bool:
        """client-go's `tryAcquireOrRenew`: one read, one conditional write; True if this
        replica holds the Lease now."""
        sent = self.clock()
        try:
            current = await self._get()
            if current is None:
                record = self.election.proposal(sent, self.now())
                assert record is not None  # nobody holds a Lease that does not exist
                self._lease = await self._create(record)
                self.election.written(record, sent)
                self._noticed(record)
                return True
            observed = record_of(current)
            self.election.observe(observed, self.clock())
            self._noticed(observed)
            proposal = self.election.proposal(self.clock(), self.now())
            if proposal is None:
                return False
            self._lease = await self._update(current, proposal)
            self.election.written(proposal, sent)
            self._noticed(proposal)
            return True
        except KubeConflict as exc:
            log.debug("Lease %s/%s: another replica wrote first (%s)", *self._where, exc.reason)
        except KubeError as exc:
            log.warning("Lease %s/%s: %s", *self._where, exc)
        return False

    def _noticed(self, record: LeaderRecord) -> None:
        if record.holder != self.leader:
            if record.holder and record.holder != self.identity:
                log.info("Lease %s/%s is held by %s", *self._where, record.holder)
            self.leader = record.holder
            if self.on_holder is not None:
                self.on_holder(record.holder)

    async def _get(self) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = await self.kube.request("GET", self.path, retry=False)
        except KubeNotFound:
            return None
        return lease

    async def _create(self, record: LeaderRecord) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec_of(record),
        }
        path = f"/apis/{API_VERSION}/namespaces/{self.namespace}/leases"
        created: dict[str, Any] = await self.kube.request(
            "POST", path, query=STRICT, body=body, retry=False
        )
        return created

    async def _update(self, current: dict[str, Any], record: LeaderRecord) -> dict[str, Any]:
        body = {
            "apiVersion": API_VERSION,
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": Meta(current).resource_version,
            },
            "spec": spec_of(record),
        }
        updated: dict[str, Any] = await self.kube.request(
            "PUT", self.path, query=STRICT, body=body, retry=False
        )
        return updated

    async def _release(self) -> None:
        record = self.election.release(self.now())
        if record is None or self._lease is None:
            return
        try:
            async with asyncio.timeout(self.timing.retry_period):
                await self._update(self._lease, record)
            log.info("released the leader Lease %s/%s", *self._where)
        except (KubeError, TimeoutError) as exc:
            log.warning("could not release the Lease %s/%s: %s", *self._where, exc)
