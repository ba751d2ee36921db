"""The quota tree: its file format, its validation (rule R1) and the immutable model it becomes.

The same mapping is read from `quota simulate --tree TREE.yaml` and from `quota.tree` in
launch-config.yaml:

    reclaimPolicy: Any            # or LowerPriority (R7)
    instantTermination: true      # false: evicted runs stay charged until they terminate (R10)
    preemptionTimeout: 5m         # optional: how long freed quota stays reserved (R10)
    readyTimeout: 10m             # optional: evict runs not ready in time (R11)
    backoffBase: 60s              # R11 backoff base, doubled per attempt ...
    backoffMax: 1h                # ... and capped here
    backoffLimit: 5               # readiness timeouts after which a run fails
    blockAdmissionUntilReady: false
    root:
      name: root
      min: {cpu: 40}
      max: {cpu: 40, runs: 10}
      children:
        - {name: a, min: {cpu: 20}, max: {cpu: 40}, weight: 1, queues: [q1],
           withinQueue: Never, strictAfter: 30m}

Validation never stops at the first problem: `validate_tree` returns every problem, each with
its path in the file (`root.children[1].min.cpu`) and a reason, and `parse_tree` raises
`TreeError` carrying all of them. A tree with any problem is rejected as a whole (R1), so the
caller keeps the previous tree.

Quantities become integer nanounits (`launch_agent.model.quantity.to_nanos`), so the engine's
arithmetic is exact integer arithmetic. Managed resources are the root's `max` keys (the
cluster's capacity, `cap[r]`) plus the count resources `runs` and `sweep_schedulers` wherever
they appear; a non-count resource that the root does not declare is an error, because it would
have no capacity to share against (and is most often a typo).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction

from launch_agent.model.quantity import QuantityError, format_nanos, parse_quantity, to_nanos

COUNT_RESOURCES = frozenset({"runs", "sweep_schedulers"})
RECLAIM_POLICIES = ("Any", "LowerPriority")
WITHIN_QUEUE_POLICIES = ("Never", "LowerPriority")
DEFAULT_STRICT_AFTER = Fraction(30 * 60)

_TREE_KEYS = {
    "reclaimPolicy",
    "instantTermination",
    "preemptionTimeout",
    "readyTimeout",
    "backoffBase",
    "backoffMax",
    "backoffLimit",
    "blockAdmissionUntilReady",
    "root",
}
_NODE_KEYS = {"name", "min", "max", "weight", "children", "queues", "withinQueue", "strictAfter"}
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)(ms|h|m|s))+$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_SECONDS = {"h": Fraction(3600), "m": Fraction(60), "s": Fraction(1), "ms": Fraction(1, 1000)}
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*)?$")


@dataclass(frozen=True)
class TreeProblem:
    """One thing wrong with a tree: where (a path in the file) and why."""

    path: str
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"

    def key(self, prefix: str) -> str:
        """The problem's path under the key the tree is configured at (e.g. `quota.tree`)."""
        return f"{prefix}.{self.path}" if self.path else prefix


class TreeError(ValueError):
    """An invalid tree; `problems` lists every problem found, not only the first."""

    def __init__(self, problems: list[TreeProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(str(p) for p in problems))


@dataclass(frozen=True)
class QuotaNode:
    """One node. Quantities are integer nanounits; a resource absent from `max` is unbounded."""

    name: str
    min: Mapping[str, int]
    max: Mapping[str, int]
    weight: Fraction = Fraction(1)
    children: tuple[QuotaNode, ...] = ()
    queues: tuple[str, ...] = ()
    within_queue: str = "Never"
    strict_after: Fraction | None = DEFAULT_STRICT_AFTER
    location: str = "root"

    @property
    def is_leaf(self) -> bool:
        return not self.children


@dataclass(frozen=True)
class QuotaTree:
    """A validated tree and the policies that apply to all of it."""

    root: QuotaNode
    reclaim_policy: str = "Any"
    instant_termination: bool = True
    preemption_timeout: Fraction | None = None
    ready_timeout: Fraction | None = None
    backoff_base: Fraction = Fraction(60)
    backoff_max: Fraction = Fraction(3600)
    backoff_limit: int = 5
    block_admission_until_ready: bool = False
    resources: tuple[str, ...] = field(default=())

    def nodes(self) -> Iterator[QuotaNode]:
        """Every node, parents before children, in file order."""
        stack = [self.root]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def leaf_of_queue(self) -> dict[str, QuotaNode]:
        return {queue: node for node in self.nodes() for queue in node.queues}


def parse_duration(value: object) -> Fraction:
    """`90`, `90s`, `30m`, `1h30m`, `500ms` → seconds. Raises ValueError with the reason."""
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 30m, 90s or 1h30m, got {value!r}")
    if isinstance(value, int | float):
        seconds = parse_quantity(value)
    elif isinstance(value, str) and _DURATION.match(value.strip()):
        seconds = sum(
            (Fraction(n) * _UNIT_SECONDS[u] for n, u in _DURATION_PART.findall(value.strip())),
            Fraction(0),
        )
    else:
        raise ValueError(f"expected a duration like 30m, 90s or 1h30m, got {value!r}")
    if seconds < 0:
        raise ValueError(f"a duration cannot be negative, got {value!r}")
    return seconds


class _Reader:
    """Collects problems while reading; every read returns a usable default after a problem."""

    def __init__(self) -> None:
        self.problems: list[TreeProblem] = []

    def problem(self, path: str, reason: str) -> None:
        self.problems.append(TreeProblem(path, reason))

    def keys(self, data: Mapping[str, object], allowed: set[str], path: str) -> None:
        for key in data:
            if key not in allowed:
                self.problem(
                    f"{path}.{key}", f"unknown key; expected one of {', '.join(sorted(allowed))}"
                )

    def choice(
        self, data: Mapping[str, object], key: str, path: str, options: tuple[str, ...]
    ) -> str:
        value = data.get(key, options[0])
        if value not in options:
            self.problem(f"{path}.{key}", f"must be one of {', '.join(options)}, got {value!r}")
            return options[0]
        return str(value)

    def boolean(self, data: Mapping[str, object], key: str, path: str, default: bool) -> bool:
        value = data.get(key, default)
        if not isinstance(value, bool):
            self.problem(f"{path}.{key}", f"must be true or false, got {value!r}")
            return default
        return value

    def duration(
        self, data: Mapping[str, object], key: str, path: str, default: Fraction | None
    ) -> Fraction | None:
        if key not in data or data[key] is None:
            return default
        if data[key] == "never":
            return None
        try:
            return parse_duration(data[key])
        except ValueError as exc:
            self.problem(f"{path}.{key}", str(exc))
            return default

    def resources(self, data: object, path: str) -> dict[str, int]:
        if data is None:
            return {}
        if not isinstance(data, Mapping):
            self.problem(path, f"must be a mapping of resource to quantity, got {data!r}")
            return {}
        out: dict[str, int] = {}
        for name, raw in data.items():
            where = f"{path}.{name}"
            if not isinstance(name, str) or not _RESOURCE_NAME.match(name):
                self.problem(where, f"{name!r} is not a resource name")
                continue
            try:
                value = parse_quantity(raw)
            except QuantityError as exc:
                self.problem(where, str(exc))
                continue
            if value < 0:
                self.problem(where, f"must not be negative, got {raw!r}")
                continue
            if name in COUNT_RESOURCES and value.denominator != 1:
                self.problem(where, f"{name} counts runs and must be a whole number, got {raw!r}")
                continue
            out[name] = to_nanos(value)
        return out


def validate_tree(data: object) -> list[TreeProblem]:
    """Every problem with a tree mapping (TREE.yaml or `quota.tree`); empty when it is valid."""
    return _read(data)[1]


def parse_tree(data: object) -> QuotaTree:
    """The tree of a mapping, or `TreeError` listing every problem (R1: all or nothing)."""
    tree, problems = _read(data)
    if problems or tree is None:
        raise TreeError(problems or [TreeProblem("(tree)", "empty")])
    return tree


def _read(data: object) -> tuple[QuotaTree | None, list[TreeProblem]]:
    reader = _Reader()
    if not isinstance(data, Mapping):
        reader.problem("(tree)", f"must be a mapping with a `root` node, got {data!r}")
        return None, reader.problems
    reader.keys(data, _TREE_KEYS, "(tree)")
    if "root" not in data:
        reader.problem("root", "missing: the tree needs a root node")
        return None, reader.problems
    seen_names: dict[str, str] = {}
    seen_queues: dict[str, str] = {}
    root = _node(reader, data["root"], "root", seen_names, seen_queues)
    limit = data.get("backoffLimit", 5)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        reader.problem("backoffLimit", f"must be a whole number >= 0, got {limit!r}")
        limit = 5
    tree = QuotaTree(
        root=root if root is not None else QuotaNode("root", {}, {}),
        reclaim_policy=reader.choice(data, "reclaimPolicy", "(tree)", RECLAIM_POLICIES),
        instant_termination=reader.boolean(data, "instantTermination", "(tree)", True),
        preemption_timeout=reader.duration(data, "preemptionTimeout", "(tree)", None),
        ready_timeout=reader.duration(data, "readyTimeout", "(tree)", None),
        backoff_base=reader.duration(data, "backoffBase", "(tree)", Fraction(60)) or Fraction(60),
        backoff_max=reader.duration(data, "backoffMax", "(tree)", Fraction(3600)) or Fraction(3600),
        backoff_limit=limit,
        block_admission_until_ready=reader.boolean(
            data, "blockAdmissionUntilReady", "(tree)", False
        ),
    )
    # Tree-level keys were reported with a "(tree)." prefix; the file's paths have none.
    reader.problems = [
        TreeProblem(p.path.removeprefix("(tree)."), p.reason) for p in reader.problems
    ]
    if root is not None:
        _check_rules(reader, root)
    if reader.problems:
        return None, reader.problems
    counts = {r for node in tree.nodes() for r in node.max if r in COUNT_RESOURCES}
    resources = tuple(sorted(set(tree.root.max) | counts))
    return replace(tree, resources=resources), []


def _node(
    reader: _Reader,
    data: object,
    path: str,
    seen_names: dict[str, str],
    seen_queues: dict[str, str],
) -> QuotaNode | None:
    if not isinstance(data, Mapping):
        reader.problem(path, f"must be a mapping (a quota node), got {data!r}")
        return None
    reader.keys(data, _NODE_KEYS, path)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        reader.problem(f"{path}.name", f"every node needs a non-empty name, got {name!r}")
        name = path
    elif name in seen_names:
        reader.problem(f"{path}.name", f"duplicate node name {name!r} (also at {seen_names[name]})")
    else:
        seen_names[name] = path
    minimum = reader.resources(data.get("min"), f"{path}.min")
    maximum = reader.resources(data.get("max"), f"{path}.max")
    weight = Fraction(1)
    if "weight" in data:
        try:
            weight = parse_quantity(data["weight"])
        except QuantityError as exc:
            reader.problem(f"{path}.weight", str(exc))
        if weight <= 0:
            reader.problem(f"{path}.weight", f"must be greater than 0, got {data['weight']!r}")
            weight = Fraction(1)
    raw_children = data.get("children") or []
    children: list[QuotaNode] = []
    if not isinstance(raw_children, list):
        reader.problem(f"{path}.children", f"must be a list of nodes, got {raw_children!r}")
        raw_children = []
    for index, raw_child in enumerate(raw_children):
        child = _node(reader, raw_child, f"{path}.children[{index}]", seen_names, seen_queues)
        if child is not None:
            children.append(child)
    queues: list[str] = []
    raw_queues = data.get("queues") or []
    if not isinstance(raw_queues, list):
        reader.problem(f"{path}.queues", f"must be a list of queue names, got {raw_queues!r}")
        raw_queues = []
    if raw_queues and raw_children:
        reader.problem(f"{path}.queues", "only leaves hold queues; this node has children")
    for index, queue in enumerate(raw_queues):
        where = f"{path}.queues[{index}]"
        if not isinstance(queue, str) or not queue:
            reader.problem(where, f"must be a queue name, got {queue!r}")
        elif queue in seen_queues:
            reader.problem(
                where, f"queue {queue!r} is already mapped to a leaf at {seen_queues[queue]}"
            )
        else:
            seen_queues[queue] = path
            queues.append(queue)
    for key in ("withinQueue", "strictAfter"):
        if key in data and raw_children:
            reader.problem(f"{path}.{key}", "is a leaf setting; this node has children")
    return QuotaNode(
        name=name,
        min=minimum,
        max=maximum,
        weight=weight,
        children=tuple(children),
        queues=tuple(queues),
        within_queue=reader.choice(data, "withinQueue", path, WITHIN_QUEUE_POLICIES),
        strict_after=reader.duration(data, "strictAfter", path, DEFAULT_STRICT_AFTER),
        location=path,
    )


def _show(nanos: int) -> str:
    return format_nanos(nanos)


def _check_rules(reader: _Reader, root: QuotaNode) -> None:
    """R1 and the resource rules, on a tree whose shape has been read."""
    capacity = set(root.max)
    for resource in sorted(set(root.min) | set(root.max)):
        if resource in COUNT_RESOURCES:
            continue
        if root.min.get(resource, 0) != root.max.get(resource):
            shown_max = _show(root.max[resource]) if resource in root.max else "unbounded"
            reader.problem(
                f"root.min.{resource}" if resource in root.min else f"root.max.{resource}",
                f"the root's min must equal its max (the cluster's capacity): min"
                f" {_show(root.min.get(resource, 0))} != max {shown_max}",
            )
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.children)
        for resource in sorted(node.min):
            if resource in COUNT_RESOURCES:
                reader.problem(
                    f"{node.location}.min.{resource}",
                    f"{resource} is a count resource and has no min (R12); set only its max",
                )
        for part, values in (("min", node.min), ("max", node.max)):
            for resource in sorted(values):
                if resource not in COUNT_RESOURCES and resource not in capacity:
                    reader.problem(
                        f"{node.location}.{part}.{resource}",
                        f"resource {resource!r} is not declared in the root's max, which sets"
                        " the capacity every share is measured against",
                    )
        for resource in sorted(node.min):
            if resource in node.max and node.min[resource] > node.max[resource]:
                reader.problem(
                    f"{node.location}.min.{resource}",
                    f"min {_show(node.min[resource])} is greater than max"
                    f" {_show(node.max[resource])} on node {node.name!r}",
                )
        if node.children:
            for resource in sorted({r for c in node.children for r in c.min}):
                if resource in COUNT_RESOURCES:
                    continue
                total = sum(c.min.get(resource, 0) for c in node.children)
                if total > node.min.get(resource, 0):
                    reader.problem(
                        f"{node.location}.min.{resource}",
                        f"the children of {node.name!r} guarantee {_show(total)} {resource} in"
                        f" total, more than its own min {_show(node.min.get(resource, 0))}",
                    )
