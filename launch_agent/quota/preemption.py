"""Victim selection: reclaim across queues (R7) and preemption within a queue (R8).

`plan_preemption` answers "which admitted runs must go so that `x` fits?" and returns them in
eviction order, or None when no set works (then nothing is evicted, R7.6). It works on the
ledger tentatively: each chosen victim's request is uncharged so the next choice and the fit
test see the state after the evictions so far, and everything is charged back before it returns.

R7 (only when x's own leaf stays within its min, i.e. G(x, parent(leaf)) holds):
  - search levels from parent(leaf) up to A*(x), closest first, and leave a level only when it
    has no eligible victim left;
  - at a level, among the children not on x's path that *borrow* on a non-count resource x
    requests, take the one with the highest borrowed share b(c); ties go to the child holding
    the most recently admitted eligible run, then to the smaller name; descend the same way to
    a leaf;
  - in the leaf, take the run with the lowest priority, then the latest admission, then the
    smaller id.
  A run is an eligible victim when it runs, is not already chosen, passes the reclaim policy
  (`Any`, or `LowerPriority`: p < p(x)) and itself requests a resource on which its leaf borrows
  and that x needs: evicting a run that frees nothing x lacks cannot help, and this choice is
  what makes the no-ping-pong argument (I4) hold for multi-resource requests.
R8 (leaf policy `LowerPriority`): then the runs of x's own leaf with p < p(x), lowest priority
first, latest admission first. Candidates from other queues come first, as in Kueue.
R8 never makes x's leaf borrow more: a plan with victims in x's own leaf is refused when,
after its (minimized) evictions, x's leaf would borrow more of some non-count resource x
requests than it did before the plan, i.e. end above both its min and its usage before
(`_Plan.borrows_more`). x may preempt within its queue while its leaf borrows, as Kueue's
in-ClusterQueue preemption does (`candidateIsValid` accepts same-ClusterQueue candidates in
its borrowing attempt, pkg/scheduler/preemption/classical/candidate_generator.go), but it
cannot turn the quota its victims held into newly borrowed quota: that was the engine of the
admission cycle the unrestricted R8 had (a reclaimer's place taken by a higher-priority run
that then borrowed, and was reclaimed back through a third run, for ever). With it no
preemption raises any leaf's borrowing on any resource, the fact the termination argument in
docs/quota.md ("Termination") rests on. R7 requires x's leaf within its min with x before
looking for victims (its victims are off x's path and do not move the leaf), so the check only
ever refuses R8. The minimal plan is judged, not a larger one: victims beyond the minimal
plan are not needed for x to fit, so they would fit again at once, restarted for nothing.
Minimization: walk the victims in reverse and keep running any whose eviction is not needed.

Ties on share are broken by the latest eligible admission below each tied child. With
`latest` (per node, an upper bound on the admission stamp of every admitted run below it,
kept by the engine) the search is best-first: subtrees are opened in order of their bound and
it stops once the best exact stamp found beats every unopened bound, so a tie among large
subtrees costs a few leaves rather than every run in them. Without `latest` every tied
subtree is searched in full: the slow reference the tests compare against.
A count resource (`runs`, `sweep_schedulers`) never triggers R7: when x fits on everything but
counts, only R8 may free a slot.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from fractions import Fraction

from launch_agent.quota.ledger import Ledger
from launch_agent.quota.runs import RUNNING_STATES, Run, RunState, Stamp
from launch_agent.quota.tree import COUNT_RESOURCES

_NO_STAMP: Stamp = (Fraction(0), 0)
_ADMITTED, _READY = RunState.ADMITTED, RunState.READY


def first_victim(runs: Iterable[Run]) -> Run | None:
    """`min(runs, key=victim_order)` without building a key (and negating a Fraction) per
    run: this is the innermost loop of victim selection."""
    best: Run | None = None
    best_stamp: Stamp = _NO_STAMP
    for run in runs:
        stamp = run.admitted or _NO_STAMP
        if (
            best is None
            or run.priority < best.priority
            or (
                run.priority == best.priority
                and (_later(stamp, best_stamp) or (stamp == best_stamp and run.id < best.id))
            )
        ):
            best, best_stamp = run, stamp
    return best


def _later(a: Stamp, b: Stamp) -> bool:
    """`a > b` for stamps. Stamps made at one clock value share the clock's Fraction, and
    then only the sequence numbers are compared: a Fraction comparison runs Python code."""
    if a[0] is b[0]:
        return a[1] > b[1]
    return a > b


def victim_order(run: Run) -> tuple[object, ...]:
    """Lowest priority first, then the most recently admitted, then the smaller id."""
    admitted = run.admitted or (Fraction(0), 0)
    return (run.priority, -admitted[0], -admitted[1], run.id)


class _Plan:
    def __init__(
        self,
        ledger: Ledger,
        admitted: list[dict[str, Run]],
        x: Run,
        policy: str,
        latest: Sequence[Stamp | None] | None = None,
    ):
        self.ledger = ledger
        self.latest = latest
        self.admitted = admitted
        self.x = x
        self.path = ledger.paths[x.leaf]
        self.policy = policy
        self.any_policy = policy == "Any"
        self.priority = x.spec.priority
        self.wanted = frozenset(
            r for r, q in x.request.items() if q > 0 and r not in COUNT_RESOURCES
        )
        self.victims: list[Run] = []
        self.removed: set[str] = set()

    def fits(self) -> bool:
        return self.ledger.fits(self.path, self.x.request)

    def borrows_more(self) -> bool:
        """Whether x's leaf, with x and after the evictions so far, would borrow more of a
        resource x requests than before the plan: it ends above its min there and x takes more
        than the victims in its leaf free (R8's limit; R7 keeps the leaf within its min)."""
        leaf = self.x.leaf
        effective, minima = self.ledger.eff[leaf], self.ledger.mins[leaf]
        request = self.x.request
        for resource in self.wanted:
            amount = request[resource]
            if effective.get(resource, 0) + amount <= minima.get(resource, 0):
                continue
            freed = 0
            for victim in self.victims:
                if victim.leaf == leaf and victim.id in self.removed:
                    freed += victim.request.get(resource, 0)
            if amount > freed:
                return True
        return False

    def preempts_in_queue(self) -> bool:
        leaf = self.x.leaf
        return any(victim.leaf == leaf for victim in self.victims)

    # Tentative evictions move only the effective usage, which is all that fit, shares and
    # borrowing read: the charged part is put back unchanged anyway.
    def remove(self, run: Run) -> None:
        self.ledger.shift(self.ledger.paths[run.leaf], run.request, -1)
        self.removed.add(run.id)

    def restore(self, run: Run) -> None:
        self.ledger.shift(self.ledger.paths[run.leaf], run.request, +1)
        self.removed.discard(run.id)

    def borrowed_in(self, leaf: int) -> list[str]:
        """The resources x wants on which `leaf` borrows: a victim there must request one."""
        effective, minima = self.ledger.eff[leaf], self.ledger.mins[leaf]
        return [r for r in self.wanted if effective.get(r, 0) > minima.get(r, 0)]

    def eligible(self, run: Run, borrowed: list[str]) -> bool:
        state = run.state
        if state is not _ADMITTED and state is not _READY:
            return False
        if run.spec.id in self.removed:
            return False
        if not self.any_policy and run.spec.priority >= self.priority:
            return False
        request = run.request
        # mypyc compiles any() over a generator to a plain loop.
        return any(request.get(resource, 0) > 0 for resource in borrowed)

    def eligible_in_leaf(self, leaf: int) -> list[Run]:
        borrowed = self.borrowed_in(leaf)
        if not borrowed:
            return []
        return [run for run in self.admitted[leaf].values() if self.eligible(run, borrowed)]

    def latest_in_leaf(self, leaf: int) -> Stamp | None:
        """The latest admission among the eligible runs of `leaf`, or None."""
        borrowed = self.borrowed_in(leaf)
        if not borrowed:
            return None
        best: Stamp | None = None
        for run in self.admitted[leaf].values():
            stamp = run.admitted
            if stamp and (best is None or _later(stamp, best)) and self.eligible(run, borrowed):
                best = stamp
        return best

    def latest_eligible(self, node: int) -> Stamp | None:
        """The latest admission among eligible runs reachable from `node` through borrowing
        nodes, or None when `node` supplies no victim."""
        ledger = self.ledger
        if not ledger.borrows_on(node, self.wanted):
            return None
        if not ledger.children[node]:
            return self.latest_in_leaf(node)
        best: Stamp | None = None
        for child in ledger.children[node]:
            stamp = self.latest_eligible(child)
            if stamp is not None and (best is None or _later(stamp, best)):
                best = stamp
        return best

    def has_eligible(self, node: int) -> bool:
        """`latest_eligible(node) is not None`, stopping at the first eligible run found."""
        ledger = self.ledger
        if not ledger.borrows_on(node, self.wanted):
            return False
        children = ledger.children[node]
        if not children:
            borrowed = self.borrowed_in(node)
            if not borrowed:
                return False
            return any(self.eligible(run, borrowed) for run in self.admitted[node].values())
        return any(self.has_eligible(child) for child in children)

    def pick_child(self, children: list[int]) -> int | None:
        """Highest share first; among equal shares the most recent eligible admission, then
        the smaller name. Only ties need the (costlier) latest-admission search."""
        ledger = self.ledger
        wanted = self.wanted
        shares: list[int] = []
        options: list[int] = []
        for child in children:
            if ledger.borrows_on(child, wanted):
                shares.append(ledger.share(child))
                options.append(child)
        # Groups of equal share, highest first: a plain scan per group instead of a sort (a
        # node has a handful of children and the first group nearly always decides).
        while options:
            share = max(shares)
            group = [options[i] for i in range(len(options)) if shares[i] == share]
            keep = [i for i in range(len(options)) if shares[i] != share]
            options = [options[i] for i in keep]
            shares = [shares[i] for i in keep]
            if len(group) == 1:
                if self.has_eligible(group[0]):
                    return group[0]
                continue
            if self.latest is not None:
                found = self.latest_of_group(group)
                if found is not None:
                    return found
                continue
            best: tuple[tuple[Fraction, int], str] | None = None
            chosen = None
            for child in group:
                latest = self.latest_eligible(child)
                if latest is None:
                    continue
                key = ((-latest[0], -latest[1]), ledger.nodes[child].name)
                if best is None or key < best:
                    best, chosen = key, child
            if chosen is not None:
                return chosen
        return None

    def latest_of_group(self, group: list[int]) -> int | None:
        """The child of `group` with the latest eligible admission below it (best-first on
        the `latest` bounds). Stamps are unique, so the name never breaks a tie here."""
        assert self.latest is not None
        latest = self.latest
        ledger = self.ledger
        # Max-heap on the bounds by negation. Bounds made at one clock value share its
        # Fraction: negate it once, so the heap's tuple comparisons find the times identical
        # and compare sequence numbers only (a Fraction comparison runs Python code).
        last_time: Fraction | None = None
        last_negated = _NO_STAMP[0]
        heap: list[tuple[Fraction, int, int, int, Stamp]] = []
        for child in group:
            bound = latest[child]
            if bound is not None:
                if bound[0] is not last_time:
                    last_time, last_negated = bound[0], -bound[0]
                heap.append((last_negated, -bound[1], child, child, bound))
        heapq.heapify(heap)
        best: Stamp | None = None
        chosen = None
        while heap:
            _, _, top, node, bound = heapq.heappop(heap)
            if best is not None and not _later(bound, best):
                break  # every bound left is lower than the stamp in hand
            if not ledger.borrows_on(node, self.wanted):
                continue
            children = ledger.children[node]
            if children:
                for child in children:
                    below = latest[child]
                    if below is not None:
                        if below[0] is not last_time:
                            last_time, last_negated = below[0], -below[0]
                        heapq.heappush(heap, (last_negated, -below[1], top, child, below))
                continue
            stamp = self.latest_in_leaf(node)
            if stamp is not None and (best is None or _later(stamp, best)):
                best, chosen = stamp, top
        return chosen

    def victim_at_level(self, level: int, on_path: int) -> Run | None:
        node = self.pick_child([c for c in self.ledger.children[level] if c != on_path])
        while node is not None and self.ledger.children[node]:
            node = self.pick_child(self.ledger.children[node])
        if node is None:
            return None
        return first_victim(self.eligible_in_leaf(node))

    def reclaim(self) -> None:
        ledger = self.ledger
        if ledger.blocking(self.path, self.x.request, counts=False) is None:
            return  # only a count is short: counts never trigger reclaim (R12)
        top = ledger.guarantee_top(self.path, self.x.request)
        if top is None:
            return
        for position in range(1, top + 1):
            level = self.path[position]
            while not self.fits():
                victim = self.victim_at_level(level, self.path[position - 1])
                if victim is None:
                    break
                self.victims.append(victim)
                self.remove(victim)
            if self.fits():
                return

    def within_queue(self) -> None:
        candidates = sorted(
            (
                run
                for run in self.admitted[self.x.leaf].values()
                if run.state in RUNNING_STATES
                and run.id not in self.removed
                and run.priority < self.x.priority
            ),
            key=victim_order,
        )
        for victim in candidates:
            if self.fits():
                return
            self.victims.append(victim)
            self.remove(victim)

    def minimize(self) -> None:
        for victim in reversed(list(self.victims)):
            self.restore(victim)
            if self.fits():
                self.victims.remove(victim)
            else:
                self.remove(victim)


def plan_preemption(
    ledger: Ledger,
    admitted: list[dict[str, Run]],
    x: Run,
    reclaim_policy: str,
    within_queue: str,
    *,
    latest: Sequence[Stamp | None] | None = None,
    minimal: bool = True,
) -> list[Run] | None:
    """The runs to evict, in order, so that `x` fits; None when no set of victims works.
    `latest`: per node, an upper bound on the admission stamps of the runs admitted below it
    (None for none), which speeds up ties; without it every tie is searched in full.
    `minimal=False` skips the minimization of reclaim-only plans: the answer is then only good
    for "is there a plan" (minimizing drops victims, never turns such a plan into None), which
    is all that choosing candidates needs; the plan that is carried out is always minimized."""
    plan = _Plan(ledger, admitted, x, reclaim_policy, latest)
    try:
        plan.reclaim()
        if not plan.fits() and within_queue == "LowerPriority":
            plan.within_queue()
        if not plan.fits():
            return None
        # An unminimized plan can free more in x's leaf than the minimized one (the plan that
        # is carried out): R8 plans are minimized before they are judged.
        in_queue = plan.preempts_in_queue()
        if minimal or in_queue:
            plan.minimize()
        if in_queue and plan.borrows_more():
            return None  # R8 never makes x's leaf borrow more
        return list(plan.victims)
    finally:
        for run in list(plan.victims):
            if run.id in plan.removed:
                plan.restore(run)
