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

Scaling. A naive iteration re-examines every leaf because every admission changes the root's
usage. Instead each leaf caches its candidate, each node caches its winner and the largest
request among the *fitting* candidates below it (`fitmax`). After an admission, a leaf is
re-examined only when (a) its own pending list changed, (b) some node on its path now has less
headroom than its candidate needs (found by descending only where `fitmax` exceeds the
headroom), (c) its candidate relies on preemption or it rejected a run after trying
preemption ("sensitive": victim availability can change anywhere), or (d) usage went *down*
and the leaf had skipped runs that might now fit. Winners are then recomputed only on the
paths of re-examined leaves. Fitting is monotone in usage, so candidates not touched by (a)–(d)
are still exactly what a full recomputation would give.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping
from fractions import Fraction

from launch_agent.model.quantity import format_nanos
from launch_agent.quota.ledger import Ledger
from launch_agent.quota.preemption import plan_preemption
from launch_agent.quota.runs import RUNNING_STATES, Decision, Run, RunSpec, RunState, Stamp
from launch_agent.quota.tree import COUNT_RESOURCES, QuotaTree

Key = tuple[int, int, int, Stamp, str]
# How a leaf's candidate is feasible: it fits, R7 is certain to succeed, or a plan was found.
_NONE, _FITS, _GUARANTEED, _LOCAL, _PLANNED = 0, 1, 2, 3, 4


class EngineError(ValueError):
    """An event the engine cannot apply (unknown run, wrong state); the message says why."""


class AdmissionEngine:
    """The elastic quota tree with its runs. Pure and deterministic; not thread-safe."""

    def __init__(
        self, tree: QuotaTree, now: Fraction | int = 0, *, exhaustive: bool = False
    ) -> None:
        """`exhaustive=True` re-examines every leaf and plans every preemption in full at each
        iteration: the slow reference the tests compare the incremental bookkeeping with."""
        self.tree = tree
        self.exhaustive = exhaustive
        self.ledger = Ledger(tree)
        self.now = Fraction(now)
        self._seq = 0
        self._leaf_of_queue = {
            q: self.ledger.index[n.name] for q, n in tree.leaf_of_queue().items()
        }
        self.runs: dict[str, Run] = {}
        count = len(self.ledger.nodes)
        self._pending: list[list[Run]] = [[] for _ in range(count)]
        self._admitted: list[dict[str, Run]] = [{} for _ in range(count)]
        self._cand: list[Run | None] = [None] * count
        self._cand_kind = [_NONE] * count
        self._best: list[Run | None] = [None] * count
        self._offer: list[Key | None] = [None] * count
        # Largest request among candidates that fit (R3) / are guaranteed (R7 shortcut) below
        # each node: the bounds that let an admission skip the leaves it cannot affect.
        self._fitmax: list[dict[str, int]] = [{} for _ in range(count)]
        self._guarmax: list[dict[str, int]] = [{} for _ in range(count)]
        self._dirty_leaves: set[int] = set()
        self._dirty_nodes: set[int] = set()
        # Leaves whose candidate relies on a preemption plan (re-examined after any change),
        # and leaves whose candidate is guaranteed below the root (re-checked after any change).
        self._sensitive: set[int] = set()
        self._local: set[int] = set()
        # Skipped runs, by the (node, resource) that blocks them: heaps of
        # (-usage threshold, token, seq, run); an entry is stale once its run is scanned again.
        # Entries hold only ints (the run by its enqueue sequence number): the garbage collector
        # stops tracking such tuples, which matters with hundreds of thousands of them.
        self._blocked_at: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
        self._by_seq: dict[int, Run] = {}
        self._wake_from: dict[int, tuple[int, Fraction, int, str]] = {}
        self._decreased: set[tuple[int, str]] = set()
        self._invalidated: set[int] = set()
        self._was_strict = [False] * count
        self._evicting = 0
        self._reserved: list[Run] = []
        self._unready_gangs = 0
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
        target = Fraction(now)
        if target < self.now:
            raise EngineError(f"time cannot go backwards ({self.now} -> {target})")
        decisions: list[Decision] = []
        while True:
            due = self._next_deadline()
            if due is None or due > target:
                break
            decisions += self._tick(due)
        decisions += self._tick(target)
        return decisions

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
            self.ledger, self._admitted, winner, self.tree.reclaim_policy, leaf_node.within_queue
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
            if pending[mid].order < run.order:
                low = mid + 1
            else:
                high = mid
        pending.insert(low, run)
        self._dirty_leaves.add(run.leaf)

    def _remove_pending(self, run: Run) -> None:
        self._pending[run.leaf].remove(run)
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
        self._admitted[run.leaf].pop(run.id, None)
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

    def _tick(self, now: Fraction) -> list[Decision]:
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
        return decisions + self.cycle()

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

    # --- internals: candidates and the tournament --------------------------------------------

    def _fast_reclaim(self) -> bool:
        """Whether the guaranteed-reclaim shortcut applies (see `_guaranteed`)."""
        return (
            self.tree.reclaim_policy == "Any"
            and not self._evicting
            and not self._reserved
            and not self.exhaustive
        )

    def _flags_changed(self, before: bool) -> None:
        if before != self._fast_reclaim():
            self._dirty_leaves.update(self.ledger.leaves)

    def _guaranteed(self, run: Run, path: tuple[int, ...]) -> int:
        """Whether R7 is certain to find victims for `run`, without planning them.

        Preconditions: policy Any, no quota held by terminating runs or reservations, every
        count of the run fits on its whole path, and G(x, parent(leaf)) holds, so A*(x) = a
        exists. Let p be the child of a on x's path. Since Σ min(children of a) ≤ min(a) and
        u(p) + req ≤ min(p), the children of a off x's path exceed their min, in total, by at
        least E = u(a) + req - min(a). The run lacks, at a node m at or above a, at most
        D = u(m) + req - max(m). If D ≤ E for every requested resource and such m, then while
        x does not fit some child off the path borrows that resource; a borrowing node has a
        borrowing child, down to a borrowing leaf whose running runs request the resource,
        and each eviction lowers D and the bound on E alike: R7 cannot run out of victims.

        Returns _GUARANTEED when a is the root (then D ≤ E always holds, and the answer only
        changes with usage on the run's own path: `guarmax` tracks it), _LOCAL when a is lower
        (the answer also depends on usage beside a: re-checked after every change), or _NONE.
        """
        ledger = self.ledger
        request = run.request
        for node in path:
            maxima = ledger.maxs[node]
            for resource in COUNT_RESOURCES.intersection(request):
                ceiling = maxima.get(resource)
                if (
                    ceiling is not None
                    and ledger.effective(node, resource) + request[resource] > ceiling
                ):
                    return _NONE
        top = ledger.guarantee_top(path, request)
        if top is None:
            return _NONE
        if top == len(path) - 1:
            return _GUARANTEED
        anchor = path[top]
        for node in path[top + 1 :]:
            for resource, amount in request.items():
                if resource in COUNT_RESOURCES or amount <= 0:
                    continue
                ceiling = ledger.maxs[node].get(resource)
                if ceiling is None:
                    continue
                excess = ledger.effective(anchor, resource) - ledger.mins[anchor].get(resource, 0)
                if ledger.effective(node, resource) - ceiling > excess:
                    return _NONE
        return _LOCAL

    def _on_increase(self, path: tuple[int, ...], request: Mapping[str, int]) -> None:
        """Usage grew on `path`: re-examine the leaves whose candidate may have lost its
        footing — found by descending only where the largest candidate request (`fitmax`,
        `guarmax`) exceeds the node's remaining headroom."""
        ledger = self.ledger
        self._dirty_nodes.update(path)
        root = path[-1]
        for node in path:
            fitmax = self._fitmax[node]
            guarmax = self._guarmax[node]
            if not fitmax and not guarmax:
                continue
            maxima = ledger.maxs[node]
            minima = ledger.mins[node]
            for resource in request:
                used = ledger.effective(node, resource)
                ceiling = maxima.get(resource)
                if ceiling is not None and fitmax.get(resource, 0) > ceiling - used:
                    self._invalidate_below(node, resource, ceiling - used, self._fitmax)
                if not guarmax:
                    continue
                if resource in COUNT_RESOURCES:
                    limit = ceiling
                elif node != root:
                    limit = minima.get(resource, 0)
                else:
                    continue
                if limit is not None and guarmax.get(resource, 0) > limit - used:
                    self._invalidate_below(node, resource, limit - used, self._guarmax)
        self._dirty_leaves |= self._sensitive

    def _invalidate_below(
        self, node: int, resource: str, headroom: int, table: list[dict[str, int]]
    ) -> None:
        stack = [node]
        while stack:
            current = stack.pop()
            children = self.ledger.children[current]
            if not children:
                self._invalidated.add(current)
                continue
            stack.extend(c for c in children if table[c].get(resource, 0) > headroom)

    def _on_decrease(self, path: tuple[int, ...], request: Mapping[str, int]) -> None:
        """Usage fell on `path`. Which skipped runs may now pass is decided in `_settle`,
        against the usage at that point (an admission usually follows its victims' release)."""
        self._dirty_nodes.update(path)
        self._decreased.update((node, resource) for node in path for resource in request)
        self._dirty_leaves |= self._sensitive

    def _wake_blocked(self) -> None:
        """Find the skipped runs whose recorded obstacle is gone — blocked at (node, resource)
        while usage there exceeded their threshold — and note, per leaf, the earliest of them:
        the leaf's scan restarts there."""
        ledger = self.ledger
        wake = self._wake_from
        for node, resource in self._decreased:
            heap = self._blocked_at.get((node, resource))
            if not heap:
                continue
            used = ledger.effective(node, resource)
            while heap and -heap[0][0] >= used:
                _, token, seq = heapq.heappop(heap)
                run = self._by_seq.get(seq)
                if run is None or token != run.block_token or run.state is not RunState.PENDING:
                    continue
                # Runs after the leaf's candidate were not scanned since it became the
                # candidate: their entries may be old, and they cannot matter.
                candidate = self._cand[run.leaf]
                if candidate is not None and candidate.order < run.order:
                    continue
                known = wake.get(run.leaf)
                if known is None or run.order < known:
                    wake[run.leaf] = run.order
        self._decreased.clear()

    def _settle(self) -> None:
        if self._decreased:
            self._wake_blocked()
        if self._local and (self._dirty_nodes or self._dirty_leaves):
            for leaf in self._local - self._dirty_leaves:
                run = self._cand[leaf]
                if run is None or self._guaranteed(run, self.ledger.paths[leaf]) != _LOCAL:
                    self._dirty_leaves.add(leaf)
        if not (self._dirty_leaves or self._dirty_nodes or self._invalidated or self._wake_from):
            return
        for leaf in self._dirty_leaves:
            self._examine_leaf(leaf, None)
        # Partial scans. Runs skipped before the restart point are still infeasible: their
        # obstacle did not clear (or they would have woken the leaf), and usage only grew for
        # them otherwise (fit and the guarantee are monotone in usage). Leaves whose candidate
        # may merely have stopped fitting restart at that candidate.
        for leaf, order in self._wake_from.items():
            if leaf not in self._dirty_leaves:
                self._examine_leaf(leaf, order)
        for leaf in self._invalidated:
            run = self._cand[leaf]
            if leaf not in self._dirty_leaves and leaf not in self._wake_from:
                self._examine_leaf(leaf, run.order if run is not None else None)
        changed = self._dirty_leaves | self._invalidated | self._wake_from.keys()
        todo: set[int] = set()
        for node in changed | self._dirty_nodes:
            for ancestor in self.ledger.paths[node]:
                if ancestor in todo:
                    break
                todo.add(ancestor)
        self._dirty_leaves.clear()
        self._invalidated.clear()
        self._wake_from.clear()
        self._dirty_nodes.clear()
        depth = self.ledger.depth
        for node in sorted(todo, key=lambda n: -depth[n]):
            self._recompute(node)

    def _block(self, run: Run, where: tuple[int, str], threshold: int) -> None:
        """Record that `run` is skipped until usage at `where` falls to `threshold`."""
        heap = self._blocked_at.setdefault(where, [])
        heapq.heappush(heap, (-threshold, run.block_token, run.enqueued[1]))
        if len(heap) > 2 * len(self.runs) + 64:
            # Entries of runs scanned again since, or no longer pending, are stale.
            heap[:] = [e for e in heap if self._entry_valid(e)]
            heapq.heapify(heap)

    def _entry_valid(self, entry: tuple[int, int, int]) -> bool:
        run = self._by_seq.get(entry[2])
        return run is not None and entry[1] == run.block_token and run.state is RunState.PENDING

    def _examine_leaf(self, leaf: int, start: tuple[int, Fraction, int, str] | None) -> None:
        """R6.1: the first feasible pending run in order, or only the head in Strict mode;
        from the run at order `start` on (a partial scan) or from the head (`None`)."""
        if self._was_strict[leaf] or self.exhaustive:
            start = None
        self._cand[leaf] = None
        self._cand_kind[leaf] = _NONE
        self._sensitive.discard(leaf)
        self._local.discard(leaf)
        self._was_strict[leaf] = False
        self._scan_leaf(leaf, start)

    def _scan_leaf(self, leaf: int, start: tuple[int, Fraction, int, str] | None) -> None:
        ledger = self.ledger
        node = ledger.nodes[leaf]
        path = ledger.paths[leaf]
        head = True
        gangs_blocked = self.tree.block_admission_until_ready and self._unready_gangs > 0
        fast = self._fast_reclaim()
        maxs = ledger.maxs
        reclaim_possible = len(path) > 1  # a lone root has no other queue to reclaim from
        seen: list[tuple[int, str]] = []
        pending = self._pending[leaf]
        if start is not None:
            head = False  # the leaf was not Strict and the clock has not moved since
            pending = pending[bisect.bisect_left(pending, start, key=lambda r: r.order) :]
        for run in pending:
            if run.reserved_at is not None or (
                run.not_before is not None and run.not_before > self.now
            ):
                continue
            strict = head and (
                node.strict_after is not None and self.now - run.enqueued[0] >= node.strict_after
            )
            head = False
            if strict:
                self._was_strict[leaf] = True
            run.block_token += 1  # entries from earlier scans of this run are now stale
            if not (gangs_blocked and run.pods > 1):
                request = run.request
                blocked = None
                # Runs of one leaf are usually stopped by the same (node, resource): try the
                # obstacles found so far before walking the whole path.
                for where, resource in seen:
                    amount = request.get(resource, 0)
                    if (
                        amount
                        and ledger.effective(where, resource) + amount > maxs[where][resource]
                    ):
                        blocked = (where, resource)
                        break
                else:
                    blocked = ledger.blocking(path, request)
                if blocked is None:
                    self._cand[leaf], self._cand_kind[leaf] = run, _FITS
                    return
                if blocked not in seen:
                    seen.append(blocked)
                in_min = reclaim_possible and ledger.within_min(leaf, request)
                if in_min and fast:
                    kind = self._guaranteed(run, path)
                    if kind != _NONE:
                        self._cand[leaf], self._cand_kind[leaf] = run, kind
                        if kind == _LOCAL:
                            self._local.add(leaf)
                        return
                if in_min or node.within_queue == "LowerPriority":
                    self._sensitive.add(leaf)
                    plan = plan_preemption(
                        ledger, self._admitted, run, self.tree.reclaim_policy, node.within_queue
                    )
                    if plan is not None:
                        self._cand[leaf], self._cand_kind[leaf] = run, _PLANNED
                        return
                # The run waits until usage at the blocking node falls to max - request there,
                # or (to try preemption) until its leaf is back within min (R4).
                where, resource = blocked
                self._block(run, blocked, maxs[where][resource] - request[resource])
                if reclaim_possible and not in_min:
                    for resource, amount in request.items():
                        if resource in COUNT_RESOURCES or amount <= 0:
                            continue
                        floor = ledger.mins[leaf].get(resource, 0)
                        if ledger.effective(leaf, resource) + amount > floor:
                            self._block(run, (leaf, resource), floor - amount)
                            break
            if strict:
                return

    def _recompute(self, node: int) -> None:
        ledger = self.ledger
        children = ledger.children[node]
        if not children:
            run = self._cand[node]
            kind = self._cand_kind[node]
            self._best[node] = run
            self._fitmax[node] = dict(run.request) if run and kind == _FITS else {}
            self._guarmax[node] = dict(run.request) if run and kind == _GUARANTEED else {}
        else:
            best_key: Key | None = None
            best_run = None
            fitmax: dict[str, int] = {}
            guarmax: dict[str, int] = {}
            for child in children:
                key = self._offer[child]
                if key is not None and (best_key is None or key < best_key):
                    best_key, best_run = key, self._best[child]
                for table, merged in ((self._fitmax, fitmax), (self._guarmax, guarmax)):
                    for resource, amount in table[child].items():
                        if amount > merged.get(resource, 0):
                            merged[resource] = amount
            self._best[node] = best_run
            self._fitmax[node] = fitmax
            self._guarmax[node] = guarmax
        run = self._best[node]
        self._offer[node] = None if run is None or node == 0 else self._key(node, run)

    def _key(self, node: int, run: Run) -> Key:
        """R6.2: (0 if within the node's min else 1, b(node) with the request added, -p, tq, id)."""
        inside = 0 if self.ledger.within_min(node, run.request) else 1
        share = self.ledger.share(node, run.request)
        return (inside, share, -run.priority, run.enqueued, run.id)
