"""Soundness of the reclaim shortcut (`CandidateIndex._guaranteed`): whenever it says R7 is
certain to find victims for a pending run, planning R7 in full must find them.

The shortcut lets a leaf offer a run that needs preemption without planning it; a wrong
"certain" would make the engine pick a candidate that then has no plan (an error) or pass over
a better one. The differential tests only notice when such a run wins the tournament, so this
test checks every pending run the shortcut applies to, after every iteration of the cycle, on
benchmark-shaped workloads (fills, reclaims, finishes) with both layouts and on random trees.
It also counts the runs proven only by the sharper bound F (not by the counting bound E) so it
cannot pass vacuously.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launch_agent.commands import bench_quota
from launch_agent.quota import AdmissionEngine, PodSet, RunSpec, RunState, parse_tree
from launch_agent.quota.candidates import _GUARANTEED, _LOCAL, _NONE
from launch_agent.quota.preemption import plan_preemption
from launch_agent.quota.tree import COUNT_RESOURCES
from tests.unit.quota.test_properties import trees


def _small_tree() -> dict[str, Any]:
    """root 20 CPU = A (min 10) + B (min 10); A = a1 + a2, B = b1 + b2 (min 5 each)."""

    def leaf(name: str) -> dict[str, Any]:
        return {"name": name, "min": {"cpu": 5}, "max": {"cpu": 10}, "queues": [f"q-{name}"]}

    return {
        "reclaimPolicy": "Any",
        "instantTermination": True,
        "root": {
            "name": "root",
            "min": {"cpu": 20},
            "max": {"cpu": 20},
            "children": [
                {
                    "name": "A",
                    "min": {"cpu": 10},
                    "max": {"cpu": 20},
                    "children": [leaf("a1"), leaf("a2")],
                },
                {
                    "name": "B",
                    "min": {"cpu": 10},
                    "max": {"cpu": 20},
                    "children": [leaf("b1"), leaf("b2")],
                },
            ],
        },
    }


def _one_cpu_runs(queue: str, count: int) -> list[RunSpec]:
    return [RunSpec(f"{queue}-{i}", queue, (PodSet(1, {"cpu": 10**9}),)) for i in range(count)]


# x waits in a1 (empty, min 5). a2 and b1/b2 hold 1-CPU runs. With x, A goes over its min, so
# the anchor is A: E = u(A) + x - 10, F = (u(a2) - 5)⁺, D = u(root) + x - 20.
@pytest.mark.parametrize(
    ("a2", "b", "x", "kind", "has_plan"),
    [
        (10, 10, 2, _LOCAL, True),  # D = 2 ≤ E = 2: the counting bound already proves it
        (9, 11, 2, _LOCAL, True),  # D = 2 > E = 1 but ≤ F = 4: only the sharper bound does
        (8, 12, 3, _LOCAL, True),  # D = F = 3: a2 gives back exactly what x lacks
        (7, 13, 4, _NONE, False),  # D = 4 > F = 2: a2 can give back only 2; indeed no plan
        (8, 12, 4, _NONE, False),  # D = 4 > F = 3: one CPU short at the root
        (4, 16, 2, _GUARANTEED, True),  # A stays within its min: anchored at the root
    ],
)
def test_guarantee_table(a2: int, b: int, x: int, kind: int, has_plan: bool) -> None:
    engine = AdmissionEngine(parse_tree(_small_tree()))
    for spec in _one_cpu_runs("q-a2", a2) + _one_cpu_runs("q-b1", min(b, 10)):
        engine.submit(spec)
    for spec in _one_cpu_runs("q-b2", b - min(b, 10)):
        engine.submit(spec)
    engine.cycle()
    assert engine.usage("a2") == {"cpu": a2 * 10**9}
    assert engine.usage("B") == {"cpu": b * 10**9}
    run = engine.submit(RunSpec("x", "q-a1", (PodSet(1, {"cpu": x * 10**9}),)))
    path = engine.ledger.paths[run.leaf]
    assert not engine.ledger.fits(path, run.request)
    assert engine._guaranteed(run, path) == kind
    plan = plan_preemption(engine.ledger, engine._admitted, run, "Any", "Never")
    assert (plan is not None) == has_plan


def _counting_bound_holds(engine: AdmissionEngine, run: Any, path: tuple[int, ...]) -> bool:
    """The older, weaker criterion: D ≤ E at every node above the anchor."""
    ledger = engine.ledger
    top = ledger.guarantee_top(path, run.request)
    assert top is not None
    anchor = path[top]
    for node in path[top + 1 :]:
        for resource, amount in run.request.items():
            ceiling = ledger.maxs[node].get(resource)
            if resource in COUNT_RESOURCES or amount <= 0 or ceiling is None:
                continue
            excess = ledger.effective(anchor, resource) - ledger.mins[anchor].get(resource, 0)
            if ledger.effective(node, resource) - ceiling > excess:
                return False
    return True


def check_guarantees(engine: AdmissionEngine, tally: dict[str, int]) -> None:
    """Every pending run the shortcut proves has a full R7 plan (within-queue preemption off,
    so R7 alone must succeed)."""
    if not engine._fast_reclaim():
        return
    ledger = engine.ledger
    for leaf in ledger.leaves:
        path = ledger.paths[leaf]
        if len(path) < 2:
            continue
        for run in engine._pending[leaf]:
            if ledger.fits(path, run.request) or not ledger.within_min(leaf, run.request):
                continue
            if engine._guaranteed(run, path) == _NONE:
                continue
            plan = plan_preemption(ledger, engine._admitted, run, "Any", "Never")
            assert plan is not None, (run.id, ledger.nodes[leaf].name)
            tally["proven"] += 1
            if not _counting_bound_holds(engine, run, path):
                tally["only_by_f"] += 1


def _drive(engine: AdmissionEngine, tally: dict[str, int]) -> None:
    while engine.step():
        check_guarantees(engine, tally)
    check_guarantees(engine, tally)


def _benchmark_workload(seed: int, leaves: int, fanout: int, interleaved: bool) -> dict[str, int]:
    rng = random.Random(seed)
    tree = parse_tree(bench_quota.build_tree(leaves, fanout))
    engine = AdmissionEngine(tree)
    queues = [q for node in tree.nodes() for q in node.queues]
    if interleaved:
        borrowers, reclaimers = queues[::2], queues[1::2]
    else:
        borrowers, reclaimers = queues[: len(queues) // 2], queues[len(queues) // 2 :]
    tally = {"proven": 0, "only_by_f": 0}
    for specs in (
        bench_quota.make_runs(leaves * 6, borrowers, rng, "b"),
        bench_quota.make_runs(leaves * 3, reclaimers, rng, "r"),
    ):
        for spec in specs:
            engine.submit(spec)
        _drive(engine, tally)
    for _ in range(leaves * 2):
        running = engine.in_state(RunState.READY)
        if not running:
            break
        engine.finish(rng.choice(running).id)
        _drive(engine, tally)
    return tally


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10**6),
    leaves=st.integers(8, 40),
    fanout=st.integers(2, 5),
    interleaved=st.booleans(),
)
def test_every_proven_reclaim_has_a_plan_on_benchmark_workloads(
    seed: int, leaves: int, fanout: int, interleaved: bool
) -> None:
    _benchmark_workload(seed, leaves, fanout, interleaved)


def test_the_sharper_bound_proves_runs_the_counting_bound_cannot() -> None:
    """Not vacuous: on the interleaved layout (a reclaimer's parent already borrows) the bound
    F proves runs that E does not, and each of them was checked against a full plan."""
    tally = _benchmark_workload(seed=3, leaves=30, fanout=5, interleaved=True)
    assert tally["only_by_f"] > 0, tally


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree_data=trees(), data=st.data())
def test_every_proven_reclaim_has_a_plan_on_random_trees(
    tree_data: dict[str, Any], data: st.DataObject
) -> None:
    tree_data["reclaimPolicy"] = "Any"
    tree_data["instantTermination"] = True
    tree = parse_tree(tree_data)
    engine = AdmissionEngine(tree)
    queues = [q for node in tree.nodes() for q in node.queues]
    rng = random.Random(data.draw(st.integers(0, 10**6), label="seed"))
    tally = {"proven": 0, "only_by_f": 0}
    for wave in range(data.draw(st.integers(1, 6), label="waves")):
        specs = bench_quota.make_runs(rng.randint(1, 12), rng.sample(queues, 1), rng, f"w{wave}-")
        for spec in specs:
            engine.submit(spec)  # too big for the tree: INADMISSIBLE at once, never checked
        _drive(engine, tally)
        running = engine.in_state(RunState.READY)
        for run in rng.sample(running, min(len(running), rng.randint(0, 3))):
            engine.finish(run.id)
        _drive(engine, tally)
