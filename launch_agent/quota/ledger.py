"""Per-node usage and reservations, and the predicates over them: fit (R3), guarantee (R4) and
borrowed share (R5).

Nodes are numbered in preorder so every per-node table is a list indexed by that number, and a
run's path (its leaf up to the root) is a tuple of numbers computed once. Quantities are integer
nanounits: every comparison is exact integer arithmetic, and the one ratio the rules need, the
borrowed share `b(n) = max_r (u(n)[r] - min(n)[r])⁺ / cap[r] / w(n)`, is kept as an integer
multiple of a common denominator, which is exact and cheap to compare.

"Usage" in the predicates is the *effective* usage: quota charged to admitted and still
terminating runs, plus quota reserved for preemptors whose victims are terminating (R10). The
charged part alone is what invariant I1 bounds by `max`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

from launch_agent.quota.tree import COUNT_RESOURCES, QuotaNode, QuotaTree

Vector = dict[str, int]


class Ledger:
    """The tree flattened into tables, with the usage of every node."""

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree
        self.nodes: list[QuotaNode] = list(tree.nodes())
        self.index = {node.name: i for i, node in enumerate(self.nodes)}
        self.parent = [-1] * len(self.nodes)
        self.children: list[list[int]] = [[] for _ in self.nodes]
        for i, node in enumerate(self.nodes):
            for child in node.children:
                c = self.index[child.name]
                self.parent[c] = i
                self.children[i].append(c)
        self.paths: list[tuple[int, ...]] = []
        for i in range(len(self.nodes)):
            path = [i]
            while self.parent[path[-1]] != -1:
                path.append(self.parent[path[-1]])
            self.paths.append(tuple(path))
        self.depth = [len(p) - 1 for p in self.paths]
        # Plain dict copies: compiled code (mypyc) reads a declared dict with direct C calls,
        # a Mapping through generic method lookups.
        self.mins: list[Vector] = [dict(n.min) for n in self.nodes]
        self.maxs: list[Vector] = [dict(n.max) for n in self.nodes]
        self.leaves = [i for i, n in enumerate(self.nodes) if n.is_leaf]
        self.cap = {r: q for r, q in tree.root.max.items() if q > 0}
        # Shares are exact rationals with the common denominator
        # D = lcm(cap) · lcm(weight numerators), so each is stored as the integer b·D:
        # b(n)·D = max_r excess_r · (D / (cap[r] · w(n))), and every factor is a whole number.
        # Comparing shares is then integer comparison, with no Fraction normalisation per use.
        cap_lcm = math.lcm(*self.cap.values()) if self.cap else 1
        weight_lcm = math.lcm(*(node.weight.numerator for node in self.nodes))
        self.share_denominator = cap_lcm * weight_lcm
        self.share_scale: list[dict[str, int]] = [
            {
                r: (cap_lcm // q) * node.weight.denominator * (weight_lcm // node.weight.numerator)
                for r, q in self.cap.items()
            }
            for node in self.nodes
        ]
        self.used: list[Vector] = [{} for _ in self.nodes]
        self.reserved: list[Vector] = [{} for _ in self.nodes]
        # used + reserved, kept alongside: every predicate reads it, one lookup per resource.
        self.eff: list[Vector] = [{} for _ in self.nodes]
        # max - eff for every resource with a max, kept alongside `eff`: the fit test (R3) is
        # the hottest predicate, and one lookup per resource there instead of two is a
        # measurable share of a decision on a full tree.
        self.room: list[Vector] = [dict(limits) for limits in self.maxs]
        # The (node, resource) pairs `blocking` returns, made once: a new tuple per call was
        # a measurable share of the garbage collector's work (it is called tens of times per
        # decision), and callers that keep a pair compare it by identity first.
        self.pairs: list[dict[str, tuple[int, str]]] = [
            {resource: (node, resource) for resource in limits}
            for node, limits in enumerate(self.maxs)
        ]
        # Per node, its share with nothing added and the resources it borrows: preemption
        # asks for them of every sibling at each level, while usage changes on one path at a
        # time. Dropped for the nodes of a path whenever usage on it changes.
        # Lists with None for "not known", reset per node of a changed path.
        self._share_now: list[int | None] = [None] * len(self.nodes)
        self._borrowed: list[frozenset[str] | None] = [None] * len(self.nodes)

    # --- bookkeeping ------------------------------------------------------------------------

    def charge(self, path: tuple[int, ...], request: Mapping[str, int], sign: int) -> None:
        self._apply(self.used, path, request, sign)

    def reserve(self, path: tuple[int, ...], request: Mapping[str, int], sign: int) -> None:
        self._apply(self.reserved, path, request, sign)

    def shift(self, path: tuple[int, ...], request: Mapping[str, int], sign: int) -> None:
        """Move only the effective usage, for a tentative change that is undone before
        anything reads `used` (preemption planning)."""
        self._apply(None, path, request, sign)

    def _apply(
        self,
        table: list[Vector] | None,
        path: tuple[int, ...],
        request: Mapping[str, int],
        sign: int,
    ) -> None:
        """Add `sign · request` to `table` (used or reserved), the effective usage and the
        room of every node on `path`, and forget their cached shares: one walk of the path,
        the request's items read once."""
        items = [(resource, sign * amount) for resource, amount in request.items()]
        effs, rooms = self.eff, self.room
        share_now, borrowed = self._share_now, self._borrowed
        for node in path:
            if table is not None:
                _add_row(table[node], items)
            _add_row(effs[node], items)
            room = rooms[node]
            for resource, delta in items:
                if resource in room:
                    room[resource] -= delta
            share_now[node] = None
            borrowed[node] = None

    def effective(self, node: int, resource: str) -> int:
        return self.eff[node].get(resource, 0)

    # --- predicates -------------------------------------------------------------------------

    def blocking(
        self, path: tuple[int, ...], request: Mapping[str, int], *, counts: bool = True
    ) -> tuple[int, str] | None:
        """The first (node, resource) on `path` where `request` does not fit (R3), or None."""
        items = (
            list(request.items())
            if counts
            else [(r, a) for r, a in request.items() if r not in COUNT_RESOURCES]
        )
        rooms = self.room
        for node in path:
            room = rooms[node]
            for resource, amount in items:
                if resource in room and amount > room[resource]:
                    return self.pairs[node][resource]
        return None

    def fits(self, path: tuple[int, ...], request: Mapping[str, int]) -> bool:
        return self.blocking(path, request) is None

    def within_min(self, node: int, request: Mapping[str, int]) -> bool:
        """R4 at one node: every requested non-count resource stays within the node's min."""
        minima = self.mins[node]
        effective = self.eff[node]
        counts = COUNT_RESOURCES
        for resource, amount in request.items():
            if amount <= 0 or resource in counts:
                continue
            if effective.get(resource, 0) + amount > minima.get(resource, 0):
                return False
        return True

    def guarantee_top(self, path: tuple[int, ...], request: Mapping[str, int]) -> int | None:
        """A*(x) as a position in `path`: the highest ancestor A with G(x, A), or None when
        even G(x, parent(leaf)) fails (the run is borrowing and may not reclaim)."""
        if len(path) < 2 or not self.within_min(path[0], request):
            return None
        for position in range(1, len(path)):
            if position == len(path) - 1 or not self.within_min(path[position], request):
                return position
        return len(path) - 1  # pragma: no cover - the loop always returns

    def borrows_on(self, node: int, resources: frozenset[str]) -> bool:
        """R5: the node uses more than its min of one of `resources`."""
        borrowed = self._borrowed[node]
        if borrowed is None:
            minima = self.mins[node]
            borrowed = self._borrowed[node] = frozenset(
                r for r, amount in self.eff[node].items() if amount > minima.get(r, 0)
            )
        return not borrowed.isdisjoint(resources)

    def share(self, node: int, extra: Mapping[str, int] | None = None) -> int:
        """R5: the node's weighted borrowed share, with `extra` added to its usage, as the
        integer `b · share_denominator` (exact; see `share_fraction`)."""
        if not extra:
            known = self._share_now[node]
            if known is None:
                known = self._share_now[node] = self._share(node, None)
            return known
        return self._share(node, extra)

    def _share(self, node: int, extra: Mapping[str, int] | None) -> int:
        best = 0
        minima = self.mins[node]
        effective = self.eff[node]
        for resource, scale in self.share_scale[node].items():
            excess = effective.get(resource, 0) - minima.get(resource, 0)
            if extra:
                excess += extra.get(resource, 0)
            if excess > 0:
                value = excess * scale
                # Not max(): a builtin call per resource, where compiled code compares ints.
                best = value if value > best else best
        return best

    def share_fraction(self, node: int, extra: Mapping[str, int] | None = None) -> Fraction:
        return Fraction(self.share(node, extra), self.share_denominator)


def _add_row(row: Vector, items: list[tuple[str, int]]) -> None:
    """Add signed amounts to one node's vector, dropping entries that reach zero."""
    for resource, delta in items:
        value = row.get(resource, 0) + delta
        if value:
            row[resource] = value
        else:
            row.pop(resource, None)
