"""Invariants of quota-admission.md §5.3 over random trees and random event sequences,
checked after every event: I1 safety, I2 atomicity, I4 no ping-pong, I6 determinism, I7 work
conservation. I6 is checked twice: replaying the events gives the same decisions, and so does
the engine's exhaustive reference mode (every leaf re-examined, every preemption planned in
full), which also checks the incremental bookkeeping against a from-scratch computation."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from launch_agent.commands import bench_quota
from launch_agent.quota import AdmissionEngine, PodSet, QuotaTree, RunSpec, RunState, parse_tree
from launch_agent.quota.runs import RUNNING_STATES
from tests.unit.quota.helpers import ack_tree_within

G = 10**9
Event = tuple[str, Any]


@st.composite
def trees(draw: st.DrawFn) -> dict[str, Any]:
    cpu = draw(st.integers(4, 40))
    gpu = draw(st.sampled_from([0, 0, 4, 8]))
    counter = iter(range(1000))

    def node(minimum: dict[str, int], depth: int) -> dict[str, Any]:
        name = f"n{next(counter)}"
        spec: dict[str, Any] = {"name": name, "min": dict(minimum)}
        spec["max"] = {
            r: v + draw(st.integers(0, cpu if r == "cpu" else 8)) for r, v in minimum.items()
        }
        if draw(st.booleans()):
            spec["weight"] = draw(st.sampled_from([1, 2, "0.5"]))
        fanout = draw(st.integers(2 if depth == 0 else 0, 3)) if depth < 3 else 0
        if fanout == 0:
            spec["queues"] = [f"q{name}"]
            spec["withinQueue"] = draw(st.sampled_from(["Never", "Never", "LowerPriority"]))
            spec["strictAfter"] = draw(st.sampled_from(["30m", "60s", "0s", "never"]))
            if draw(st.integers(0, 4)) == 0:
                spec["max"]["runs"] = draw(st.integers(1, 3))
            return spec
        children = []
        left = dict(minimum)
        for index in range(fanout):
            # Mostly hand out the whole min (the ACK set-up, where reclaim matters most).
            last_child = index == fanout - 1 and draw(st.integers(0, 3)) > 0
            share = {r: left[r] if last_child else draw(st.integers(0, left[r])) for r in left}
            for r in left:
                left[r] -= share[r]
            children.append(node(share, depth + 1))
        spec["children"] = children
        return spec

    capacity = {"cpu": cpu, **({"nvidia.com/gpu": gpu} if gpu else {})}
    root = node(capacity, 0)
    root["max"] = dict(capacity)
    if draw(st.booleans()):
        root["max"]["runs"] = draw(st.integers(2, 12))
    return {
        "reclaimPolicy": draw(st.sampled_from(["Any", "Any", "LowerPriority"])),
        "instantTermination": draw(st.booleans()),
        "readyTimeout": draw(st.sampled_from([None, "120s"])),
        "backoffBase": "30s",
        "backoffLimit": draw(st.integers(0, 2)),
        "preemptionTimeout": draw(st.sampled_from([None, "90s"])),
        "root": root,
    }


def apply(engine: AdmissionEngine, event: Event) -> list[tuple[str, str, str]]:
    kind, value = event
    if kind == "submit":
        for spec in value:
            engine.submit(spec)
    elif kind == "finish":
        engine.finish(value)
    elif kind == "ready":
        engine.mark_ready(value)
    elif kind == "terminated":
        engine.terminated(value)
    else:
        return [(d.action, d.run, d.reason) for d in engine.advance(engine.now + value)]
    return [(d.action, d.run, d.reason) for d in engine.cycle()]


@st.composite
def run_specs(draw: st.DrawFn, tree: QuotaTree, first: int) -> list[RunSpec]:
    queues = sorted(tree.leaf_of_queue())
    gpu = "nvidia.com/gpu" in tree.resources
    specs = []
    for i in range(draw(st.integers(1, 3))):
        pods = []
        for _ in range(draw(st.integers(1, 2))):
            requests = {"cpu": draw(st.sampled_from([G // 2, G, 2 * G, 3 * G, 5 * G]))}
            if gpu and draw(st.booleans()):
                requests["nvidia.com/gpu"] = draw(st.integers(1, 2)) * G
            pods.append(PodSet(draw(st.integers(1, 3)), requests))
        specs.append(
            RunSpec(
                id=f"r{first + i}",
                queue=draw(st.sampled_from(queues)),
                pod_sets=tuple(pods),
                priority=draw(st.integers(0, 2)),
                scheduler=draw(st.integers(0, 5)) == 0,
                ready_on_admission=draw(st.integers(0, 3)) > 0,
            )
        )
    return specs


def check_invariants(engine: AdmissionEngine, decisions: list[tuple[str, str, str]]) -> None:
    ledger = engine.ledger
    # I1: charged usage never exceeds any max.
    for node, used in enumerate(ledger.used):
        for resource, amount in used.items():
            ceiling = ledger.maxs[node].get(resource)
            assert ceiling is None or amount <= ceiling, (ledger.nodes[node].name, resource)
    # I2: usage is exactly the sum of whole requests of charged runs (all pods or none), and a
    # request is the sum over all pod sets.
    expected: list[dict[str, int]] = [{} for _ in ledger.nodes]
    for run in engine.runs.values():
        whole: dict[str, int] = {}
        for pod_set in run.spec.pod_sets:
            for resource, amount in pod_set.requests.items():
                if resource in engine.tree.resources:
                    whole[resource] = whole.get(resource, 0) + pod_set.count * amount
        count = "sweep_schedulers" if run.spec.scheduler else "runs"
        if count in engine.tree.resources:
            whole[count] = G
        assert run.request == whole
        if run.state in RUNNING_STATES or run.state is RunState.EVICTING:
            for node in ledger.paths[run.leaf]:
                for resource, amount in run.request.items():
                    expected[node][resource] = expected[node].get(resource, 0) + amount
    assert [{r: v for r, v in e.items() if v} for e in expected] == ledger.used
    # I4: a run evicted by reclaim does not, in the same event, reclaim from the leaf of the
    # run that evicted it.
    reclaimed_by: dict[str, str] = {}
    for action, victim, reason in decisions:
        if action != "evict" or not reason.startswith("reclaimed by "):
            continue
        preemptor = reason.removeprefix("reclaimed by ")
        if preemptor in reclaimed_by:
            original = reclaimed_by[preemptor]
            assert victim != original
            assert engine.runs[victim].leaf != engine.runs[original].leaf, (victim, preemptor)
        reclaimed_by[victim] = preemptor
    # I7: no leaf outside Strict has an eligible pending run that fits (reserved quota counts).
    for leaf in ledger.leaves:
        leaf_node = ledger.nodes[leaf]
        eligible = [
            run
            for run in engine.in_state(RunState.PENDING)
            if run.leaf == leaf
            and run.reserved_at is None
            and (run.not_before is None or run.not_before <= engine.now)
        ]
        if not eligible:
            continue
        head = min(eligible, key=lambda r: r.order)
        strict_after = leaf_node.strict_after
        if strict_after is not None and engine.now - head.enqueued[0] >= strict_after:
            continue
        for run in eligible:
            assert not ledger.fits(ledger.paths[leaf], run.request), (
                run.id,
                engine.explain(run.id),
            )


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tree_data=trees(), data=st.data())
def test_invariants_hold_after_every_event(tree_data: dict[str, Any], data: st.DataObject) -> None:
    run_and_check(parse_tree(tree_data), data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["Any", "LowerPriority"]),
    instant=st.booleans(),
    within=st.sampled_from(["Never", "LowerPriority"]),
    data=st.data(),
)
def test_invariants_hold_on_the_ack_tree(
    policy: str, instant: bool, within: str, data: st.DataObject
) -> None:
    """The S1 tree, where every leaf guarantees its min: reclaim happens all the time."""
    tree_data = ack_tree_within(within, reclaimPolicy=policy, instantTermination=instant)
    run_and_check(parse_tree(tree_data), data)


def run_and_check(tree: QuotaTree, data: st.DataObject) -> None:
    engine = AdmissionEngine(tree)
    events: list[Event] = []
    outcomes: list[list[tuple[str, str, str]]] = []
    submitted = 0
    for _ in range(data.draw(st.integers(1, 40), label="events")):
        live = [
            r.id
            for r in engine.runs.values()
            if r.state not in (RunState.FINISHED, RunState.FAILED)
        ]
        admitted = [r.id for r in engine.in_state(RunState.ADMITTED)]
        evicting = [r.id for r in engine.in_state(RunState.EVICTING)]
        kinds = ["submit", "submit", "submit", "advance"]
        kinds += (
            ["finish"] * bool(live)
            + ["ready"] * bool(admitted)
            + ["terminated", "terminated"] * bool(evicting)
        )
        kind = data.draw(st.sampled_from(kinds), label="kind")
        pools = {"finish": sorted(live), "ready": sorted(admitted), "terminated": sorted(evicting)}
        step, submitted = draw_step(data, tree, kind, submitted, pools, [1, 30, 60, 200])
        decisions = apply(engine, step)
        events.append(step)
        outcomes.append(decisions)
        check_invariants(engine, decisions)
        for action, _, reason in decisions:
            event(f"{action}: {reason.split(' ')[0] if action == 'evict' else 'any'}")
    # I6: the same events give the same decisions, incrementally and from scratch.
    for replay in (AdmissionEngine(tree), AdmissionEngine(tree, exhaustive=True)):
        assert [apply(replay, e) for e in events] == outcomes
        assert replay.ledger.used == engine.ledger.used


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    leaves=st.integers(4, 30),
    fanout=st.integers(2, 5),
    runs=st.integers(40, 240),
    interleaved=st.booleans(),
)
def test_incremental_bookkeeping_matches_the_exhaustive_engine_at_scale(
    seed: int, leaves: int, fanout: int, runs: int, interleaved: bool
) -> None:
    """Larger, fuller trees than the random ones above (the benchmark's workload): borrow,
    reclaim, then churn, with every decision compared with the from-scratch engine."""

    def play(exhaustive: bool) -> list[list[tuple[str, str, str]]]:
        rng = random.Random(seed)
        tree = parse_tree(bench_quota.build_tree(leaves, fanout))
        engine = AdmissionEngine(tree, exhaustive=exhaustive)
        queues = sorted(tree.leaf_of_queue())
        half = len(queues) // 2
        first, second = (
            (queues[::2], queues[1::2]) if interleaved else (queues[:half], queues[half:])
        )
        outcome = []
        for group, prefix, count in ((first, "b", runs * 7 // 10), (second, "r", runs // 3)):
            for spec in bench_quota.make_runs(count, group, rng, prefix):
                engine.submit(spec)
            outcome.append(apply(engine, ("advance", Fraction(0))))
        for _ in range(30):
            running = sorted(r.id for r in engine.in_state(RunState.READY))
            if not running:
                break
            outcome.append(apply(engine, ("finish", rng.choice(running))))
            check_invariants(engine, outcome[-1])
        return outcome

    assert play(False) == play(True)


def draw_step(
    data: st.DataObject,
    tree: QuotaTree,
    kind: str,
    submitted: int,
    pools: dict[str, list[str]],
    seconds: list[int],
) -> tuple[Event, int]:
    """An event of `kind` (submit, advance, or one naming a run from `pools[kind]`) and the
    number of runs submitted so far once it is applied."""
    if kind == "submit":
        specs = data.draw(run_specs(tree, submitted), label="runs")
        return ("submit", specs), submitted + len(specs)
    if kind == "advance":
        waited = data.draw(st.sampled_from(seconds), label="seconds")
        return ("advance", Fraction(waited)), submitted
    return (kind, data.draw(st.sampled_from(pools[kind]), label="run")), submitted


def _oracle_r8(
    tree: dict[str, Any], sizes: list[dict[str, int]], x: dict[str, int]
) -> list[int] | None:
    """R8 on one leaf P of a two-leaf tree whose other leaf is idle, computed from the text of
    docs/quota.md: victims newest first until x fits on P and the root, then minimised in
    reverse; carried out only if P then borrows no more of any resource x requests than it did
    before. Returns the indices of the victims, or None when x waits."""
    p_node = tree["root"]["children"][0]
    limits = [p_node["max"], tree["root"]["max"]]
    used = {r: sum(s[r] for s in sizes) for r in x}

    def fits(gone: list[int]) -> bool:
        after = {r: used[r] - sum(sizes[i][r] for i in gone) + x[r] for r in x}
        return all(after[r] <= limit[r] for limit in limits for r in x)

    if fits([]):
        return []
    gone: list[int] = []
    for index in reversed(range(len(sizes))):  # admitted in order: the newest goes first
        gone.append(index)
        if fits(gone):
            break
    else:
        return None
    for index in reversed(list(gone)):
        if fits([i for i in gone if i != index]):
            gone.remove(index)
    for r, amount in x.items():
        after = used[r] - sum(sizes[i][r] for i in gone) + amount
        if after > max(used[r], p_node["min"][r]):
            return None
    return gone


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_r8_preempts_exactly_when_its_leaf_borrows_no_more(data: st.DataObject) -> None:
    """Random sizes around the boundary of R8 while borrowing (cpu and memory, P over or under
    its min before and after): the engine evicts exactly the oracle's victims, or nothing."""
    resources = ["cpu", "memory"]
    cap = {r: data.draw(st.integers(4, 12), label=f"cap {r}") for r in resources}
    p_min = {r: data.draw(st.integers(0, cap[r]), label=f"P min {r}") for r in resources}
    p_max = {r: data.draw(st.integers(p_min[r], cap[r] + 2), label=f"P max {r}") for r in resources}
    tree = {
        "root": {
            "name": "root",
            "min": dict(cap),
            "max": dict(cap),
            "children": [
                {
                    "name": "P",
                    "min": p_min,
                    "max": p_max,
                    "queues": ["p"],
                    "withinQueue": "LowerPriority",
                },
                {
                    "name": "Q",
                    "min": {r: cap[r] - p_min[r] for r in resources},
                    "max": dict(cap),
                    "queues": ["q"],
                },
            ],
        }
    }
    room = {r: min(cap[r], p_max[r]) for r in resources}
    sizes: list[dict[str, int]] = []
    for _ in range(data.draw(st.integers(1, 4), label="runs")):
        size = {r: data.draw(st.integers(0, 4), label=r) for r in resources}
        if all(sum(s[r] for s in sizes) + size[r] <= room[r] for r in resources):
            sizes.append(size)
    x = {r: data.draw(st.integers(0, room[r]), label=f"x {r}") for r in resources}

    def spec(run_id: str, size: dict[str, int], priority: int) -> RunSpec:
        return RunSpec(run_id, "p", (PodSet(1, {r: q * G for r, q in size.items()}),), priority)

    engine = AdmissionEngine(parse_tree(tree))
    for index, size in enumerate(sizes):
        engine.submit(spec(f"v{index}", size, 0))
        engine.cycle()
    assert all(engine.runs[f"v{i}"].state in RUNNING_STATES for i in range(len(sizes)))
    engine.submit(spec("x", x, 1))
    decisions = engine.cycle()
    expected = _oracle_r8(tree, sizes, x)
    evicted = [d.run for d in decisions if d.action == "evict"]
    assert evicted == ([] if expected is None else [f"v{i}" for i in expected])
    assert (engine.runs["x"].state in RUNNING_STATES) == (expected is not None)
