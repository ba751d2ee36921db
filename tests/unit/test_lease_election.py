"""Leader election decisions (`model/lease.py`) driven by a simulated clock; nothing sleeps.

Modelled on client-go `tools/leaderelection/leaderelection.go` (`tryAcquireOrRenew`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from launch_agent.model.lease import (
    Election,
    LeaderRecord,
    LeaseTiming,
    record_of,
    spec_of,
)

TIMING = LeaseTiming(lease_duration=15, renew_deadline=10, retry_period=2)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def wall(t: float) -> datetime:
    return T0 + timedelta(seconds=t)


def test_the_first_replica_creates_the_record() -> None:
    a = Election("a", TIMING)
    record = a.proposal(0.0, wall(0))
    assert record == LeaderRecord("a", 15, wall(0), wall(0), 0)
    assert not a.leading(0.0)  # not before the write succeeded
    a.written(record, 0.0)
    assert a.leading(0.0)


def test_a_renewal_keeps_acquire_time_and_transitions() -> None:
    a = Election("a", TIMING)
    first = a.proposal(0.0, wall(0))
    assert first is not None
    a.written(first, 0.0)
    a.observe(first, 2.0)
    renewal = a.proposal(2.0, wall(2))
    assert renewal == LeaderRecord("a", 15, wall(0), wall(2), 0)


def test_leadership_ends_at_the_renew_deadline_after_the_last_renewal_sent() -> None:
    a = Election("a", TIMING)
    record = a.proposal(0.0, wall(0))
    assert record is not None
    a.written(record, 0.0)
    assert a.leading(9.999)
    assert not a.leading(10.0)
    assert a.leading_until() == 10.0


def test_a_live_lease_of_another_is_not_taken_and_an_expired_one_is() -> None:
    b = Election("b", TIMING)
    held = LeaderRecord("a", 15, wall(0), wall(0), 3)
    b.observe(held, 100.0)
    assert b.proposal(114.9, wall(114.9)) is None
    # Reading the same record again does not restart the clock: it expires 15 s after it was
    # first seen, on b's clock (not a's renewTime, which a's own clock wrote).
    b.observe(held, 110.0)
    assert b.proposal(114.9, wall(114.9)) is None
    taken = b.proposal(115.0, wall(115))
    assert taken == LeaderRecord("b", 15, wall(115), wall(115), 4)


def test_a_renewed_record_restarts_the_expiry_clock() -> None:
    b = Election("b", TIMING)
    b.observe(LeaderRecord("a", 15, wall(0), wall(0), 0), 0.0)
    b.observe(LeaderRecord("a", 15, wall(0), wall(2), 0), 14.0)
    assert b.proposal(28.9, wall(28.9)) is None
    assert b.proposal(29.0, wall(29)) is not None


def test_a_released_lease_is_taken_at_once() -> None:
    a, b = Election("a", TIMING), Election("b", TIMING)
    record = a.proposal(0.0, wall(0))
    assert record is not None
    a.written(record, 0.0)
    released = a.release(wall(1))
    assert released == LeaderRecord("", 1, wall(1), wall(1), 0)
    assert not a.leading(1.0)
    b.observe(released, 1.0)
    assert b.proposal(1.0, wall(1)) == LeaderRecord("b", 15, wall(1), wall(1), 1)


def test_release_by_a_replica_that_does_not_hold_it_writes_nothing() -> None:
    b = Election("b", TIMING)
    b.observe(LeaderRecord("a", 15, wall(0), wall(0), 0), 0.0)
    assert b.release(wall(1)) is None


def test_the_lease_spec_round_trips_in_micro_time() -> None:
    record = LeaderRecord("pod-1", 15, wall(0.5), wall(3.25), 2)
    spec = spec_of(record)
    assert spec["renewTime"] == "2026-01-01T00:00:03.250000Z"
    assert record_of({"spec": spec}) == record
    assert record_of({}) == LeaderRecord("", 0, None, None, 0)


@pytest.mark.parametrize(
    ("duration", "deadline", "period"), [(10, 10, 2), (15, 10, 10), (15, 10, 0)]
)
def test_timing_must_be_ordered(duration: float, deadline: float, period: float) -> None:
    with pytest.raises(ValueError, match="lease_duration > renew_deadline > retry_period"):
        LeaseTiming(duration, deadline, period)


# --- never two leaders: replicas against one Lease with conflicts, delays and partitions -----


@dataclass
class Store:
    """The API server's Lease: one record and a resourceVersion; writes are conditional."""

    record: LeaderRecord | None = None
    rv: int = 0

    def write(self, record: LeaderRecord, expected_rv: int) -> bool:
        if expected_rv != self.rv:
            return False  # 409 Conflict
        self.record, self.rv = record, self.rv + 1
        return True


@dataclass
class Pending:
    replica: int
    record: LeaderRecord
    rv: int
    sent: float
    lands: float  # when the server applies it (a slow request)
    answers: float  # when the replica hears the answer


def simulate(seed: int) -> tuple[int, int]:
    """Three replicas trying every retry period, each request delayed at random, replicas
    partitioned from the server for random stretches. Returns (steps with a leader, takeovers);
    asserts at every step that at most one replica believes it leads."""
    rng = random.Random(seed)
    replicas = [Election(f"r{i}", TIMING) for i in range(3)]
    store = Store()
    next_try = [rng.uniform(0, 2) for _ in replicas]
    cut_until = [0.0 for _ in replicas]
    inflight: list[Pending] = []
    led, takeovers, holder = 0, 0, ""
    now, step = 0.0, 0.05
    while now < 600:
        now = round(now + step, 6)
        for p in [p for p in inflight if p.lands <= now and p.lands > now - step]:
            p.rv = -1 if not store.write(p.record, p.rv) else store.rv
        for p in [p for p in inflight if p.answers <= now]:
            inflight.remove(p)
            if p.rv != -1:
                replicas[p.replica].written(p.record, p.sent)
        for i, election in enumerate(replicas):
            if rng.random() < 0.004:
                cut_until[i] = now + rng.uniform(1, 30)  # partitioned: no request gets through
            if now < next_try[i] or any(p.replica == i for p in inflight):
                continue
            next_try[i] = now + TIMING.retry_period
            if now < cut_until[i]:
                continue
            if store.record is not None:
                election.observe(store.record, now)
            proposal = election.proposal(now, wall(now))
            if proposal is None:
                continue
            delay = rng.choice([0.01, 0.01, 0.5, 3.0, 8.0, 12.0])
            inflight.append(Pending(i, proposal, store.rv, now, now + delay / 2, now + delay))
        leaders = [e.identity for e in replicas if e.leading(now)]
        assert len(leaders) <= 1, f"seed {seed}: {leaders} lead together at {now}"
        if leaders:
            led += 1
            if leaders[0] != holder:
                takeovers, holder = takeovers + 1, leaders[0]
    return led, takeovers


@pytest.mark.parametrize("seed", range(20))
def test_two_replicas_never_lead_at_once(seed: int) -> None:
    led, takeovers = simulate(seed)
    # The simulation exercised something: someone led most of the time, and leadership moved.
    assert led > 0
    assert takeovers >= 1
