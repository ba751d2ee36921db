"""`quota.mode: agent`: the elastic quota tree decides which popped runs start.

One `QuotaAdmission` owns one pure `AdmissionEngine` and is the agent's admission stage
(`stage.AdmissionStage`):

- **may I pop** (`room`, `queue_caps`): `room` is unlimited (the tree's `runs`, which is
  `max_jobs` when the tree does not name it, bounds what *runs*); `queue_caps` bounds what is
  *popped*: a leaf with `quota.max_pending_per_leaf` runs pending (or being dispatched) caps its
  queues at 0, so work the agent cannot start soon stays in W&B for other agents (`gate.py`);
- **admit** (`holding`, `admit`, `created`): the run is rendered *suspended* with its stamp
  (leaf, priority, strictly increasing enqueue time, pod sets; `quota.requests.QuotaStamp`),
  created, acked, then submitted to the engine in stamp order (`ordering.py`). A queue without a
  leaf, a spec naming an unknown leaf and a kind without a suspend field (LeaderWorkerSet,
  Volcano Job) are refused with the reason: the agent could not hold such a workload back;
- **tracker** (`observe`, passed to the tracker when it is built): a run's state from the
  informers drives the engine: running → `mark_ready`, suspended again after an eviction →
  `terminated`, terminal → `finish`;
- **start-up** (`rebuild`, `rebuild.py`): the adopted workloads rebuild the engine before
  anything is popped.

`quota_driver.QuotaDriver` turns the engine's decisions into patches and W&B warnings. Every
engine call happens on the event loop thread; the engine is never used concurrently. The two
wake-ups (`on_change`: the driver's, `on_room`: the poller's) are given to the constructor.
"""

from __future__ import annotations

import functools
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from fractions import Fraction
from typing import Any

from launch_agent.model.config import AgentConfig
from launch_agent.model.queue_spec import InvalidInput, QueueSpec
from launch_agent.model.run_state import RunState
from launch_agent.model.sweeps import is_scheduler_item
from launch_agent.quota import (
    AdmissionEngine,
    Decision,
    EngineError,
    QuotaTree,
    TreeError,
    parse_tree,
    validate_tree,
)
from launch_agent.quota import RunState as QState
from launch_agent.quota.requests import (
    ADMITTED,
    STAMP,
    QuotaStamp,
    RequestError,
    agent_tree,
    leaf_names,
    load_time,
    priority_of,
    resolve_leaf,
    run_pod_sets,
)
from launch_agent.render.decisions import Admission, NotAdmitted, can_suspend
from launch_agent.render.kinds import PodSet
from launch_agent.render.pipeline import is_suspended
from launch_agent.runtime.admission.gate import PendingHolds, share_caps
from launch_agent.runtime.admission.ordering import StampOrder
from launch_agent.runtime.admission.rebuild import replay, sort_adopted
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore
from launch_agent.runtime.startup import StartupError
from launch_agent.tracking.views import Meta

log = logging.getLogger(__name__)


def engine_time(moment: datetime) -> Fraction:
    """The engine's clock: seconds since the epoch, to the millisecond (exact rationals)."""
    return Fraction(round(moment.timestamp() * 1000), 1000)


def tree_problems(tree: object) -> list[str]:
    """`quota.tree` problems, each with its path in the configuration."""
    if tree is None:
        return ["quota.tree: quota.mode is agent but no tree is configured"]
    return [f"{p.key('quota.tree')}: {p.reason}" for p in validate_tree(tree)]


def stamp_annotation(
    where: str,
    leaf: str,
    priority: int,
    enqueued: Fraction,
    sets: list[PodSet],
    *,
    scheduler: bool = False,
) -> dict[str, str]:
    """The quota stamp of a rendered workload (its pod sets are its request). A sweep
    scheduler is charged to its leaf's `sweep_schedulers` count instead of `runs`."""
    try:
        request = run_pod_sets(sets)
    except RequestError as exc:
        raise NotAdmitted(f"{where}: cannot compute the run's quota request: {exc}") from None
    return {STAMP: QuotaStamp(leaf, priority, enqueued, request, scheduler).dump()}


def _ignore() -> None:
    pass


class QuotaAdmission:
    """The agent's admission stage for `quota.mode: agent` (see the module docstring)."""

    def __init__(
        self,
        config: AgentConfig,
        tree: QuotaTree,
        leaves: Mapping[str, Sequence[str]],
        specs: SpecStore,
        runs: RunTable,
        *,
        now: Callable[[], datetime],
        on_change: Callable[[], None] = _ignore,
        on_room: Callable[[], None] = _ignore,
    ) -> None:
        self.tree = tree
        self.leaves = dict(leaves)
        self.specs = specs
        self.runs = runs
        self.now = now
        self.on_change = on_change  # the driver's wake-up
        self.on_room = on_room  # the poller's wake-up
        self.max_pending = config.quota.max_pending_per_leaf
        self.engine = AdmissionEngine(tree, engine_time(now()))
        self.started = False
        self.holds = PendingHolds(on_room)  # leaf → popped runs the engine does not know yet
        self.order = StampOrder()
        self._turn = 0
        # Runs the driver has to act on outside the engine's decisions: (item id, message).
        self.failures: list[tuple[str, str]] = []
        self.backlog: list[Decision] = []  # decisions produced while rebuilding
        self.explain_due: set[str] = set()
        self.unstamped: set[str] = set()  # runs without a readable stamp (logged once)
        self._last_enqueued = Fraction(0)

    @classmethod
    def from_config(
        cls,
        config: AgentConfig,
        specs: SpecStore,
        runs: RunTable,
        *,
        now: Callable[[], datetime],
        on_change: Callable[[], None] = _ignore,
        on_room: Callable[[], None] = _ignore,
    ) -> QuotaAdmission:
        """Validate `quota.tree` (R1) as a whole; `StartupError` names every problem."""
        raw = config.quota.tree
        problems = tree_problems(raw)
        if problems:
            raise StartupError("invalid quota tree (quota.mode agent): " + "; ".join(problems))
        assert raw is not None
        try:
            tree = parse_tree(agent_tree(raw, config.max_jobs))
        except TreeError as exc:  # only what the agent adds: max_jobs as the root's runs
            raise StartupError(
                f"invalid quota tree with max_jobs {config.max_jobs}: {exc}"
            ) from None
        admission = cls(
            config,
            tree,
            leaf_names(raw),
            specs,
            runs,
            now=now,
            on_change=on_change,
            on_room=on_room,
        )
        for spec in specs.specs:
            for queue in spec.queues:
                leaf, why = resolve_leaf(queue, spec.quota_leaf, admission.leaves)
                if leaf is None:
                    log.warning("queue spec %s: %s; its items will fail", spec.name, why)
        return admission

    # --- may I pop ---------------------------------------------------------------------------

    def room(self, inflight: int) -> int | None:
        return None

    def queue_caps(self, queues: Sequence[str]) -> Mapping[str, int]:
        """Each leaf's free pending slots, shared by its queues (rotating who gets a
        remainder); a queue tied to no leaf gets one pop per round (it fails at once)."""
        pending = self.pending_by_leaf()
        by_leaf: dict[str, list[str]] = {}
        caps: dict[str, int] = {}
        for queue in queues:
            leaf = self.leaf_of(queue)
            if leaf is None:
                caps[queue] = 1
            else:
                by_leaf.setdefault(leaf, []).append(queue)
        self._turn += 1
        free = {leaf: self.max_pending - pending[leaf] - self.holds.held(leaf) for leaf in by_leaf}
        caps.update(share_caps(by_leaf, free, self._turn))
        return caps

    def pending_by_leaf(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for run in self.engine.runs.values():
            if run.state is QState.PENDING or run.state is QState.EVICTING:
                out[run.spec.queue[1:]] += 1
        return out

    def leaf_of(self, queue: str) -> str | None:
        spec = self.specs.for_queue(queue)
        leaf, _ = resolve_leaf(queue, spec.quota_leaf if spec else None, self.leaves)
        return leaf

    # --- admit this run, release it ----------------------------------------------------------

    @contextmanager
    def holding(self, queue: str, rqi_id: str) -> Iterator[None]:
        """A popped item holds a pending slot of its leaf until the engine knows its run or
        the item failed. A run created out of stamp order waits in the ordering buffer and
        keeps its slot until it is submitted: releasing it at the end of its dispatch would let
        the poller pop past `max_pending_per_leaf` while the run is in neither count."""
        leaf = self.leaf_of(queue)
        mine = leaf is not None and self.holds.take(rqi_id, leaf)
        try:
            yield
        finally:
            self._submit_due(self.order.abandon(rqi_id))  # stamped but never created
            if mine and not self.order.awaiting(rqi_id):
                self.holds.release(rqi_id)

    def admit(
        self, rqi_id: str, queue: str, spec: QueueSpec, run_spec: Mapping[str, Any]
    ) -> Admission:
        """Render the run suspended and stamped; `NotAdmitted` if the quota cannot hold it back."""
        if spec.multi_kueue:
            # Kueue's (the split stage routes them there, `multikueue.py`): never the tree's.
            raise NotAdmitted(
                f"queue spec {spec.name!r} uses MultiKueue, which the manager's Kueue admits:"
                " the quota tree does not hold its runs"
            )
        leaf, why = resolve_leaf(queue, spec.quota_leaf, self.leaves)
        found = self.specs.table.by_queue.get(queue)
        where = f"queue spec {spec.name!r}" + (f" ({found[0]})" if found else "")
        if leaf is None:
            raise NotAdmitted(f"{where}: {why}")
        problem = can_suspend(spec)
        if problem is not None:
            raise NotAdmitted(
                f"{where}: quota.mode agent holds pending runs as suspended workloads, but"
                f" {problem}; serve queue {queue!r} with a kind that can be suspended, or use"
                " quota.mode kueue or off"
            )
        # Strictly increasing enqueue times: a restart orders the waiting runs as they were
        # stamped, even when many were stamped within one clock tick.
        enqueued = max(self.engine_now(), self._last_enqueued + Fraction(1, 1000))
        self._last_enqueued = enqueued
        self.order.stamp(rqi_id)
        stamp = functools.partial(
            stamp_annotation,
            where,
            leaf,
            priority_of(run_spec),
            enqueued,
            scheduler=is_scheduler_item(run_spec),
        )
        return Admission(suspended=True, pod_set_annotations=stamp)

    def created(self, record: RunRecord) -> None:
        """The workload exists and the item is acked: the engine learns the run, in the
        order the runs were stamped (creates and acks of one pop finish in any order)."""
        due = self.order.created(record)
        if due is None:
            self._submit(record)
        else:
            self._submit_due(due)

    def _submit_due(self, due: list[RunRecord]) -> None:
        for record in due:
            self._submit(record)
            self.holds.release(record.rqi_id)

    def _submit(self, record: RunRecord) -> None:
        if self.runs.get(record.rqi_id) is record:
            self.learn(record)
        else:  # another agent won the item: the run is its to charge
            self.forget(record.rqi_id)

    # --- the tracker's hook ------------------------------------------------------------------

    def observe(self, record: RunRecord) -> None:
        """A run's state changed (or was assessed again): keep the engine in step."""
        if not self.started:
            return  # `rebuild` reads every adopted run once the informers have listed
        run = self.engine.runs.get(record.rqi_id)
        state = record.state
        if run is None:
            if self.order.stamped(record.rqi_id):
                return  # its dispatch submits it, in stamp order
            if state is not None and not state.terminal and not record.finishing:
                self.learn(record)
            return
        if state is not None and state.terminal:
            self.forget(record.rqi_id)
        elif state is RunState.RUNNING and run.state is QState.ADMITTED:
            self.engine.mark_ready(run.id)
        elif state is RunState.QUEUED and run.state is QState.EVICTING and not record.live_pods:
            # Suspended, and its pods are gone: only now are their resources free (a pod
            # deleted gracefully keeps them through its grace period).
            self.engine.terminated(run.id)
            self.check_failed(run.id)
        else:
            return
        self.on_change()

    def check_failed(self, rqi_id: str) -> None:
        """A run the engine gave up on (R11: readiness timeouts past `backoffLimit`) ends as
        FAILED once its eviction completes; the driver fails the item."""
        run = self.engine.runs.get(rqi_id)
        if run is not None and run.state is QState.FAILED:
            self.failures.append((rqi_id, f"the quota tree gave up on the run: {run.reason}"))

    def forget(self, rqi_id: str) -> None:
        run = self.engine.runs.get(rqi_id)
        if run is None:
            return
        if run.state not in (QState.FINISHED, QState.FAILED):
            self.engine.finish(rqi_id)
        self.engine.forget(rqi_id)
        self.explain_due.discard(rqi_id)
        self.on_change()
        self.on_room()

    # --- learning runs from the cluster ------------------------------------------------------

    def engine_now(self) -> Fraction:
        """The engine's time now (`engine_time`: wall-clock seconds, never behind the engine);
        not a monotonic clock like the agent's `clock`."""
        return max(self.engine.now, engine_time(self.now()))

    def read(self, record: RunRecord) -> tuple[QuotaStamp, Fraction | None] | str:
        """The run's stamp and admission time (None: suspended), or why it has none."""
        obj = record.last or {}
        annotations = Meta(obj).annotations
        try:
            stamp = QuotaStamp.load(annotations.get(STAMP))
        except ValueError as exc:
            return f"{record.workload}: {exc}"
        spec = self.specs.for_queue(record.queue)
        try:
            held = is_suspended(obj, spec.custom_kind if spec else None)
        except InvalidInput:
            held = False
        if held:
            return stamp, None
        try:
            admitted = load_time(annotations.get(ADMITTED), f"annotation {ADMITTED}")
        except ValueError:
            admitted = stamp.enqueued  # unsuspended by hand: charged from its enqueue time
        return stamp, admitted

    def outside(self, record: RunRecord) -> bool:
        """A run of a MultiKueue queue spec: Kueue admits it, the tree never charges it."""
        spec = self.specs.for_queue(record.queue)
        return spec is not None and spec.multi_kueue

    def learn(self, record: RunRecord) -> None:
        """Submit (suspended) or adopt (running) one run the engine does not know yet."""
        if record.rqi_id in self.engine.runs or record.rqi_id in self.unstamped:
            return
        if self.outside(record):
            return
        found = self.read(record)
        if isinstance(found, str):
            self._unstamped(record.rqi_id, found)
            return
        stamp, admitted = found
        self._enter(record, stamp, admitted)
        self.on_change()

    def _unstamped(self, rqi_id: str, why: str) -> None:
        # Created before quota.mode was agent (or stamped by hand): it runs, uncharged.
        # Logged once; the set is bounded like the run table it shadows.
        if len(self.unstamped) >= 10_000:
            self.unstamped.clear()
        self.unstamped.add(rqi_id)
        log.warning("%s; not charged to the quota tree", why)

    def _enter(self, record: RunRecord, stamp: QuotaStamp, admitted: Fraction | None) -> None:
        spec = stamp.spec(record.rqi_id)
        try:
            if admitted is None:
                run = self.engine.submit(spec)
            else:
                run = self.engine.adopt(spec, admitted, ready=record.state is RunState.RUNNING)
        except EngineError as exc:
            self.failures.append((record.rqi_id, f"the quota tree refused the run: {exc}"))
            return
        if run.state is QState.INADMISSIBLE:
            self.failures.append(
                (record.rqi_id, f"the run can never start under the quota tree: {run.reason}")
            )
        elif run.state is QState.PENDING:
            self.explain_due.add(run.id)

    async def rebuild(self) -> None:
        """Rebuild the engine from the adopted runs (rebuild.py): same usage and order as
        before the restart."""
        mine = [r for r in self.runs if not self.outside(r)]
        adopted = await sort_adopted(mine, self.read, self._unstamped)
        if adopted.waiting:
            self._last_enqueued = adopted.waiting[-1][0]
        self.engine = AdmissionEngine(self.tree, adopted.start(engine_time(self.now())))
        self.backlog += await replay(self.engine, adopted, self._enter, self.engine_now)
        self.started = True
        log.info(
            "quota: rebuilt the tree from the cluster: %d running, %d pending",
            len(adopted.running),
            len(adopted.waiting),
        )
