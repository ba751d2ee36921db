"""Leader election decisions over a `coordination.k8s.io/v1` Lease, as client-go makes them.

Modelled on kubernetes/client-go `tools/leaderelection/leaderelection.go`
(`LeaderElector.tryAcquireOrRenew`, `renew`, `release`) and `resourcelock/leaselock.go`
(`LeaseSpecToLeaderElectionRecord`, `LeaderElectionRecordToLeaseSpec`). The rules kept:

- a lease held by someone else is live until `leaseDurationSeconds` after this replica
  *observed* the record change, on its own monotonic clock (not the holder's `renewTime`:
  replicas' wall clocks may disagree, their rates do not);
- an empty `holderIdentity` (a released lease) can be taken at once;
- taking over keeps `leaseTransitions` counting and sets `acquireTime`; a renewal keeps both;
- writes are conditional on `resourceVersion` (the I/O side sends it; a 409 means someone else
  wrote first and this attempt failed);
- the leader leads only until `renew_deadline` after the last renewal it *sent* and saw
  succeed. Others cannot take over before `lease_duration` after they observed that renewal,
  which is later than it was sent, and `renew_deadline < lease_duration`: two leaders never
  overlap (given clocks whose rates agree, as client-go assumes).

Pure: the runtime (`runtime/leader.py`) reads and writes the Lease and passes times in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# metav1.MicroTime's wire format (RFC 3339 with microseconds), as the API server writes it.
MICRO_TIME = "%Y-%m-%dT%H:%M:%S.%fZ"


@dataclass(frozen=True)
class LeaseTiming:
    """client-go's LeaderElectionConfig: LeaseDuration > RenewDeadline > RetryPeriod."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period > 0:
            raise ValueError(
                "need lease_duration > renew_deadline > retry_period > 0, got"
                f" {self.lease_duration:g}, {self.renew_deadline:g}, {self.retry_period:g}"
            )


@dataclass(frozen=True)
class LeaderRecord:
    """The Lease's spec as client-go's `LeaderElectionRecord`."""

    holder: str
    duration_seconds: int
    acquire_time: datetime | None
    renew_time: datetime | None
    transitions: int


def micro_time(value: datetime) -> str:
    return value.astimezone(UTC).strftime(MICRO_TIME)


def _parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def record_of(lease: Mapping[str, Any]) -> LeaderRecord:
    """`LeaseSpecToLeaderElectionRecord`: missing fields read as empty, as in Go."""
    spec = lease.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    holder = spec.get("holderIdentity")
    return LeaderRecord(
        holder=holder if isinstance(holder, str) else "",
        duration_seconds=_int(spec.get("leaseDurationSeconds")),
        acquire_time=_parse_time(spec.get("acquireTime")),
        renew_time=_parse_time(spec.get("renewTime")),
        transitions=_int(spec.get("leaseTransitions")),
    )


def spec_of(record: LeaderRecord) -> dict[str, Any]:
    """`LeaderElectionRecordToLeaseSpec`."""
    spec: dict[str, Any] = {
        "holderIdentity": record.holder,
        "leaseDurationSeconds": record.duration_seconds,
        "leaseTransitions": record.transitions,
    }
    if record.acquire_time is not None:
        spec["acquireTime"] = micro_time(record.acquire_time)
    if record.renew_time is not None:
        spec["renewTime"] = micro_time(record.renew_time)
    return spec


class Election:
    """One replica's view of the election: what it observed, whether it leads."""

    def __init__(self, identity: str, timing: LeaseTiming) -> None:
        if not identity:
            raise ValueError("a leader election identity must not be empty")
        self.identity = identity
        self.timing = timing
        self.observed: LeaderRecord | None = None
        self.observed_at: float | None = None  # monotonic, when `observed` last changed
        self.renewed_at: float | None = None  # monotonic, when the last good renewal was sent

    def observe(self, record: LeaderRecord, now: float) -> None:
        """A record read from the Lease; the expiry clock restarts only when it changed."""
        if record != self.observed:
            self.observed, self.observed_at = record, now

    def held_by_other(self, now: float) -> bool:
        """Someone else holds a lease that has not expired on this replica's clock."""
        record, at = self.observed, self.observed_at
        if record is None or at is None or not record.holder or record.holder == self.identity:
            return False
        return at + record.duration_seconds > now

    def proposal(self, now: float, wall: datetime) -> LeaderRecord | None:
        """The record to write to acquire or renew (after `observe`), or None: not now."""
        if self.held_by_other(now):
            return None
        current = self.observed
        duration = math.ceil(self.timing.lease_duration)
        if current is not None and current.holder == self.identity:
            return LeaderRecord(
                self.identity, duration, current.acquire_time, wall, current.transitions
            )
        # client-go counts a transition whenever the record was not ours, released ones too.
        transitions = 0 if current is None else current.transitions + 1
        return LeaderRecord(self.identity, duration, wall, wall, transitions)

    def written(self, record: LeaderRecord, sent_at: float) -> None:
        """The write of `record`, sent at `sent_at`, succeeded."""
        self.observed, self.observed_at = record, sent_at
        if record.holder == self.identity:
            self.renewed_at = sent_at

    def leading(self, now: float) -> bool:
        at = self.renewed_at
        return at is not None and now - at < self.timing.renew_deadline

    def leading_until(self) -> float | None:
        """The monotonic time leadership ends unless renewed first."""
        at = self.renewed_at
        return None if at is None else at + self.timing.renew_deadline

    def resign(self) -> None:
        self.renewed_at = None

    def release(self, wall: datetime) -> LeaderRecord | None:
        """client-go's `release`: holder emptied, 1 s duration, transitions kept; None if this
        replica does not hold the lease."""
        current = self.observed
        if current is None or current.holder != self.identity:
            return None
        self.renewed_at = None
        return LeaderRecord("", 1, wall, wall, current.transitions)
