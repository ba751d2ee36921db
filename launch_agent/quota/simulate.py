"""`quota simulate`: apply an EVENTS.yaml to a TREE.yaml and report the state after each event.

Pure: it takes the already-parsed YAML documents and returns one report per event, or raises
`SimulationError` listing every problem with its document (`tree` or `events`), path and reason.
Event files are checked completely before anything runs, so a typo in event 40 is reported
without printing 39 reports first; problems that only show while running (finishing a run that
was never submitted) stop the simulation at that event.

    - submit: {run: q1-r1, queue: q1, priority: 0, scheduler: false, ready: true,
               pods: [{count: 1, requests: {cpu: 5}}]}
    - submit: {runs: [{run: ..., queue: ..., pods: [...]}, ...]}   # one cycle for all
    - finish: {run: q1-r1}
    - ready: {run: q1-r1}
    - terminated: {run: q1-r1}
    - advance: {seconds: 60}

Report: `{"event": N, "running": [...], "pending": [...], "evicting": [...],
"inadmissible": [...], "evicted": [...], "usage": {node: {resource: quantity}}}`; lists are
sorted by name except `evicted` (eviction order); finished and failed runs are omitted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from launch_agent.model.quantity import QuantityError, format_nanos, parse_quantity, to_nanos
from launch_agent.quota.engine import AdmissionEngine, EngineError
from launch_agent.quota.runs import RUNNING_STATES, PodSet, RunSpec, RunState
from launch_agent.quota.tree import COUNT_RESOURCES, TreeError, parse_tree

EVENT_KINDS = ("submit", "finish", "ready", "terminated", "advance")
_RUN_KEYS = {"run", "queue", "priority", "scheduler", "ready", "pods"}


@dataclass(frozen=True)
class Problem:
    document: str  # "tree" or "events"
    path: str
    reason: str


class SimulationError(ValueError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("; ".join(f"{p.document}: {p.path}: {p.reason}" for p in problems))


@dataclass(frozen=True)
class Event:
    kind: str
    path: str  # `[N].kind`, for errors found while running
    runs: tuple[RunSpec, ...] = ()
    run: str = ""
    seconds: Fraction = Fraction(0)


def simulate(tree_data: object, events_data: object) -> list[dict[str, Any]]:
    """One report per event; `SimulationError` on any problem in either document."""
    try:
        tree = parse_tree(tree_data)
    except TreeError as exc:
        raise SimulationError([Problem("tree", p.path, p.reason) for p in exc.problems]) from None
    events = parse_events(events_data)
    engine = AdmissionEngine(tree)
    reports = []
    for index, event in enumerate(events):
        try:
            decisions = _apply(engine, event)
        except EngineError as exc:
            where = f"{event.path}.run" if event.kind != "advance" else event.path
            raise SimulationError([Problem("events", where, str(exc))]) from None
        evicted = [d.run for d in decisions if d.action == "evict"]
        reports.append(report(engine, index, evicted))
    return reports


def _apply(engine: AdmissionEngine, event: Event) -> list[Any]:
    if event.kind == "submit":
        for spec in event.runs:
            engine.submit(spec)
    elif event.kind == "finish":
        engine.finish(event.run)
    elif event.kind == "ready":
        engine.mark_ready(event.run)
    elif event.kind == "terminated":
        engine.terminated(event.run)
    else:
        return engine.advance(engine.now + event.seconds)
    return engine.cycle()


def report(engine: AdmissionEngine, index: int, evicted: list[str]) -> dict[str, Any]:
    """The state after one event, in the output format of `quota simulate`."""

    def names(*states: RunState) -> list[str]:
        return sorted(run.id for run in engine.in_state(*states))

    ledger = engine.ledger
    return {
        "event": index,
        "running": names(*RUNNING_STATES),
        "pending": names(RunState.PENDING),
        "evicting": names(RunState.EVICTING),
        "inadmissible": names(RunState.INADMISSIBLE),
        "evicted": evicted,
        "usage": {
            node.name: {r: format_nanos(ledger.used[i].get(r, 0)) for r in engine.tree.resources}
            for i, node in enumerate(ledger.nodes)
        },
    }


def parse_events(data: object) -> list[Event]:
    """Every event of an EVENTS.yaml document, or `SimulationError` with every problem."""
    problems: list[Problem] = []
    events: list[Event] = []

    def bad(path: str, reason: str) -> None:
        problems.append(Problem("events", path, reason))

    if data is None:
        data = []
    if not isinstance(data, list):
        raise SimulationError([Problem("events", "(document)", "must be a list of events")])
    for index, item in enumerate(data):
        where = f"[{index}]"
        if not isinstance(item, Mapping) or len(item) != 1:
            bad(where, f"each event is a mapping with exactly one of {', '.join(EVENT_KINDS)}")
            continue
        ((kind, body),) = item.items()
        path = f"{where}.{kind}"
        if kind not in EVENT_KINDS:
            bad(path, f"unknown event; expected one of {', '.join(EVENT_KINDS)}")
            continue
        if not isinstance(body, Mapping):
            bad(path, f"must be a mapping, got {body!r}")
            continue
        if kind == "submit":
            specs = _submit(body, path, bad)
            if specs is not None:
                events.append(Event(kind, path, runs=specs))
        elif kind == "advance":
            seconds = _seconds(body, path, bad)
            if seconds is not None:
                events.append(Event(kind, path, seconds=seconds))
        else:
            if set(body) != {"run"} or not isinstance(body["run"], str) or not body["run"]:
                bad(path, f"expected {{run: NAME}}, got {dict(body)!r}")
                continue
            events.append(Event(kind, path, run=body["run"]))
    if problems:
        raise SimulationError(problems)
    return events


def _seconds(body: Mapping[str, object], path: str, bad: Any) -> Fraction | None:
    if set(body) != {"seconds"}:
        bad(path, f"expected {{seconds: N}}, got {dict(body)!r}")
        return None
    raw = body["seconds"]
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        bad(f"{path}.seconds", f"must be a number of seconds, got {raw!r}")
        return None
    seconds = parse_quantity(raw)
    if seconds < 0:
        bad(f"{path}.seconds", f"time only moves forward, got {raw!r}")
        return None
    return seconds


def _submit(body: Mapping[str, object], path: str, bad: Any) -> tuple[RunSpec, ...] | None:
    if "runs" in body:
        if set(body) != {"runs"} or not isinstance(body["runs"], list) or not body["runs"]:
            bad(path, "a batch is {runs: [RUN, ...]} with at least one run and nothing else")
            return None
        items = [(f"{path}.runs[{i}]", item) for i, item in enumerate(body["runs"])]
    else:
        items = [(path, body)]
    specs = []
    for where, item in items:
        spec = _run(item, where, bad)
        if spec is not None:
            specs.append(spec)
    return tuple(specs) if len(specs) == len(items) else None


def _run(item: object, path: str, bad: Any) -> RunSpec | None:
    if not isinstance(item, Mapping):
        bad(path, f"a run must be a mapping, got {item!r}")
        return None
    ok = True
    for key in item:
        if key not in _RUN_KEYS:
            bad(f"{path}.{key}", f"unknown key; expected one of {', '.join(sorted(_RUN_KEYS))}")
            ok = False
    for key in ("run", "queue"):
        if not isinstance(item.get(key), str) or not item.get(key):
            bad(f"{path}.{key}", f"required: a non-empty name, got {item.get(key)!r}")
            ok = False
    priority = item.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        bad(f"{path}.priority", f"must be an integer (higher is more important), got {priority!r}")
        ok = False
    for key in ("scheduler", "ready"):
        if key in item and not isinstance(item[key], bool):
            bad(f"{path}.{key}", f"must be true or false, got {item[key]!r}")
            ok = False
    pods = item.get("pods")
    pod_sets = []
    if not isinstance(pods, list) or not pods:
        bad(f"{path}.pods", "required: a list of pod sets like [{count: 1, requests: {cpu: 5}}]")
        ok = False
        pods = []
    for index, pod in enumerate(pods):
        pod_set = _pod_set(pod, f"{path}.pods[{index}]", bad)
        if pod_set is None:
            ok = False
        else:
            pod_sets.append(pod_set)
    if not ok:
        return None
    return RunSpec(
        id=str(item["run"]),
        queue=str(item["queue"]),
        pod_sets=tuple(pod_sets),
        priority=int(priority),
        scheduler=bool(item.get("scheduler", False)),
        ready_on_admission=bool(item.get("ready", True)),
    )


def _pod_set(pod: object, path: str, bad: Any) -> PodSet | None:
    if not isinstance(pod, Mapping) or set(pod) - {"count", "requests"}:
        bad(path, f"a pod set is {{count: N, requests: {{cpu: 5}}}}, got {pod!r}")
        return None
    count = pod.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        bad(f"{path}.count", f"must be a whole number >= 1, got {count!r}")
        return None
    raw = pod.get("requests") or {}
    if not isinstance(raw, Mapping):
        bad(f"{path}.requests", f"must be a mapping of resource to quantity, got {raw!r}")
        return None
    requests: dict[str, int] = {}
    for resource, value in raw.items():
        where = f"{path}.requests.{resource}"
        if resource in COUNT_RESOURCES:
            bad(where, f"{resource} is counted by the engine (1 per run); do not request it")
            return None
        try:
            quantity = parse_quantity(value)
        except QuantityError as exc:
            bad(where, str(exc))
            return None
        if quantity < 0:
            bad(where, f"must not be negative, got {value!r}")
            return None
        requests[str(resource)] = to_nanos(quantity)
    return PodSet(count, requests)
