"""The admission engine: events in, decisions out, one admission per iteration (R6).

The driver (the simulator today, the agent's admission stage later) tells the engine what
happened — `submit`, `finish`, `mark_ready`, `terminated`, `advance(now)` — and then calls
`cycle()`, which runs R6 to a fixpoint and returns the decisions to carry out in order (`admit`:
unsuspend; `evict`: suspend or delete, then report `terminated`; `fail`). The engine never reads
a clock: time is the value the driver passes to `advance`.

Each iteration: every leaf offers its first feasible pending run (BestEffortFIFO; only the
head in Strict mode, R9), a bottom-up tournament picks the smallest key
`(outside-min flag, b(c) with req added, -p, tq, id)` at every internal node, and the root's
winner is admitted, preempting (R7/R8) if it does not fit.

The incremental choice of candidates lives in `candidates.CandidateIndex`, the base class.
"""

from __future__ import annotations

from fractions import Fraction

from launch_agent.model.quantity import format_nanos
from launch_agent.quota.candidates import CandidateIndex
from launch_agent.quota.preemption import plan_preemption
from launch_agent.quota.runs import RUNNING_STATES, Decision, Run, RunSpec, RunState, Stamp
from launch_agent.quota.tree import QuotaTree


class EngineError(ValueError):
    """An event the engine cannot apply (unknown run, wrong state); the message says why."""


class AdmissionEngine(CandidateIndex):
    """The elastic quota tree with its runs. Pure and deterministic; not thread-safe."""

    def __init__(
        self, tree: QuotaTree, now: Fraction | int = 0, *, exhaustive: bool = False
    ) -> None:
        """`exhaustive=True` re-examines every leaf and plans every preemption in full at each
        iteration: the slow reference the tests compare the incremental bookkeeping with."""
        super().__init__(tree, now, exhaustive=exhaustive)
        self._seq = 0
        self._leaf_of_queue = {
            q: self.ledger.index[n.name] for q, n in tree.leaf_of_queue().items()
        }
        self.decisions_made = 0

    # --- events -----------------------------------------------------------------------------

    def submit(self, spec: RunSpec) -> Run:
        """A new run enters its queue's leaf (or is INADMISSIBLE at once, R2)."""
        if spec.id in self.runs:
            raise EngineError(f"run {spec.id!r} was already submitted")
        leaf = self._leaf_of_queue.get(spec.queue)
        if leaf is None:
            known = ", ".join(sorted(self._leaf_of_queue)) or "none"
            raise EngineError(f"queue {spec.queue!r} is not mapped to a leaf (queues: {known})")
        run = Run(spec, leaf, self._request(spec), self._stamp())
        self.runs[spec.id] = run
        self._by_seq[run.enqueued[1]] = run
        too_big = self._too_big(run)
        if too_big:
            run.state, run.reason = RunState.INADMISSIBLE, too_big
        else:
            self._enqueue(run)
        return run

    def adopt(self, spec: RunSpec, admitted_at: Fraction | int, ready: bool) -> Run:
        """A run found running after a restart: charge it as admitted, whatever the tree says
        now (the cluster is the durable record; a tree that shrank only blocks new work)."""
        run = self.submit(spec)
        if run.state is RunState.PENDING:
            self._remove_pending(run)
        run.admitted = (Fraction(admitted_at), self._next_seq())
        self._charge_admitted(run, ready)
        return run

    def finish(self, run_id: str) -> None:
        """The run completed (or was cancelled): its quota is released at once."""
        run = self._get(run_id)
        if run.state in (RunState.FINISHED, RunState.FAILED):
            raise EngineError(f"run {run_id!r} already ended ({run.state.value})")
        if run.state is RunState.PENDING:
            self._release_reservation(run)
            self._remove_pending(run)
        elif run.state in RUNNING_STATES or run.state is RunState.EVICTING:
            self._uncharge(run)
        run.state = RunState.FINISHED

    def forget(self, run_id: str) -> None:
        """Drop a finished or failed run from memory (the agent calls this once it has
        reported the outcome; the simulator keeps runs to reject duplicate ids)."""
        run = self._get(run_id)
        if run.state not in (RunState.FINISHED, RunState.FAILED):
            raise EngineError(f"run {run_id!r} is {run.state.value}; only ended runs are forgotten")
        del self.runs[run_id]
        self._by_seq.pop(run.enqueued[1], None)

    def mark_ready(self, run_id: str) -> None:
        run = self._get(run_id)
        if run.state is not RunState.ADMITTED:
            raise EngineError(f"run {run_id!r} is {run.state.value}, not admitted and unready")
        self._set_ready(run)

    def terminated(self, run_id: str) -> None:
        """An evicted run's pods are gone: its quota is released (R10)."""
        run = self._get(run_id)
        if run.state is not RunState.EVICTING:
            raise EngineError(f"run {run_id!r} is {run.state.value}, not evicting")
        self._complete_eviction(run)

    def advance(self, now: Fraction | int) -> list[Decision]:
        """Move the clock to `now`, firing every timer on the way in time order (readiness
        timeouts R11, backoff ends, preemption timeouts R10, Strict switches R9) with a full
        admission cycle after each."""
        decisions: list[Decision] = []
        while True:
            fired, done = self.advance_once(now)
            decisions += fired
            decisions += self.cycle()
            if done:
                return decisions

    def advance_once(self, now: Fraction | int) -> tuple[list[Decision], bool]:
        """One stop of `advance` without its admission cycle: move the clock to the next
        timer due by `now` (or to `now`) and fire what is due there. Returns the decisions
        the timers made and whether the clock reached `now`.

        A caller that must not run a whole cycle at once (the agent's event loop) calls this,
        then `step()` until the fixpoint, and again until it returns True: the same decisions
        as `advance(now)`."""
        target = Fraction(now)
        if target < self.now:
            raise EngineError(f"time cannot go backwards ({self.now} -> {target})")
        due = self._next_deadline()
        if due is not None and due <= target:
            return self._fire(due), False
        return self._fire(target), True

    # --- the cycle ----------------------------------------------------------------------------

    def cycle(self) -> list[Decision]:
        """R6 to a fixpoint; the decisions in the order they were made."""
        decisions: list[Decision] = []
        # Every iteration admits or reserves one run and victims only return as pending, so a
        # correct engine converges; the bound turns a bug into an error instead of a hang.
        budget = 4 * len(self.runs) + 16
        while True:
            made = self.step()
            if not made:
                return decisions
            decisions += made
            budget -= 1
            if budget < 0:
                raise RuntimeError("admission cycle did not converge")  # pragma: no cover

    def step(self) -> list[Decision]:
        """One iteration of R6: at most one admission (or one preemption). [] at the fixpoint."""
        for run in self._reserved:
            self.ledger.reserve(self.ledger.paths[run.leaf], run.request, -1)
            fits = self.ledger.fits(self.ledger.paths[run.leaf], run.request)
            self.ledger.reserve(self.ledger.paths[run.leaf], run.request, +1)
            if fits:
                self._release_reservation(run)
                return [self._admit(run, "admitted into the quota its preemption freed")]
        if self.exhaustive:
            self._dirty_leaves.update(self.ledger.leaves)
        self._settle()
        root = 0
        winner = self._best[root]
        if winner is None:
            return []
        path = self.ledger.paths[winner.leaf]
        if self.ledger.fits(path, winner.request):
            return [self._admit(winner, "fits")]
        leaf_node = self.ledger.nodes[winner.leaf]
        victims = plan_preemption(
            self.ledger,
            self._admitted,
            winner,
            self.tree.reclaim_policy,
            leaf_node.within_queue,
            latest=None if self.exhaustive else self._latest,
        )
        if victims is None:  # pragma: no cover - candidates are re-planned on every change
            raise RuntimeError(f"candidate {winner.id!r} lost its preemption plan")
        decisions = [
            self._evict(
                v,
                f"reclaimed by {winner.id}"
                if v.leaf != winner.leaf
                else f"preempted by {winner.id} (higher priority, same queue)",
                winner.id,
            )
            for v in victims
        ]
        if self.ledger.fits(path, winner.request):
            decisions.append(self._admit(winner, "admitted after preemption"))
        else:
            before = self._fast_reclaim()
            winner.reserved_at = self.now
            self._reserved.append(winner)
            self._flags_changed(before)
            self.ledger.reserve(path, winner.request, +1)
            self._on_increase(path, winner.request)
            self._dirty_leaves.add(winner.leaf)
            decisions.append(Decision("reserve", winner.id, "waiting for its victims to end"))
        return decisions

    # --- views --------------------------------------------------------------------------------

    def in_state(self, *states: RunState) -> list[Run]:
        return [run for run in self.runs.values() if run.state in states]

    def usage(self, node: str) -> dict[str, int]:
        """Charged quota of a node (nanounits), including evicted runs still terminating."""
        return dict(self.ledger.used[self.ledger.index[node]])

    def explain(self, run_id: str) -> str:
        """Why a run is not running, in words for a W&B warning."""
        run = self._get(run_id)
        if run.state is not RunState.PENDING:
            return run.reason or run.state.value
        if run.reserved_at is not None:
            return "waiting for preempted runs to terminate"
        if run.not_before is not None and run.not_before > self.now:
            return f"backing off after PodsReadyTimeout until t={run.not_before}s"
        blocked = self.ledger.blocking(self.ledger.paths[run.leaf], run.request)
        if blocked is None:
            return "waiting for its turn in the admission cycle"
        node, resource = blocked
        used = self.ledger.effective(node, resource)
        return (
            f"waiting for quota: {self.ledger.nodes[node].name} uses"
            f" {format_nanos(used)}/{format_nanos(self.ledger.maxs[node][resource])} {resource}"
        )

    # --- internals: requests and state changes -------------------------------------------------

    def _request(self, spec: RunSpec) -> dict[str, int]:
        managed = self.tree.resources
        request: dict[str, int] = {}
        for pod_set in spec.pod_sets:
            for resource, amount in pod_set.requests.items():
                if resource in managed and amount:
                    request[resource] = request.get(resource, 0) + pod_set.count * amount
        count = "sweep_schedulers" if spec.scheduler else "runs"
        if count in managed:
            request[count] = 10**9  # one run, in nanounits like every other quantity
        return request

    def _too_big(self, run: Run) -> str:
        for node in self.ledger.paths[run.leaf]:
            for resource, amount in run.request.items():
                ceiling = self.ledger.maxs[node].get(resource)
                if ceiling is not None and amount > ceiling:
                    return (
                        f"requests {format_nanos(amount)} {resource}, more than the max"
                        f" {format_nanos(ceiling)} of {self.ledger.nodes[node].name}"
                    )
        return ""

    def _next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def _stamp(self) -> Stamp:
        return (self.now, self._next_seq())

    def _get(self, run_id: str) -> Run:
        run = self.runs.get(run_id)
        if run is None:
            raise EngineError(f"no run named {run_id!r} was submitted")
        return run

    def _enqueue(self, run: Run) -> None:
        run.state = RunState.PENDING
        run.block_token += 1
        pending = self._pending[run.leaf]
        low, high = 0, len(pending)
        while low < high:  # bisect on the order key; evicted runs keep their original place
            mid = (low + high) // 2
            if pending[mid].rank < run.rank:
                low = mid + 1
            else:
                high = mid
        pending.insert(low, run)
        self._note_request(run.leaf, run.request)
        self._dirty_leaves.add(run.leaf)

    def _remove_pending(self, run: Run) -> None:
        self._pending[run.leaf].remove(run)
        self._note_removed(run.leaf)
        self._dirty_leaves.add(run.leaf)

    def _admit(self, run: Run, reason: str) -> Decision:
        self._remove_pending(run)
        run.admitted = self._stamp()
        run.reason = ""
        self._charge_admitted(run, run.spec.ready_on_admission)
        self.decisions_made += 1
        return Decision("admit", run.id, reason)

    def _charge_admitted(self, run: Run, ready: bool) -> None:
        run.state = RunState.ADMITTED
        self._admitted[run.leaf][run.id] = run
        self._note_admitted(run)
        path = self.ledger.paths[run.leaf]
        self.ledger.charge(path, run.request, +1)
        self._on_increase(path, run.request)
        if run.pods > 1:
            self._gang_unready(+1)
        if ready:
            self._set_ready(run)

    def _set_ready(self, run: Run) -> None:
        run.state = RunState.READY
        if run.pods > 1:
            self._gang_unready(-1)

    def _gang_unready(self, delta: int) -> None:
        before = self._unready_gangs
        self._unready_gangs += delta
        if self.tree.block_admission_until_ready and (before == 0) != (self._unready_gangs == 0):
            self._dirty_leaves.update(self.ledger.leaves)

    def _evict(self, run: Run, reason: str, by: str = "") -> Decision:
        if run.state is RunState.ADMITTED and run.pods > 1:
            self._gang_unready(-1)
        run.state = RunState.EVICTING
        run.evicted_for = reason
        self.decisions_made += 1
        if self.tree.instant_termination:
            self._complete_eviction(run)
        else:
            before = self._fast_reclaim()
            self._evicting += 1
            self._flags_changed(before)
        return Decision("evict", run.id, reason, by)

    def _complete_eviction(self, run: Run) -> None:
        self._uncharge(run)
        run.admitted = None
        if run.fail_after_termination:
            run.state, run.reason = RunState.FAILED, run.evicted_for
            return
        run.reason = run.evicted_for
        self._enqueue(run)  # back to PENDING with its original enqueue time (R10)

    def _uncharge(self, run: Run) -> None:
        if run.state is RunState.ADMITTED and run.pods > 1:
            self._gang_unready(-1)
        if run.state is RunState.EVICTING and not self.tree.instant_termination:
            before = self._fast_reclaim()
            self._evicting -= 1
            self._flags_changed(before)
        if self._admitted[run.leaf].pop(run.id, None) is not None:
            self._note_released(run.leaf)
        path = self.ledger.paths[run.leaf]
        self.ledger.charge(path, run.request, -1)
        self._on_decrease(path, run.request)

    def _release_reservation(self, run: Run) -> None:
        if run.reserved_at is None:
            return
        before = self._fast_reclaim()
        run.reserved_at = None
        self._reserved.remove(run)
        self._flags_changed(before)
        path = self.ledger.paths[run.leaf]
        self.ledger.reserve(path, run.request, -1)
        self._on_decrease(path, run.request)
        self._dirty_leaves.add(run.leaf)

    # --- internals: time ------------------------------------------------------------------------

    def _next_deadline(self) -> Fraction | None:
        tree = self.tree
        due: list[Fraction] = []
        for run in self.runs.values():
            if run.state is RunState.ADMITTED and tree.ready_timeout is not None and run.admitted:
                due.append(run.admitted[0] + tree.ready_timeout)
            elif run.state is RunState.PENDING:
                if run.reserved_at is not None and tree.preemption_timeout is not None:
                    due.append(run.reserved_at + tree.preemption_timeout)
                if run.not_before is not None:
                    due.append(run.not_before)
        # Strict (R9) only looks at each leaf's first eligible run; a head that changes later
        # does so at another deadline or event, after which this is computed again.
        for leaf in self.ledger.leaves:
            strict_after = self.ledger.nodes[leaf].strict_after
            if strict_after is None:
                continue
            for run in self._pending[leaf]:
                if run.reserved_at is None and (
                    run.not_before is None or run.not_before <= self.now
                ):
                    due.append(run.enqueued[0] + strict_after)
                    break
        later = [t for t in due if t > self.now]
        return min(later) if later else None

    def _fire(self, now: Fraction) -> list[Decision]:
        self.now = now
        decisions: list[Decision] = []
        tree = self.tree
        if tree.ready_timeout is not None:
            late = [
                run
                for run in self.runs.values()
                if run.state is RunState.ADMITTED
                and run.admitted is not None
                and run.admitted[0] + tree.ready_timeout <= now
            ]
            for run in sorted(late, key=lambda r: r.admitted or (now, 0)):
                decisions.append(self._ready_timeout(run))
        if tree.preemption_timeout is not None:
            for run in list(self._reserved):
                if run.reserved_at is not None and run.reserved_at + tree.preemption_timeout <= now:
                    self._release_reservation(run)
        # Backoff ends and Strict switches depend on the clock: look at every leaf again.
        self._dirty_leaves.update(self.ledger.leaves)
        return decisions

    def _ready_timeout(self, run: Run) -> Decision:
        """R11: evict, then back off base·2^(k-1) (capped), or fail after the limit."""
        tree = self.tree
        run.attempts += 1
        if run.attempts > tree.backoff_limit:
            run.fail_after_termination = True
            reason = f"PodsReadyTimeout: not ready after {run.attempts} attempts, giving up"
        else:
            delay = min(tree.backoff_base * 2 ** (run.attempts - 1), tree.backoff_max)
            run.not_before = self.now + delay
            reason = f"PodsReadyTimeout: retry {run.attempts} after {delay}s backoff"
        return self._evict(run, reason)
