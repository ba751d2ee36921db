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
R8 never makes x's leaf borrow more (the cycle fix, docs/quota.md "Termination"): a plan with
victims in x's own leaf is refused when, after its minimized evictions, x's leaf would borrow
more of some non-count resource x requests than it did before the plan.
Minimization: walk the victims in reverse and keep running any whose eviction is not needed.
A count resource (`runs`, `sweep_schedulers`) never triggers R7: when x fits on everything but
counts, only R8 may free a slot.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from launch_agent.quota.runs import RUNNING_STATES, Run, Stamp
from launch_agent.quota.tree import COUNT_RESOURCES
from tests.unit.quota.reference.ledger import Ledger


def victim_order(run: Run) -> tuple[object, ...]:
    """Lowest priority first, then the most recently admitted, then the smaller id."""
    admitted = run.admitted or (Fraction(0), 0)
    return (run.priority, -admitted[0], -admitted[1], run.id)


class _Plan:
    def __init__(self, ledger: Ledger, admitted: list[dict[str, Run]], x: Run, policy: str):
        self.ledger = ledger
        self.admitted = admitted
        self.x = x
        self.path = ledger.paths[x.leaf]
        self.policy = policy
        self.wanted = frozenset(
            r for r, q in x.request.items() if q > 0 and r not in COUNT_RESOURCES
        )
        self.victims: list[Run] = []
        self.removed: set[str] = set()

    def fits(self) -> bool:
        return self.ledger.fits(self.path, self.x.request)

    def remove(self, run: Run) -> None:
        self.ledger.charge(self.ledger.paths[run.leaf], run.request, -1)
        self.removed.add(run.id)

    def restore(self, run: Run) -> None:
        self.ledger.charge(self.ledger.paths[run.leaf], run.request, +1)
        self.removed.discard(run.id)

    def eligible_in_leaf(self, leaf: int) -> Iterable[Run]:
        ledger = self.ledger
        borrowed = frozenset(
            r for r in self.wanted if ledger.effective(leaf, r) > ledger.mins[leaf].get(r, 0)
        )
        if not borrowed:
            return ()
        return (
            run
            for run in self.admitted[leaf].values()
            if run.state in RUNNING_STATES
            and run.id not in self.removed
            and (self.policy == "Any" or run.priority < self.x.priority)
            and any(run.request.get(r, 0) > 0 for r in borrowed)
        )

    def latest_eligible(self, node: int) -> Stamp | None:
        """The latest admission among eligible runs reachable from `node` through borrowing
        nodes, or None when `node` supplies no victim."""
        ledger = self.ledger
        if not ledger.borrows_on(node, self.wanted):
            return None
        if not ledger.children[node]:
            stamps = [run.admitted for run in self.eligible_in_leaf(node) if run.admitted]
            return max(stamps) if stamps else None
        found = [self.latest_eligible(c) for c in ledger.children[node]]
        stamps = [s for s in found if s is not None]
        return max(stamps) if stamps else None

    def has_eligible(self, node: int) -> bool:
        """`latest_eligible(node) is not None`, stopping at the first eligible run found."""
        ledger = self.ledger
        if not ledger.borrows_on(node, self.wanted):
            return False
        if not ledger.children[node]:
            return next(iter(self.eligible_in_leaf(node)), None) is not None
        return any(self.has_eligible(c) for c in ledger.children[node])

    def pick_child(self, children: Iterable[int]) -> int | None:
        """Highest share first; among equal shares the most recent eligible admission, then
        the smaller name. Only ties need the (costlier) latest-admission search."""
        ledger = self.ledger
        options = sorted(
            ((ledger.share(c), c) for c in children if ledger.borrows_on(c, self.wanted)),
            key=lambda option: option[0],
            reverse=True,
        )
        start = 0
        while start < len(options):
            share = options[start][0]
            end = start
            while end < len(options) and options[end][0] == share:
                end += 1
            group = [child for _, child in options[start:end]]
            start = end
            if len(group) == 1:
                if self.has_eligible(group[0]):
                    return group[0]
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

    def victim_at_level(self, level: int, on_path: int) -> Run | None:
        node = self.pick_child(c for c in self.ledger.children[level] if c != on_path)
        while node is not None and self.ledger.children[node]:
            node = self.pick_child(self.ledger.children[node])
        if node is None:
            return None
        return min(self.eligible_in_leaf(node), key=victim_order, default=None)

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
    ledger: Ledger, admitted: list[dict[str, Run]], x: Run, reclaim_policy: str, within_queue: str
) -> list[Run] | None:
    """The runs to evict, in order, so that `x` fits; None when no set of victims works."""
    plan = _Plan(ledger, admitted, x, reclaim_policy)
    try:
        plan.reclaim()
        if not plan.fits() and within_queue == "LowerPriority":
            plan.within_queue()
        if not plan.fits():
            return None
        plan.minimize()
        in_leaf = [v for v in plan.victims if v.leaf == x.leaf]
        if in_leaf and _borrows_more(ledger, x, in_leaf):
            return None
        return list(plan.victims)
    finally:
        for run in list(plan.victims):
            if run.id in plan.removed:
                plan.restore(run)


def _borrows_more(ledger: Ledger, x: Run, in_leaf: list[Run]) -> bool:
    """Whether x's leaf (its victims there already uncharged) borrows more of a requested
    non-count resource with x than it did before the plan: (after - min)⁺ > (before - min)⁺."""
    for resource, amount in x.request.items():
        if amount <= 0 or resource in COUNT_RESOURCES:
            continue
        minimum = ledger.mins[x.leaf].get(resource, 0)
        after = ledger.effective(x.leaf, resource) + amount
        before = ledger.effective(x.leaf, resource) + sum(
            v.request.get(resource, 0) for v in in_leaf
        )
        if max(after - minimum, 0) > max(before - minimum, 0):
            return True
    return False
