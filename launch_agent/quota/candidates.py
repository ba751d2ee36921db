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

from launch_agent.quota.ledger import Ledger
from launch_agent.quota.preemption import _later, plan_preemption
from launch_agent.quota.runs import Run, RunState, Stamp
from launch_agent.quota.tree import COUNT_RESOURCES, QuotaTree

# A run's offer at a node: (outside-min flag, share, -priority, enqueue sequence, id), which
# orders offers as R6.2's (…, -p, tq, id) does (`Run.rank`).
Key = tuple[int, int, int, int, str]
Order = tuple[int, int, str]  # `Run.rank`
# How a leaf's candidate is feasible: it fits, R7 is certain to succeed, or a plan was found.
_NONE, _FITS, _GUARANTEED, _LOCAL, _PLANNED = 0, 1, 2, 3, 4


def _before(a: Key, b: Key) -> bool:
    """`a < b`, field by field. Compiled, a comparison of two whole tuples boxes both into
    new Python tuples first; offers are compared tens of times per decision, and the first
    two fields (within-min flag, share) almost always decide."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if a[1] != b[1]:
        return a[1] < b[1]
    if a[2] != b[2]:
        return a[2] < b[2]
    if a[3] != b[3]:
        return a[3] < b[3]
    return a[4] < b[4]


# A heap entry of `_blocked_at`, (-threshold, token, seq, kind), packed into one int:
# -threshold · 2^128 + token · 2^64 + (seq + 2^61) · 4 + kind. Each field fills its own bit
# range (tokens count scans, far below 2^64; |seq| is below 2^61; kind is 0-3), so the ints
# order exactly as the tuples did, and `_unpack` recovers the fields.
_ENTRY_SHIFT = 128
_LOW_MASK = (1 << _ENTRY_SHIFT) - 1
_SEQ_OFFSET = 1 << 61
_SEQ_MASK = (1 << 62) - 1


def _entry(threshold: int, token: int, seq: int, kind: int) -> int:
    return (-threshold << _ENTRY_SHIFT) + (token << 64) + ((seq + _SEQ_OFFSET) << 2) + kind


def _unpack(entry: int) -> tuple[int, int, int]:
    """(token, seq, kind) of a packed entry."""
    low = entry & _LOW_MASK
    return low >> 64, ((low >> 2) & _SEQ_MASK) - _SEQ_OFFSET, low & 3


def _rank_before(a: Order, b: Order) -> bool:
    """`a < b` for two `Run.rank`s, field by field (see `_before`)."""
    if a[0] != b[0]:
        return a[0] < b[0]
    if a[1] != b[1]:
        return a[1] < b[1]
    return a[2] < b[2]


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
        # What can break each _LOCAL proof (`_watch_local`): per (node, resource) a heap of
        # (usage ceiling, token, leaf) read when usage there rises, and per node the leaves
        # anchored there, whose proof a fall of usage there may change. A leaf's token is
        # bumped when it leaves `_local`, voiding its entries; leaves whose proof may be
        # broken wait in `_local_broken` for the next settle.
        self._local_token = [0] * count
        self._local_rise: dict[tuple[int, str], list[tuple[int, int, int]]] = {}
        self._local_fall: list[dict[int, int]] = [{} for _ in range(count)]
        self._local_broken: set[int] = set()
        # Skipped runs, by the (node, resource) that blocks them: heaps of entries
        # (-usage threshold, token, seq, kind), each packed into one int (`_entry`); an entry
        # is stale once its run is scanned again. One int, not a tuple of four: no object the
        # garbage collector tracks (tens are made per decision), and the heap compares ints
        # directly instead of tuples field by field.
        self._blocked_at: dict[tuple[int, str], list[int]] = {}
        self._by_seq: dict[int, Run] = {}
        self._wake_from: dict[int, Order] = {}
        self._decreased: set[tuple[int, str]] = set()
        self._invalidated: set[int] = set()
        self._was_strict = [False] * count
        # Hopeless leaves left stale (`_hopeless`): per leaf, one token for its fit entry and
        # one for its floor entry (kinds 2 and 3); odd while the entry is outstanding, bumped
        # to void it once the leaf is scanned or the entry clears. Woken leaves are re-marked
        # at the next settle.
        self._hope_tokens: tuple[list[int], list[int]] = ([0] * count, [0] * count)
        self._hope_woken: set[int] = set()
        # Per node, where its smallest request was last found not to fit: usually still true
        # (a full root), and then one lookup instead of a walk from the leaf up.
        self._hope_hint: dict[int, tuple[int, str]] = {}
        # Per inner node, the leaves below it, and whether every one of them preempts only
        # across queues (`withinQueue: Never`): what `_subtree_hopeless` needs.
        self._leaves_below: list[list[int]] = [[] for _ in range(count)]
        for leaf in self.ledger.leaves:
            for ancestor in self.ledger.paths[leaf][1:]:
                self._leaves_below[ancestor].append(leaf)
        self._never_below = [
            all(self.ledger.nodes[leaf].within_queue == "Never" for leaf in below)
            for below in self._leaves_below
        ]
        self._bounds: dict[int, tuple[int, int] | None] = {}
        # Per node, the run whose key `_offer` holds (when it holds one): the key reads only
        # the node's usage (R4, R5) and the run, so it stays valid until usage there changes
        # (forgotten with the node's bound in `_settle`). A resolve that re-picks the same
        # winner below a node whose usage did not move then costs no share computation.
        self._keyed: list[Run | None] = [None] * count
        # Lazy resolution: nodes whose winner must be recomputed before it is used, the
        # restart point of each stale leaf's scan, and per node a lower bound on every request
        # pending below it (None: nothing is pending there); exact for a leaf (what is pending
        # there now), the element-wise minimum of its children's for an inner node.
        self._stale = [False] * count
        # Per inner node: every leaf below is known not to preempt (the leaf half of
        # `_subtree_hopeless`), true until one of those leaves changes — is marked, resolved,
        # or gains a run. Its ancestors' flags are cleared then (`_unsure`). A root that stays
        # full re-resolves its stale subtrees at every change anywhere, and without the flag
        # each re-check walked up to all the leaves below again.
        self._leaves_sure = [False] * count
        self._start: dict[int, Order | None] = {}
        self._minreq: list[dict[str, int] | None] = [None] * count
        # Per node, the latest admission stamp of the runs admitted below it, exact after a
        # release and an upper bound otherwise: the index that preemption ties search.
        self._latest: list[Stamp | None] = [None] * count
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

        Below the root a sharper bound than E is used: F, the sum over the children c of a off
        the path of (u(c) - min(c))⁺. At level a, R7 evicts while x does not fit and some such
        child borrows a resource x wants (a borrowing child has a borrowing leaf below it,
        whose running runs request that resource: there is always a victim); when it stops
        for want of victims every such child is back within its min, so at least F was freed
        at a and at every node above. If D ≤ F for every wanted resource at a and above, x
        fits by then. F ≥ E, since u(a) = u(p) + Σ u(c) and u(p) + req ≤ min(p): this proves
        more candidates than the counting argument, without planning them (a reclaimer whose
        parent already borrows, `--layout interleaved` in the benchmark).
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
        beside = [c for c in ledger.children[path[top]] if c != path[top - 1]]
        eff, mins = ledger.eff, ledger.mins
        for resource, amount in request.items():
            if resource in COUNT_RESOURCES or amount <= 0:
                continue
            freeable = -1  # F for this resource, summed only if some node lacks it
            for node in path[top:]:
                ceiling = ledger.maxs[node].get(resource)
                if ceiling is None:
                    continue
                lack = eff[node].get(resource, 0) + amount - ceiling
                if lack <= 0:
                    continue
                if freeable < 0:
                    freeable = sum(
                        max(0, eff[c].get(resource, 0) - mins[c].get(resource, 0)) for c in beside
                    )
                if lack > freeable:
                    return _NONE
        return _LOCAL

    def _on_increase(self, path: tuple[int, ...], request: Mapping[str, int]) -> None:
        """Usage grew on `path`: re-examine the leaves whose candidate may have lost its
        footing — found by descending only where the largest candidate request (`fitmax`,
        `guarmax`) exceeds the node's remaining headroom."""
        ledger = self.ledger
        self._dirty_nodes.update(path)
        if self._local_rise:
            self._local_rose(path, request)
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
        """Mark the leaves below `node` whose candidate may no longer fit. Their bounds are
        cleared, and those of the inner nodes passed re-merged, so that later descents do not
        return to leaves already waiting for a rescan (one that may stay stale for long if
        it cannot win, see `_resolve`); the rescan sets them again."""
        children_of = self.ledger.children
        stack = [node]
        passed: list[int] = []
        while stack:
            current = stack.pop()
            children = children_of[current]
            if not children:
                self._invalidated.add(current)
                self._fitmax[current] = {}
                self._guarmax[current] = {}
                continue
            passed.append(current)
            stack.extend(c for c in children if table[c].get(resource, 0) > headroom)
        for current in reversed(passed):  # children before their parents
            for merged_table in (self._fitmax, self._guarmax):
                merged: dict[str, int] = {}
                for child in children_of[current]:
                    for name, amount in merged_table[child].items():
                        if amount > merged.get(name, 0):
                            merged[name] = amount
                merged_table[current] = merged

    def _on_decrease(self, path: tuple[int, ...], request: Mapping[str, int]) -> None:
        """Usage fell on `path`. Which skipped runs may now pass is decided in `_settle`,
        against the usage at that point (an admission usually follows its victims' release)."""
        self._dirty_nodes.update(path)
        self._decreased.update((node, resource) for node in path for resource in request)
        self._dirty_leaves |= self._sensitive
        if self._local:
            tokens, falls, broken = self._local_token, self._local_fall, self._local_broken
            for node in path:
                watchers = falls[node]
                if watchers:
                    broken.update(leaf for leaf, token in watchers.items() if token == tokens[leaf])
                    watchers.clear()

    def _local_rose(self, path: tuple[int, ...], request: Mapping[str, int]) -> None:
        """Usage rose on `path`: the _LOCAL proofs whose usage ceiling there was passed may
        be broken."""
        eff, rise = self.ledger.eff, self._local_rise
        tokens, broken = self._local_token, self._local_broken
        for node in path:
            used = eff[node]
            for resource in request:
                heap = rise.get((node, resource))
                if not heap:
                    continue
                level = used.get(resource, 0)
                while heap and heap[0][0] < level:
                    _, token, leaf = heapq.heappop(heap)
                    if token == tokens[leaf]:
                        broken.add(leaf)

    def _watch_local(self, leaf: int, request: Mapping[str, int], path: tuple[int, ...]) -> None:
        """Record what can break the _LOCAL proof just made for `leaf`'s candidate, so that
        only the changes that may break it mark the leaf again (`_guaranteed` has the proof).

        With a = A*(x) at position `top` of the path and F the freeable amount beside a, the
        proof holds while usage stays at or below: max - req for a count resource anywhere on
        the path; min - req below a (else G(x, ·) fails there, and A*(x) moves down); and
        max - req + F at a and above (else the lack exceeds what R7 frees). A*(x) moves up
        only when usage falls at a, and F shrinks only when it falls at a child of a beside
        the path, which lowers the lack at a and above just as much; a fall at a marks the
        leaf, a conservative re-check (the proof at the old anchor may well still hold)."""
        ledger = self.ledger
        top = ledger.guarantee_top(path, request)
        if top is None or top == 0:  # pragma: no cover - `_guaranteed` just proved it
            self._local_broken.add(leaf)
            return
        token = self._local_token[leaf]
        anchor = path[top]
        beside = [c for c in ledger.children[anchor] if c != path[top - 1]]
        eff, mins, maxs, rise = ledger.eff, ledger.mins, ledger.maxs, self._local_rise
        freeable: dict[str, int] = {}
        for position, node in enumerate(path):
            maxima = maxs[node]
            for resource, amount in request.items():
                if resource in COUNT_RESOURCES:
                    ceiling = maxima.get(resource)
                    if ceiling is None:
                        continue
                    level = ceiling - amount
                elif amount <= 0:
                    continue
                elif position < top:
                    level = mins[node].get(resource, 0) - amount
                else:
                    ceiling = maxima.get(resource)
                    if ceiling is None:
                        continue
                    if resource not in freeable:
                        freeable[resource] = sum(
                            max(0, eff[c].get(resource, 0) - mins[c].get(resource, 0))
                            for c in beside
                        )
                    level = ceiling - amount + freeable[resource]
                heap = rise.setdefault((node, resource), [])
                heapq.heappush(heap, (level, token, leaf))
                if len(heap) > 4 * len(self._local) + 64:
                    heap[:] = [e for e in heap if e[1] == self._local_token[e[2]]]
                    heapq.heapify(heap)
        self._local_fall[anchor][leaf] = token

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
            # threshold >= used, for the packed entries: their top part is -threshold.
            limit = (1 - ledger.effective(node, resource)) << _ENTRY_SHIFT
            while heap and heap[0] < limit:
                token, seq, floor = _unpack(heapq.heappop(heap))
                if seq < 0:  # a hopeless leaf's entry (see `_hopeless`)
                    leaf = -seq - 1
                    tokens = self._hope_tokens[floor - 2]
                    if token != tokens[leaf]:
                        continue
                    # Woken without checking whether the same condition still holds
                    # elsewhere (another resource or node): it almost never does, and the
                    # node is judged again (`_hopeless`) only if the tournament reaches it.
                    tokens[leaf] += 1  # this side must be checked again; the other stands
                    self._hope_woken.add(leaf)
                    continue
                run = self._by_seq.get(seq)
                if run is None or token != run.block_token or run.state is not RunState.PENDING:
                    continue
                # Runs after the leaf's candidate were not scanned since it became the
                # candidate: their entries may be old, and they cannot matter.
                candidate = self._cand[run.leaf]
                if candidate is not None and _rank_before(candidate.rank, run.rank):
                    continue
                # The leaf's scan already restarts before this run (an earlier run woke it),
                # so the scan re-examines it and records its obstacle again if it still has one.
                known = wake.get(run.leaf)
                if known is not None and _rank_before(known, run.rank):
                    continue
                if not floor:
                    # Cleared here, but the run may still not fit elsewhere (another resource
                    # or node): then it only moves to that obstacle, and its leaf sleeps on.
                    # Preemption needs no wake-up: a run that may preempt makes its leaf
                    # sensitive, and one that comes back within min has a floor entry.
                    still = ledger.blocking(ledger.paths[run.leaf], run.request)
                    if still is not None:
                        where, what = still
                        self._block(run, still, ledger.maxs[where][what] - run.request[what])
                        continue
                wake[run.leaf] = run.rank
        self._decreased.clear()

    def _settle(self) -> None:
        """Turn this iteration's changes into marks, then resolve the root's winner lazily."""
        if self._decreased:
            self._wake_blocked()
        starts = self._start
        marked: list[int] = []

        def mark(leaf: int, start: Order | None) -> None:
            # Restart points merge to the earliest: None (from the head) comes first. The
            # same order object again (a leaf left stale, re-marked at the same candidate) is
            # no earlier, and needs no comparison.
            if leaf in starts:
                old = starts[leaf]
                if (
                    old is not None
                    and old is not start
                    and (start is None or _rank_before(start, old))
                ):
                    starts[leaf] = start
            else:
                starts[leaf] = start
            marked.append(leaf)

        if self._local_broken:
            # A candidate guaranteed below the root whose proof a change may have broken
            # (`_watch_local`). Its resolution restarts at it: if it is no longer guaranteed
            # the scan goes on past it, and the runs before it stay infeasible.
            cand = self._cand
            for leaf in self._local_broken:
                if leaf in self._local:
                    run = cand[leaf]
                    mark(leaf, run.rank if run is not None else None)
            self._local_broken.clear()
        for leaf in self._dirty_leaves:
            mark(leaf, None)
        # Partial scans. Runs skipped before the restart point are still infeasible: their
        # obstacle did not clear (or they would have woken the leaf), and usage only grew for
        # them otherwise (fit and the guarantee are monotone in usage). Leaves whose candidate
        # may merely have stopped fitting restart at that candidate.
        for leaf, order in self._wake_from.items():
            mark(leaf, order)
        for leaf in self._invalidated:
            run = self._cand[leaf]
            mark(leaf, run.rank if run is not None else None)
        stale = self._stale
        paths = self.ledger.paths
        # Every ancestor of a change is re-resolved, even one already stale: a node resolved
        # earlier may have left a dominated child stale below it (see `_resolve`).
        # Paths share their tops: a walk up stops at a node already reached in this call,
        # whose own ancestors were reached then too.
        sure = self._leaves_sure
        reached: set[int] = set()
        for node in marked:
            for ancestor in paths[node]:
                if ancestor in reached:
                    break
                reached.add(ancestor)
                stale[ancestor] = True
                sure[ancestor] = False
        bounds, keyed = self._bounds, self._keyed
        for node in self._dirty_nodes:
            bounds.pop(node, None)  # its usage changed
            keyed[node] = None
            for ancestor in paths[node]:
                if ancestor in reached:
                    break
                reached.add(ancestor)
                stale[ancestor] = True
                sure[ancestor] = False
        for leaf in self._hope_woken:  # its restart point, if any, is still in `starts`
            for ancestor in paths[leaf]:
                if ancestor in reached:
                    break
                reached.add(ancestor)
                stale[ancestor] = True
                sure[ancestor] = False
        self._hope_woken.clear()
        self._dirty_leaves.clear()
        self._invalidated.clear()
        self._wake_from.clear()
        self._dirty_nodes.clear()
        if stale[0]:
            self._resolve(0)

    def _resolve(self, node: int) -> None:
        """Recompute `node`'s winner, resolving only the stale children that could win.

        A stale child's offer is bounded below by its key for the smallest request pending
        under it (`_minreq`): the within-min flag and the borrowed share only grow with the
        request. A child whose bound exceeds the best exact offer found so far cannot win and
        stays stale, with its marks, until something under it changes again or a better
        offer disappears. The exhaustive reference resolves everything."""
        children = self.ledger.children[node]
        if not children:
            if node in self._start:  # else only its usage changed: the same run, a new key
                self._examine_leaf(node, self._start.pop(node))
            self._stale[node] = False
            self._recompute(node)
            self._unsure(node)
            return
        stale, bounds = self._stale, self._bounds
        best_key: Key | None = None
        waiting: list[tuple[int, int, int]] = []  # (within-min flag, share) bound, child
        for child in children:
            if stale[child]:
                # `_bound`, with its cache read inline: tens of stale children per change.
                bound = bounds[child] if child in bounds else self._bound(child)
                if bound is None:  # no run is pending below: nothing to offer
                    stale[child] = False
                    self._start.pop(child, None)
                    self._best[child] = self._offer[child] = None
                    continue
                waiting.append((bound[0], bound[1], child))
                continue
            key = self._offer[child]
            if key is not None and (best_key is None or _before(key, best_key)):
                best_key = key
        waiting.sort()
        for inside, share, child in waiting:
            if not self.exhaustive:
                if best_key is not None:
                    if inside > best_key[0] or (inside == best_key[0] and share > best_key[1]):
                        break  # the rest are bounded higher still
                    if inside == best_key[0] and share == best_key[1]:
                        tail = self._tail_bound(child)
                        if tail is not None and tail > best_key[2:]:
                            continue
                if self._hopeless(child):
                    continue
            self._resolve(child)
            key = self._offer[child]
            if key is not None and (best_key is None or _before(key, best_key)):
                best_key = key
        stale[node] = False
        self._recompute(node)

    def _bound(self, node: int) -> tuple[int, int] | None:
        """A lower bound on (within-min flag, share) of any offer `node` can make; cached
        until the node's usage or `_minreq` changes."""
        if node in self._bounds:
            return self._bounds[node]
        least = self._minreq[node]
        bound = None
        if least is not None:
            inside = 0 if self.ledger.within_min(node, least) else 1
            bound = inside, self.ledger.share(node, least)
        self._bounds[node] = bound
        return bound

    def _hopeless(self, node: int) -> bool:
        """Whether a stale leaf certainly has no candidate, without scanning it: even the
        smallest request pending there does not fit on its path, and none of its runs may
        preempt (none is within the leaf's min, and the leaf does not preempt within itself).
        Inner nodes are never hopeless: their leaves' mins differ.

        A hopeless leaf is not scanned, so its runs record no obstacles; the leaf records its
        own instead (both conditions' thresholds for that smallest request), and is re-marked
        when either clears."""
        ledger = self.ledger
        if ledger.children[node]:
            return self._subtree_hopeless(node)
        if ledger.nodes[node].within_queue != "Never":
            return False
        if self._minreq[node] is None:
            return True
        # An odd token means that side's entry is outstanding, so its obstacle still stands
        # (clearing would have moved the entry or woken the leaf, making the token even).
        fits, floors = self._hope_tokens
        fit = floor = None
        if floors[node] % 2 == 0:
            floor = self._hope_obstacle(node, floor=True)
            if floor is None:
                return False
        if fits[node] % 2 == 0:
            fit = self._hope_obstacle(node, floor=False)
            if fit is None:
                return False
        if floor is not None:
            floors[node] += 1
            self._push(floor[0], floor[1], floors[node], -node - 1, 3)
        if fit is not None:
            fits[node] += 1
            self._push(fit[0], fit[1], fits[node], -node - 1, 2)
        return True

    def _subtree_hopeless(self, node: int) -> bool:
        """Whether a stale inner node certainly has no offer, without resolving it: the
        smallest request ever pending below it does not fit on the path from the node up (so
        no run below fits), and every leaf below is known not to preempt — nothing pending,
        an exact empty offer, or stale with its floor entry outstanding (see `_hopeless`).

        A release at the root that makes room for a few CPUs would otherwise wake every leaf
        whose smallest run fits there, and once the winner took the room back, each of them
        would be proven hopeless again, one leaf at a time. A subtree that is hopeless as a
        whole records one fit entry instead (kind 2, like a leaf's, for `_minreq[node]` on
        `paths[node]`); when it clears, the node and its ancestors are marked stale and the
        leaves below are judged one by one. Its leaves' floor entries still wake them (and
        so the node) on their own."""
        if not self._never_below[node]:
            return False
        fits = self._hope_tokens[0]
        fit = None
        # An odd token: the node's entry is outstanding, so its obstacle still stands (the
        # token is bumped when `_minreq[node]` shrinks).
        if fits[node] % 2 == 0:
            fit = self._hope_obstacle(node, floor=False)
            if fit is None:
                return False
        if self._leaves_sure[node]:
            # No leaf below changed since the loop below last passed: it would pass again.
            if fit is not None:
                fits[node] += 1
                self._push(fit[0], fit[1], fits[node], -node - 1, 2)
            return True
        stale, offer, minreq, floors = self._stale, self._offer, self._minreq, self._hope_tokens[1]
        for leaf in self._leaves_below[node]:
            if minreq[leaf] is None:
                continue
            if stale[leaf]:
                if floors[leaf] % 2 == 0:
                    # Not judged since its last scan (or its floor cleared): judge its floor
                    # side now, as `_hopeless` would, and record the entry if it holds.
                    floor = self._hope_obstacle(leaf, floor=True)
                    if floor is None:
                        return False
                    floors[leaf] += 1
                    self._push(floor[0], floor[1], floors[leaf], -leaf - 1, 3)
            elif offer[leaf] is not None:
                return False
        self._leaves_sure[node] = True
        if fit is not None:
            fits[node] += 1
            self._push(fit[0], fit[1], fits[node], -node - 1, 2)
        return True

    def _unsure(self, leaf: int) -> None:
        sure = self._leaves_sure
        for node in self.ledger.paths[leaf]:
            sure[node] = False

    def _void_hope(self, leaf: int) -> None:
        """Void the leaf's outstanding hopeless entries (odd tokens become even)."""
        for tokens in self._hope_tokens:
            if tokens[leaf] % 2:
                tokens[leaf] += 1

    def _hope_obstacle(self, leaf: int, *, floor: bool) -> tuple[tuple[int, str], int] | None:
        """For `_hopeless`: where, and down to which usage, the leaf's smallest pending
        request stays outside the leaf's min (`floor`) or does not fit on its path; None once
        that condition no longer holds."""
        ledger = self.ledger
        least = self._minreq[leaf]
        if least is None:
            return None
        if floor:
            minima = ledger.mins[leaf]
            effective = ledger.eff[leaf]
            for resource, amount in least.items():
                if resource in COUNT_RESOURCES or amount <= 0:
                    continue
                limit = minima.get(resource, 0)
                if effective.get(resource, 0) + amount > limit:
                    return (leaf, resource), limit - amount
            return None
        # Any obstacle on the path will do: the entry only has to stay valid while it stands.
        hint = self._hope_hint.get(leaf)
        if hint is not None:
            where, resource = hint
            amount = least.get(resource, 0)
            if amount and amount > ledger.room[where][resource]:
                return hint, ledger.maxs[where][resource] - amount
        blocked = ledger.blocking(ledger.paths[leaf], least)
        if blocked is None:
            return None
        self._hope_hint[leaf] = blocked
        where, resource = blocked
        return blocked, ledger.maxs[where][resource] - least[resource]

    def _tail_bound(self, node: int) -> Order | None:
        """For a stale leaf, a lower bound on the rest of its offer's key, (-p, seq, id): its
        scan's restart point, or else its first pending run (runs are kept in that order).
        None (no bound) for an inner node."""
        if self.ledger.children[node]:
            return None
        order = self._start.get(node)
        if order is None:
            pending = self._pending[node]
            if not pending:
                return None
            order = pending[0].rank
        return order

    def _note_admitted(self, run: Run) -> None:
        stamp = run.admitted
        if stamp is None:  # pragma: no cover - admitted runs carry their stamp
            return
        latest = self._latest
        for node in self.ledger.paths[run.leaf]:
            known = latest[node]
            # `known >= stamp`, with the same-clock shortcut of `_later`.
            if known is not None and not _later(stamp, known):
                return
            latest[node] = stamp

    def _note_released(self, leaf: int) -> None:
        """A run left `leaf`'s admitted set: recompute the stamps up its path."""
        latest = self._latest
        # The latest stamps by `_later`, not max(): whole-tuple comparisons compare the
        # Fractions, while stamps of one clock value share theirs and differ by sequence.
        value: Stamp | None = None
        for run in self._admitted[leaf].values():
            stamp = run.admitted
            if stamp and (value is None or _later(stamp, value)):
                value = stamp
        latest[leaf] = value
        children = self.ledger.children
        for node in self.ledger.paths[leaf][1:]:
            value = None
            for child in children[node]:
                stamp = latest[child]
                if stamp is not None and (value is None or _later(stamp, value)):
                    value = stamp
            known = latest[node]
            if value is known or (
                value is not None
                and known is not None
                and not _later(value, known)
                and not _later(known, value)
            ):
                return
            latest[node] = value

    def _note_request(self, leaf: int, request: Mapping[str, int]) -> None:
        """A run joins `leaf`'s pending list: lower `_minreq` on its path (element-wise; a
        resource the request lacks counts as 0). It rises only when runs leave
        (`_note_removed`), so it bounds every request pending below each node."""
        self._void_hope(leaf)  # its hopeless entries were for a larger request
        self._unsure(leaf)
        fits = self._hope_tokens[0]
        for node in self.ledger.paths[leaf]:
            least = self._minreq[node]
            if least is not None and all(
                request.get(r, 0) >= amount for r, amount in least.items()
            ):
                return  # the ancestors' bounds are element-wise lower still
            self._bounds.pop(node, None)
            # An inner node's subtree entry was for a larger request (or, if nothing was
            # pending below it, for requests long gone): void it.
            if fits[node] % 2:
                fits[node] += 1
            if least is None:
                self._minreq[node] = dict(request)
                continue
            self._minreq[node] = {
                r: min(amount, request.get(r, 0))
                for r, amount in least.items()
                if request.get(r, 0) > 0
            }

    def _note_removed(self, leaf: int) -> None:
        """A run left `leaf`'s pending list: the leaf's own bound is exact (the element-wise
        minimum of what is pending there now), so it may rise; then the inner nodes above are
        re-merged from their children, up to the first that does not change.

        Tight inner bounds matter on a full tree: a node whose bound is the smallest request
        that was *ever* pending below it fits in the crumbs a release leaves at the root, so
        neither its tournament bound nor `_subtree_hopeless` can rule the subtree out."""
        least: dict[str, int] | None = None
        for run in self._pending[leaf]:
            request = run.request
            if least is None:
                least = dict(request)
            else:
                least = {r: min(a, request.get(r, 0)) for r, a in least.items() if r in request}
        old = self._minreq[leaf]
        self._minreq[leaf] = least
        self._unsure(leaf)
        self._bounds.pop(leaf, None)
        if least == old:
            return
        minreq, children = self._minreq, self.ledger.children
        for node in self.ledger.paths[leaf][1:]:
            merged: dict[str, int] | None = None
            for child in children[node]:
                below = minreq[child]
                if below is None:
                    continue
                if merged is None:
                    merged = dict(below)
                else:  # element-wise, a resource missing on one side counting as 0
                    merged = {r: min(a, below[r]) for r, a in merged.items() if r in below}
            if merged == minreq[node]:
                return
            minreq[node] = merged
            self._bounds.pop(node, None)

    def _block(self, run: Run, where: tuple[int, str], threshold: int, floor: bool = False) -> None:
        """Record that `run` is skipped until usage at `where` falls to `threshold`: to fit
        there, or (`floor`) to be back within its leaf's min."""
        self._push(where, threshold, run.block_token, run.enqueued[1], int(floor))

    def _push(
        self, where: tuple[int, str], threshold: int, token: int, seq: int, kind: int
    ) -> None:
        heap = self._blocked_at.setdefault(where, [])
        heapq.heappush(heap, _entry(threshold, token, seq, kind))
        if len(heap) > 2 * len(self.runs) + 64:
            # Entries of runs scanned again since, or no longer pending, are stale.
            heap[:] = [e for e in heap if self._entry_valid(e)]
            heapq.heapify(heap)

    def _entry_valid(self, entry: int) -> bool:
        token, seq, kind = _unpack(entry)
        if seq < 0:
            return token == self._hope_tokens[kind - 2][-seq - 1]
        run = self._by_seq.get(seq)
        return run is not None and token == run.block_token and run.state is RunState.PENDING

    def _examine_leaf(self, leaf: int, start: Order | None) -> None:
        """R6.1: the first feasible pending run in order, or only the head in Strict mode;
        from the run at order `start` on (a partial scan) or from the head (`None`)."""
        if self._was_strict[leaf] or self.exhaustive:
            start = None
        self._cand[leaf] = None
        self._cand_kind[leaf] = _NONE
        self._void_hope(leaf)
        self._sensitive.discard(leaf)
        if leaf in self._local:
            self._local.discard(leaf)
            self._local_token[leaf] += 1
        self._was_strict[leaf] = False
        self._scan_leaf(leaf, start)

    def _scan_leaf(self, leaf: int, start: Order | None) -> None:
        ledger = self.ledger
        node = ledger.nodes[leaf]
        path = ledger.paths[leaf]
        head = True
        gangs_blocked = self.tree.block_admission_until_ready and self._unready_gangs > 0
        fast = self._fast_reclaim()
        maxs, rooms = ledger.maxs, ledger.room
        reclaim_possible = len(path) > 1  # a lone root has no other queue to reclaim from
        seen: list[tuple[int, str]] = []
        pending = self._pending[leaf]
        if start is not None:
            head = False  # the leaf was not Strict and the clock has not moved since
            pending = pending[bisect.bisect_left(pending, start, key=lambda r: r.rank) :]
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
                for pair in seen:
                    where, resource = pair
                    amount = request.get(resource, 0)
                    if amount and amount > rooms[where][resource]:
                        blocked = pair
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
                            self._watch_local(leaf, request, path)
                        return
                if in_min or node.within_queue == "LowerPriority":
                    self._sensitive.add(leaf)
                    plan = plan_preemption(
                        ledger,
                        self._admitted,
                        run,
                        self.tree.reclaim_policy,
                        node.within_queue,
                        latest=None if self.exhaustive else self._latest,
                        minimal=self.exhaustive,
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
                            self._block(run, (leaf, resource), floor - amount, True)
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
            # The run's own request, shared: these tables are replaced, never updated in place.
            self._fitmax[node] = run.request if run and kind == _FITS else {}
            self._guarmax[node] = run.request if run and kind == _GUARANTEED else {}
        else:
            best_key: Key | None = None
            best_run = None
            fitmax: dict[str, int] = {}
            guarmax: dict[str, int] = {}
            stale, offers, fitmaxs, guarmaxs = self._stale, self._offer, self._fitmax, self._guarmax
            for child in children:
                key = offers[child]
                # A stale child left unresolved cannot win (`_resolve`); its old offer is
                # void, but its bounds still over-approximate what lies below.
                if (
                    key is not None
                    and not stale[child]
                    and (best_key is None or _before(key, best_key))
                ):
                    best_key, best_run = key, self._best[child]
                # Most children have no fitting or guaranteed candidate: skip their empty tables.
                table = fitmaxs[child]
                if table:
                    for resource, amount in table.items():
                        if amount > fitmax.get(resource, 0):
                            fitmax[resource] = amount
                table = guarmaxs[child]
                if table:
                    for resource, amount in table.items():
                        if amount > guarmax.get(resource, 0):
                            guarmax[resource] = amount
            self._best[node] = best_run
            self._fitmax[node] = fitmax
            self._guarmax[node] = guarmax
        run = self._best[node]
        if run is None or node == 0:
            self._offer[node] = None
            return
        if self._keyed[node] is run and self._offer[node] is not None:
            return  # the same run, and usage at the node did not change: the same key
        self._offer[node] = self._key(node, run)
        self._keyed[node] = run

    def _key(self, node: int, run: Run) -> Key:
        """R6.2: (0 if within the node's min else 1, b(node) with the request added, -p, tq, id)."""
        inside = 0 if self.ledger.within_min(node, run.request) else 1
        share = self.ledger.share(node, run.request)
        return (inside, share, -run.priority, run.enqueued[1], run.id)
