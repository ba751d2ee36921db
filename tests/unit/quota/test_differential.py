"""Differential tests: the optimized engine (lazy tournament, hopeless leaves, precise wake-ups,
best-first preemption ties) against the simple reference in `reference/` (the engine before
that work, in its exhaustive mode). On random trees and random event sequences, and on
benchmark-shaped workloads, both must make the same decisions, in the same order, with the
same reasons, and end every event with the same usage and the same run states. The optimized
engine's clock moves as the agent moves it (`advance_once` and `step()`), the reference's by
`advance`."""

from __future__ import annotations

import random
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launch_agent.commands import bench_quota
from launch_agent.quota import AdmissionEngine, Decision, QuotaTree, RunState, parse_tree
from tests.unit.quota.helpers import ack_tree_within
from tests.unit.quota.reference.engine import AdmissionEngine as ReferenceEngine
from tests.unit.quota.test_properties import Event, draw_step, trees

Outcome = list[tuple[str, str, str]]


def play(engine: AdmissionEngine | ReferenceEngine, event: Event) -> Outcome:
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
    elif isinstance(engine, AdmissionEngine):
        return outcome(advance_stepwise(engine, engine.now + value))
    else:
        return outcome(engine.advance(engine.now + value))
    return outcome(engine.cycle())


def outcome(decisions: list[Decision]) -> Outcome:
    return [(d.action, d.run, d.reason) for d in decisions]


def advance_stepwise(engine: AdmissionEngine, target: Fraction) -> list[Decision]:
    """The clock moved as the agent's driver moves it: one timer stop at a time
    (`advance_once`), each followed by its cycle one `step()` at a time."""
    decisions: list[Decision] = []
    while True:
        fired, done = engine.advance_once(target)
        decisions += fired
        while made := engine.step():
            decisions += made
        if done:
            return decisions


def same_state(fast: AdmissionEngine, slow: ReferenceEngine) -> None:
    assert fast.ledger.used == slow.ledger.used
    assert fast.ledger.reserved == slow.ledger.reserved
    assert {i: r.state for i, r in fast.runs.items()} == {i: r.state for i, r in slow.runs.items()}


def lockstep(tree: QuotaTree, data: st.DataObject) -> None:
    fast, slow = AdmissionEngine(tree), ReferenceEngine(tree, exhaustive=True)
    submitted = 0
    for _ in range(data.draw(st.integers(1, 40), label="events")):
        live = sorted(
            r.id for r in fast.runs.values() if r.state not in (RunState.FINISHED, RunState.FAILED)
        )
        admitted = sorted(r.id for r in fast.in_state(RunState.ADMITTED))
        evicting = sorted(r.id for r in fast.in_state(RunState.EVICTING))
        kinds = ["submit", "submit", "submit", "advance"]
        kinds += ["finish"] * bool(live) + ["ready"] * bool(admitted)
        kinds += ["terminated", "terminated"] * bool(evicting)
        kind = data.draw(st.sampled_from(kinds), label="kind")
        pools = {"finish": live, "ready": admitted, "terminated": evicting}
        step, submitted = draw_step(data, tree, kind, submitted, pools, [1, 30, 60, 200])
        assert play(fast, step) == play(slow, step), step
        same_state(fast, slow)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tree_data=trees(), data=st.data())
def test_same_decisions_as_the_reference_on_random_trees(
    tree_data: dict[str, Any], data: st.DataObject
) -> None:
    lockstep(parse_tree(tree_data), data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(["Any", "LowerPriority"]),
    instant=st.booleans(),
    within=st.sampled_from(["Never", "LowerPriority"]),
    data=st.data(),
)
def test_same_decisions_as_the_reference_on_the_ack_tree(
    policy: str, instant: bool, within: str, data: st.DataObject
) -> None:
    tree_data = ack_tree_within(within, reclaimPolicy=policy, instantTermination=instant)
    lockstep(parse_tree(tree_data), data)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    leaves=st.integers(8, 60),
    fanout=st.integers(2, 6),
    runs=st.integers(60, 400),
    interleaved=st.booleans(),
)
def test_same_decisions_as_the_reference_on_benchmark_workloads(
    seed: int, leaves: int, fanout: int, runs: int, interleaved: bool
) -> None:
    """The benchmark's shape, smaller: a full tree, a wave of borrowers, a wave of
    reclaimers, then runs finishing one at a time (the phase where most stale subtrees pile
    up), every event compared."""
    tree = parse_tree(bench_quota.build_tree(leaves, fanout))
    fast, slow = AdmissionEngine(tree), ReferenceEngine(tree, exhaustive=True)
    rng = random.Random(seed)
    queues = sorted(tree.leaf_of_queue())
    half = len(queues) // 2
    first, second = (queues[::2], queues[1::2]) if interleaved else (queues[:half], queues[half:])
    for group, prefix, count in ((first, "b", runs * 7 // 10), (second, "r", runs * 3 // 10)):
        step: Event = ("submit", bench_quota.make_runs(count, group, rng, prefix))
        assert play(fast, step) == play(slow, step)
        same_state(fast, slow)
    for _ in range(60):
        running = sorted(r.id for r in fast.in_state(RunState.READY))
        if not running:
            break
        step = ("finish", rng.choice(running))
        assert play(fast, step) == play(slow, step), step
        same_state(fast, slow)
