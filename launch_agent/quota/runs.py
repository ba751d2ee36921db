"""Runs as the admission engine sees them, and the decisions it hands back to its driver.

A run is one W&B launch run: a priority, an enqueue time and pod sets (a PyTorchJob with one
master and N workers has two). Its request is the sum over pod sets of `count · perPod`, plus 1
of the count resource that applies (`runs`, or `sweep_schedulers` for a sweep scheduler), and it
is admitted whole or not at all (a gang).

Times are pairs `(clock, sequence)`: the clock value in seconds supplied by the driver and a
counter the engine increments, so runs enqueued or admitted at the same instant still have a
strict order ("most recently admitted" is always defined, and FIFO keeps the submission order
of a batch).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction

Stamp = tuple[Fraction, int]


class RunState(enum.Enum):
    PENDING = "pending"  # waiting for quota (also while backing off or holding a reservation)
    INADMISSIBLE = "inadmissible"  # larger than some max on its path (R2): never starts
    ADMITTED = "admitted"  # quota charged, workload unsuspended, pods not all running yet
    READY = "ready"  # all pods running
    EVICTING = "evicting"  # evicted; quota stays charged until termination is observed (R10)
    FINISHED = "finished"
    FAILED = "failed"  # readiness timeouts exhausted the backoff limit (R11)


RUNNING_STATES = frozenset({RunState.ADMITTED, RunState.READY})


@dataclass(frozen=True)
class PodSet:
    count: int
    requests: Mapping[str, int]  # per pod, nanounits


@dataclass(frozen=True)
class RunSpec:
    """What the driver knows about a run when it hands it to the engine."""

    id: str
    queue: str
    pod_sets: tuple[PodSet, ...]
    priority: int = 0
    scheduler: bool = False
    # The simulator's shortcut for "all pods come up at once"; the agent reports readiness.
    ready_on_admission: bool = True


@dataclass(eq=False)
class Run:
    """Mutable engine-side record of one run."""

    spec: RunSpec
    leaf: int
    request: dict[str, int]
    enqueued: Stamp
    state: RunState = RunState.PENDING
    admitted: Stamp | None = None
    reason: str = ""
    attempts: int = 0  # readiness timeouts so far (R11)
    not_before: Fraction | None = None  # end of the current backoff
    reserved_at: Fraction | None = None  # set while its victims terminate (R10)
    evicted_for: str = ""  # why the current eviction happened
    fail_after_termination: bool = False
    block_token: int = 0  # bumped whenever the engine scans the run (see engine._block)
    order: tuple[int, Fraction, int, str] = field(init=False)
    # `order` without the clock: the engine stamps runs itself and its clock never goes
    # back, so enqueue sequence numbers grow with enqueue times and order runs alike. Only
    # integers and the id: comparing two is cheap (a Fraction compares in Python code).
    rank: tuple[int, int, str] = field(init=False)

    def __post_init__(self) -> None:
        # R6.1 order within a leaf: priority descending, enqueue time ascending, id.
        self.order = (-self.spec.priority, self.enqueued[0], self.enqueued[1], self.spec.id)
        self.rank = (-self.spec.priority, self.enqueued[1], self.spec.id)

    @property
    def id(self) -> str:
        return self.spec.id

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def pods(self) -> int:
        return sum(p.count for p in self.spec.pod_sets)


@dataclass(frozen=True)
class Decision:
    """One thing the driver must do: `admit` (unsuspend), `evict` (suspend or delete the
    workload, then report `terminated`), `reserve` (a preemptor waits for its victims) or
    `fail` (report the run failed)."""

    action: str
    run: str
    reason: str = ""
    by: str = ""  # the preemptor, for evictions
