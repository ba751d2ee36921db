"""Differential test with adopted runs: admission stamps out of sequence order.

`adopt()` stamps a run found running after a restart with the time it was admitted, which may
be any past time: admission stamps are then not ordered by their sequence numbers, and stamps
of equal time need not share one Fraction object. Victim selection compares stamps with a
shortcut for stamps that share the clock's Fraction (`preemption._later`, the best-first tie
search in `latest_of_group`): here both of its branches must give the reference's decisions.
Each adopted time is a fresh Fraction (equal values, distinct objects) chosen among times
already used, so ties on time between distinct objects are common.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launch_agent.quota import AdmissionEngine, PodSet, RunSpec, RunState, parse_tree
from tests.unit.quota.helpers import ack_tree_within
from tests.unit.quota.reference.engine import AdmissionEngine as ReferenceEngine
from tests.unit.quota.test_differential import outcome, play, same_state
from tests.unit.quota.test_properties import draw_step, run_specs, trees


def lockstep_with_adoption(tree_data: dict[str, Any], data: st.DataObject) -> None:
    tree = parse_tree(tree_data)
    fast, slow = AdmissionEngine(tree), ReferenceEngine(tree, exhaustive=True)
    submitted = 0
    for _ in range(data.draw(st.integers(1, 30), label="events")):
        live = sorted(
            r.id for r in fast.runs.values() if r.state not in (RunState.FINISHED, RunState.FAILED)
        )
        evicting = sorted(r.id for r in fast.in_state(RunState.EVICTING))
        kinds = ["adopt", "adopt", "submit", "submit", "advance"]
        kinds += ["finish"] * bool(live) + ["terminated"] * bool(evicting)
        kind = data.draw(st.sampled_from(kinds), label="kind")
        if kind == "adopt":
            specs = data.draw(run_specs(tree, submitted), label="runs")
            submitted += len(specs)
            now = int(fast.now)
            for spec in specs:
                # A fresh Fraction every time: equal times, distinct objects.
                seconds = data.draw(st.integers(0, now), label="admitted_at")
                ready = data.draw(st.booleans(), label="ready")
                fast.adopt(spec, Fraction(seconds), ready)
                slow.adopt(spec, Fraction(seconds), ready)
            assert outcome(fast.cycle()) == outcome(slow.cycle())
        else:
            pools = {"finish": live, "terminated": evicting}
            step, submitted = draw_step(data, tree, kind, submitted, pools, [1, 30, 60])
            assert play(fast, step) == play(slow, step), step
        same_state(fast, slow)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(tree_data=trees(), data=st.data())
def test_adopted_runs_same_decisions_as_the_reference_on_random_trees(
    tree_data: dict[str, Any], data: st.DataObject
) -> None:
    lockstep_with_adoption(tree_data, data)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(["Any", "LowerPriority"]), data=st.data())
def test_adopted_runs_same_decisions_as_the_reference_on_the_ack_tree(
    policy: str, data: st.DataObject
) -> None:
    tree_data = ack_tree_within("LowerPriority", reclaimPolicy=policy, instantTermination=True)
    lockstep_with_adoption(tree_data, data)


def _leaf(name: str) -> dict[str, Any]:
    return {"name": name, "min": {"cpu": 2}, "max": {"cpu": 4}, "queues": [f"q-{name}"]}


def _small(name: str) -> dict[str, Any]:
    return {"name": name, "min": {"cpu": 1}, "max": {"cpu": 4}, "queues": [f"q-{name}"]}


def _spec(run_id: str, leaf: str) -> RunSpec:
    return RunSpec(run_id, f"q-{leaf}", (PodSet(1, {"cpu": 10**9}),))


# Each case: the tree, the runs admitted at t=100 by submission, the runs adopted with an older
# admission time (later sequence numbers), and the reclaimer. The victim must be the latest
# admission by time: ordering stamps by sequence number alone would pick an adopted run.
CASES = {
    "victim within a leaf": (
        {
            "name": "root",
            "min": {"cpu": 4},
            "max": {"cpu": 4},
            "children": [_leaf("a"), _leaf("b")],
        },
        [("a1", "a")],
        [("a2", "a", 50), ("a3", "a", 40), ("a4", "a", 30)],
        ("b1", "b"),
        "a1",
    ),
    "tie between leaves of equal share": (
        {
            "name": "root",
            "min": {"cpu": 6},
            "max": {"cpu": 6},
            "children": [
                {
                    "name": "g",
                    "min": {"cpu": 4},
                    "max": {"cpu": 8},
                    "children": [_leaf("x"), _leaf("y")],
                },
                _leaf("z"),
            ],
        },
        [("x1", "x")],
        [("x2", "x", 20), ("x3", "x", 20), ("y1", "y", 50), ("y2", "y", 20), ("y3", "y", 20)],
        ("z1", "z"),
        "x1",
    ),
    # Tied inner nodes, searched best-first on their bounds: B's bound (50) comes from the
    # last adopted run, A's (100) from the submitted one, and the children's bounds mix
    # times, so each child's heap key must be negated from its own time.
    "tie between inner nodes": (
        {
            "name": "root",
            "min": {"cpu": 8},
            "max": {"cpu": 8},
            "children": [
                {
                    "name": "A",
                    "min": {"cpu": 2},
                    "max": {"cpu": 8},
                    "children": [_small("a1"), _small("a2")],
                },
                {
                    "name": "B",
                    "min": {"cpu": 2},
                    "max": {"cpu": 8},
                    "children": [_small("b1"), _small("b2")],
                },
                _small("z"),
            ],
        },
        [("a1x", "a1")],
        [
            ("a1y", "a1", 20),
            ("a2p", "a2", 20),
            ("a2q", "a2", 20),
            ("b2p", "b2", 20),
            ("b2q", "b2", 20),
            ("b1p", "b1", 20),
            ("b1q", "b1", 50),
        ],
        ("z1", "z"),
        "a1x",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_latest_admission_by_time_is_evicted_first(case: str) -> None:
    root, submitted, adopted, reclaimer, victim = CASES[case]
    tree = parse_tree({"reclaimPolicy": "Any", "instantTermination": True, "root": root})
    fast, slow = AdmissionEngine(tree), ReferenceEngine(tree, exhaustive=True)
    for engine in (fast, slow):
        engine.advance(100)
        for run_id, leaf in submitted:
            engine.submit(_spec(run_id, leaf))
        assert [d.action for d in engine.cycle()] == ["admit"] * len(submitted)
        for run_id, leaf, seconds in adopted:
            engine.adopt(_spec(run_id, leaf), Fraction(seconds), True)
        engine.submit(_spec(*reclaimer))
    decisions = [(d.action, d.run, d.by) for d in fast.cycle()]
    assert decisions == [(d.action, d.run, d.by) for d in slow.cycle()]
    assert decisions == [("evict", victim, reclaimer[0]), ("admit", reclaimer[0], "")]
