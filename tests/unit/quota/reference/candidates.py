"""Which run each leaf offers, and which one wins: the incremental half of R6.

A naive iteration re-examines every leaf because every admission changes the root's
usage. Instead each leaf caches its candidate, each node caches its winner and the largest
request among the *fitting* candidates below it (`fitmax`; `guarmax` does the same for
candidates that R7 is certain to serve, see `_guaranteed`). After an admission, a leaf is
re-examined only when (a) its own pending list changed, (b) some node on its path now has less
headroom than its candidate needs (found by descending only where `fitmax` exceeds the
headroom), (c) its candidate relies on preemption or it rejected a run after trying
preemption ("sensitive": victim availability can change anywhere), or (d) usage went *down*
where a skipped run of the leaf waits for it (per node and resource, a heap of the usage each
skipped run waits for). Winners are then recomputed only on the
paths of re-examined leaves. Fitting is monotone in usage, so candidates not touched by (a)–(d)
are still exactly what a full recomputation would give.

Partial scans. A leaf re-examined only because usage grew resumes at its old candidate; a leaf
woken by a release restarts at its earliest woken run. Runs before the restart point are still
infeasible, as their obstacle did not clear.

`AdmissionEngine` (engine.py) derives from `CandidateIndex` and owns the events; this module
owns the state the tournament is computed from and the bookkeeping that keeps it current.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Mapping
from fractions import Fraction

from launch_agent.quota.runs import Run, RunState, Stamp
from launch_agent.quota.tree import COUNT_RESOURCES, QuotaTree
from tests.unit.quota.reference.ledger import Ledger
from tests.unit.quota.reference.preemption import plan_preemption

Key = tuple[int, int, int, Stamp, str]
# How a leaf's candidate is feasible: it fits, R7 is certain to succeed, or a plan was found.
_NONE, _FITS, _GUARANTEED, _LOCAL, _PLANNED = 0, 1, 2, 3, 4


class CandidateIndex:
    """Runs per leaf, each leaf's candidate and each node's winner, kept current."""

    def __init__(
        self, tree: QuotaTree, now: Fraction | int = 0, *, exhaustive: bool = False
    ) -> None:
        self.tree = tree
        self.exhaustive = exhaustive
        self.ledger = Ledger(tree)
        self.now = Fraction(now)
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
