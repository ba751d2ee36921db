"""Table tests for the admission rules R2–R12 (R1 is in test_tree.py), each on the smallest
tree that shows the rule, through the pure simulator or the engine's API."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from launch_agent.quota import AdmissionEngine, PodSet, RunSpec, RunState, parse_tree
from launch_agent.quota.simulate import simulate
from tests.unit.quota.helpers import ack_tree, counts, gang, last, leaf, run, submit

G = 10**9


def flat(*leaves: dict[str, Any], cap: int = 10, **top: Any) -> dict[str, Any]:
    root = {"name": "root", "min": {"cpu": cap}, "max": {"cpu": cap}, "children": list(leaves)}
    return {**top, "root": root}


# --- R2 inadmissible, R3 fit along the path ------------------------------------------------------


@pytest.mark.parametrize(
    ("tree", "cpu", "reason"),
    [
        (flat(leaf("l", ["q"], 5, 8)), 9, "requests 9 cpu, more than the max 8 of l"),
        (flat(leaf("l", ["q"], 5, 50)), 11, "requests 11 cpu, more than the max 10 of root"),
    ],
)
def test_r2_a_run_larger_than_a_max_on_its_path_is_inadmissible(
    tree: dict[str, Any], cpu: int, reason: str
) -> None:
    engine = AdmissionEngine(parse_tree(tree))
    engine.submit(RunSpec("big", "q", (PodSet(1, {"cpu": cpu * G}),)))
    assert engine.cycle() == []
    assert engine.runs["big"].state is RunState.INADMISSIBLE
    assert engine.explain("big") == reason


def test_r2_a_gang_is_judged_whole() -> None:
    report = last(ack_tree(), [submit(gang("G3", "q1", 4))])  # 25 CPU > a.1 max 20
    assert report["inadmissible"] == ["G3"]
    assert report["usage"]["a.1"] == {"cpu": "0"}


def test_r3_the_effective_ceiling_is_the_smallest_max_on_the_path() -> None:
    tree = {
        "root": {
            "name": "root",
            "min": {"cpu": 40},
            "max": {"cpu": 40},
            "children": [
                {
                    "name": "team",
                    "min": {"cpu": 10},
                    "max": {"cpu": 12},
                    "children": [leaf("t.1", ["q"], 10, 30)],
                }
            ],
        }
    }
    report = last(tree, [submit(*(run(f"r{i}", "q", 5) for i in range(4)))])
    assert report["running"] == ["r0", "r1"]  # 10 of team's 12; a third would need 15
    assert report["pending"] == ["r2", "r3"]


# --- R4 guarantee, R5 share, R6 cycle ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("q3_runs", "expected"),
    [
        (1, {"q1": 4, "q2": 3, "q3": 1}),  # b.1 5 ≤ min 10: reclaims
        (2, {"q1": 3, "q2": 3, "q3": 2}),  # 10 ≤ 10: reclaims again
        (3, {"q1": 3, "q2": 3, "q3": 2}),  # 15 > 10: would borrow, may not preempt (R4)
    ],
)
def test_r4_reclaim_only_within_the_leaf_min(q3_runs: int, expected: dict[str, int]) -> None:
    events = [submit(*(run(f"{q}-r{i}", q) for i in range(1, 6))) for q in ("q1", "q2")]
    events.append(submit(*(run(f"q3-r{i}", "q3") for i in range(1, q3_runs + 1))))
    assert counts(last(ack_tree(), events), ["q1", "q2", "q3"]) == expected


@pytest.mark.parametrize(("weight", "split"), [(1, (5, 5)), (3, (8, 2)), ("0.25", (2, 8))])
def test_r5_weights_bias_the_fair_share(weight: object, split: tuple[int, int]) -> None:
    tree = flat(
        {"name": "x", "min": {"cpu": 0}, "max": {"cpu": 10}, "queues": ["x"], "weight": weight},
        {"name": "y", "min": {"cpu": 0}, "max": {"cpu": 10}, "queues": ["y"]},
    )
    runs = [run(f"{q}-{i:02d}", q, 1) for i in range(10) for q in ("x", "y")]
    report = last(tree, [submit(*runs)])
    assert (counts(report, ["x"])["x"], counts(report, ["y"])["y"]) == split


@pytest.mark.parametrize(
    ("priorities", "admitted"),
    [
        ([0, 2, 1], ["r1"]),  # highest priority first
        ([1, 1, 1], ["r0"]),  # then FIFO
        ([0, 0, 5], ["r2"]),
    ],
)
def test_r6_order_within_a_leaf(priorities: list[int], admitted: list[str]) -> None:
    tree = flat(leaf("l", ["q"], 5, 5), cap=5)
    runs = [run(f"r{i}", "q", 5, priority=p) for i, p in enumerate(priorities)]
    assert last(tree, [submit(*runs)])["running"] == admitted


def test_r6_best_effort_lets_a_smaller_run_pass_a_blocked_head() -> None:
    tree = flat(leaf("l", ["q"], 10, 10))
    report = last(
        tree, [submit(run("a", "q", 8)), submit(run("big", "q", 5), run("small", "q", 2))]
    )
    assert report["running"] == ["a", "small"]
    assert report["pending"] == ["big"]


def test_r6_guaranteed_work_beats_lower_share_borrowing() -> None:
    # S1 step 5: b.1's candidate is within root.b's min (key 0) and beats a.1's borrower.
    events = [submit(*(run(f"{q}-r{i}", q) for i in range(1, 6))) for q in ("q1", "q2", "q3", "q4")]
    events.append({"finish": {"run": "q3-r1"}})
    report = last(ack_tree(), events)
    assert "q3-r3" in report["running"]
    assert "q1-r3" in report["pending"]


# --- R7 reclaim -----------------------------------------------------------------------------------


def two_leaves(**top: Any) -> dict[str, Any]:
    return flat(leaf("L", ["l"], 6, 10), leaf("S", ["s"], 4, 10), **top)


def test_r7_minimisation_keeps_victims_that_are_not_needed() -> None:
    events = [
        submit(run("s-big", "s", 6)),
        submit(run("s-small", "s", 2)),
        submit(run("l-x", "l", 6)),
    ]
    reports = simulate(two_leaves(), events)
    # Greedy takes s-small (newest) then s-big; s-big alone frees enough, so s-small stays.
    assert reports[2]["evicted"] == ["s-big"]
    assert reports[2]["running"] == ["l-x", "s-small"]


@pytest.mark.parametrize(
    ("policy", "evicted", "running"),
    [
        ("Any", ["s-high"], ["l-x", "s-low"]),
        # Only s-low (2 CPU) has a lower priority than l-x and 2 < 4 needed: evict nothing.
        ("LowerPriority", [], ["s-high", "s-low"]),
    ],
)
def test_r7_reclaim_policy(policy: str, evicted: list[str], running: list[str]) -> None:
    events = [
        submit(run("s-high", "s", 6, priority=5)),
        submit(run("s-low", "s", 2, priority=0)),
        submit(run("l-x", "l", 6, priority=1)),
    ]
    report = simulate(two_leaves(reclaimPolicy=policy), events)[-1]
    assert report["evicted"] == evicted
    assert report["running"] == running


def test_r7_siblings_first_even_when_a_cousin_borrows_more() -> None:
    tree = {
        "root": {
            "name": "root",
            "min": {"cpu": 30},
            "max": {"cpu": 30},
            "children": [
                {
                    "name": "A",
                    "min": {"cpu": 20},
                    "max": {"cpu": 30},
                    "children": [leaf("a1", ["a1"], 10, 30), leaf("a2", ["a2"], 10, 30)],
                },
                {
                    "name": "B",
                    "min": {"cpu": 10},
                    "max": {"cpu": 30},
                    "children": [leaf("b1", ["b1"], 10, 30)],
                },
            ],
        }
    }
    events = [
        submit(run("a2-1", "a2", 7), run("a2-2", "a2", 7)),  # a2 borrows 4 (share 4/30)
        submit(run("b1-1", "b1", 8), run("b1-2", "b1", 8)),  # b1 borrows 6 (share 6/30)
        submit(run("a1-x", "a1", 5)),
    ]
    report = last(tree, events)
    assert report["evicted"] == ["a2-2"]
    assert "a1-x" in report["running"]


def test_r7_a_count_alone_never_triggers_reclaim() -> None:
    tree = two_leaves()
    tree["root"]["max"]["runs"] = 2
    events = [submit(run("s-1", "s", 1), run("s-2", "s", 1)), submit(run("l-x", "l", 1))]
    report = last(tree, events)
    assert report["evicted"] == []
    assert report["pending"] == ["l-x"]


# --- R8 within-queue preemption ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "x_priority", "evicted"),
    [
        ("Never", 5, []),
        ("LowerPriority", 5, ["old-0"]),  # lowest priority first
        ("LowerPriority", 1, ["old-0"]),  # only runs strictly below p(x) are candidates
        ("LowerPriority", 0, []),  # equal priority is never preempted
    ],
)
def test_r8_within_queue(policy: str, x_priority: int, evicted: list[str]) -> None:
    tree = flat(leaf("l", ["q"], 10, 10, withinQueue=policy))
    events = [
        submit(run("old-0", "q", 5, priority=0), run("old-2", "q", 5, priority=2)),
        submit(run("x", "q", 5, priority=x_priority)),
    ]
    report = last(tree, events)
    assert report["evicted"] == evicted
    assert ("x" in report["running"]) == bool(evicted)


def test_r8_newest_of_equal_priority_goes_first() -> None:
    tree = flat(leaf("l", ["q"], 10, 10, withinQueue="LowerPriority"))
    events = [
        submit(run("a", "q", 5)),
        submit(run("b", "q", 5)),
        submit(run("x", "q", 5, priority=1)),
    ]
    assert last(tree, events)["evicted"] == ["b"]


@pytest.mark.parametrize(
    ("x_cpu", "evicted"),
    [
        (3, ["a"]),  # l borrows 1 after, 2 before: allowed
        (4, ["a"]),  # 2 after, 2 before: allowed (the boundary)
        (5, []),  # 3 after, 2 before: refused, x waits and a keeps running
    ],
)
def test_r8_while_borrowing_may_not_raise_the_leaf_borrowing(
    x_cpu: int, evicted: list[str]
) -> None:
    """l (min 2) borrows 2 with a (4). x is over l's min whatever it evicts, so it may not
    reclaim (R7); it may preempt a within its queue if l then borrows no more than the 2 it
    borrowed before (the rules before this change refused all three: x would borrow)."""
    tree = flat(
        leaf("l", ["q"], 2, 10, withinQueue="LowerPriority"), leaf("o", ["qo"], 4, 6), cap=6
    )
    report = last(tree, [submit(run("a", "q", 4)), submit(run("x", "q", x_cpu, priority=1))])
    assert report["evicted"] == evicted
    assert ("x" in report["running"]) == bool(evicted)
    assert ("a" in report["running"]) != bool(evicted)


def two_resources(name: str, queue: str, cpu: int, memory: int, **extra: Any) -> dict[str, Any]:
    pods = [{"count": 1, "requests": {"cpu": cpu, "memory": f"{memory}Gi"}}]
    return {"run": name, "queue": queue, "pods": pods, **extra}


@pytest.mark.parametrize(
    ("x_memory", "evicted"),
    [
        (2, ["a"]),  # cpu: 1 borrowed after, 2 before; memory: within min
        (3, []),  # memory: 1 borrowed after, 0 before: refused, though cpu borrows less
    ],
)
def test_r8_borrowing_is_compared_per_resource(x_memory: int, evicted: list[str]) -> None:
    """a (4 cpu, 2Gi) makes l borrow 2 cpu and no memory. x (3 cpu) evicts a: less cpu
    borrowed, but with 3Gi it would borrow memory it did not borrow before. Borrowing on one
    resource does not pay for borrowing on another (a sum over cpu and bytes means nothing)."""

    def node(name: str, cpu: int, memory: int, **extra: Any) -> dict[str, Any]:
        minimum = {"cpu": cpu, "memory": f"{memory}Gi"}
        return {"name": name, "min": minimum, "max": {"cpu": 6, "memory": "4Gi"}, **extra}

    tree = {
        "root": {
            **node("root", 6, 4),
            "children": [
                node("l", 2, 2, queues=["q"], withinQueue="LowerPriority"),
                node("o", 4, 2, queues=["qo"]),
            ],
        }
    }
    events = [
        submit(two_resources("a", "q", 4, 2)),
        submit(two_resources("x", "q", 3, x_memory, priority=1)),
    ]
    report = last(tree, events)
    assert report["evicted"] == evicted
    assert ("x" in report["running"]) == bool(evicted)


def s3_like(root_cpu: int) -> dict[str, Any]:
    """The S3 tree (test_scenarios.py) with room for `root_cpu`: P min 10, max 20; Q idle."""
    return {
        "root": {
            "name": "root",
            "min": {"cpu": root_cpu},
            "max": {"cpu": root_cpu},
            "children": [
                leaf("P", ["p"], 10, 20, withinQueue="LowerPriority"),
                leaf("Q", ["q"], root_cpu - 10, root_cpu),
            ],
        }
    }


@pytest.mark.parametrize(
    ("tree", "events"),
    [
        # x (4) fits l's max 7 once b alone is evicted (the minimal plan), but l (min 6) would
        # then borrow 1 (3 + 4 = 7) where it borrowed nothing; evicting a too would keep it
        # within min.
        (
            {
                "root": {
                    "name": "root",
                    "min": {"cpu": 20},
                    "max": {"cpu": 20},
                    "children": [
                        leaf("l", ["q"], 6, 7, withinQueue="LowerPriority"),
                        leaf("o", ["qo"], 14, 20),
                    ],
                }
            },
            [
                submit(run("a", "q", 3)),
                submit(run("b", "q", 3)),
                submit(run("x", "q", 4, priority=1)),
            ],
        ),
        # S3 with a 20-cpu root: x (10) fits once b alone is evicted, but P would then borrow
        # 10 (a 5 + mid 5 + x 10) where it borrowed 5; evicting a too would keep it at 5.
        (
            s3_like(20),
            [
                submit(run("a", "p", 5)),
                submit(run("b", "p", 5)),
                submit(run("mid", "p", 5, priority=50)),
                submit(run("x", "p", 10, priority=100)),
            ],
        ),
    ],
    ids=["within-min-before", "borrowing-before"],
)
def test_r8_judges_its_minimal_plan_and_evicts_no_extra_run(
    tree: dict[str, Any], events: list[dict[str, Any]]
) -> None:
    """The minimal plan (evict b) is refused; a larger one (evict a and b) would pass the rule,
    but R8 does not carry it out: x waits and nothing is evicted. The extra victim a is not
    needed for x to fit, so it would fit again at once (the minimal plan's state, with a back,
    fits) and be admitted by the tournament, borrowing: a restarted for nothing, and the
    borrowing the rule refused reached one plain admission later."""
    report = last(tree, events)
    assert report["evicted"] == []
    assert "x" in report["pending"]
    assert {"a", "b"} <= set(report["running"])


@pytest.mark.parametrize(
    ("leaf_min", "x_cpu", "evicted"),
    [
        (10, 2, ["a"]),  # l stays within its min with x: R8 frees the slot (R12)
        (0, 2, ["a"]),  # l borrows 2 before and after: R8 frees the slot
        (0, 3, []),  # l would borrow 3 where it borrowed 2: x waits, a keeps running
    ],
)
def test_r8_frees_a_runs_slot_unless_the_leaf_would_borrow_more(
    leaf_min: int, x_cpu: int, evicted: list[str]
) -> None:
    l_leaf = {
        "name": "l",
        "min": {"cpu": leaf_min},
        "max": {"cpu": 10, "runs": 1},
        "queues": ["q"],
        "withinQueue": "LowerPriority",
    }
    tree = {
        "root": {
            "name": "root",
            "min": {"cpu": 10},
            "max": {"cpu": 10},
            "children": [l_leaf, leaf("o", ["qo"], 10 - leaf_min, 10)],
        }
    }
    report = last(tree, [submit(run("a", "q", 2)), submit(run("x", "q", x_cpu, priority=1))])
    assert report["evicted"] == evicted
    assert ("x" in report["running"]) == bool(evicted)


def test_r8_a_run_that_would_borrow_does_not_preempt() -> None:
    """x (6) fits l's max 10 and the root's 12 once a (5) is gone (5 + 6), but l (min 5), which
    borrowed nothing with a, would borrow 1: x waits and a keeps running (the rules before the
    cycle fix evicted a)."""
    tree = flat(
        leaf("l", ["q"], 5, 10, withinQueue="LowerPriority"), leaf("o", ["qo"], 7, 12), cap=12
    )
    events = [
        submit(run("a", "q", 5)),
        submit(run("o1", "qo", 5)),
        submit(run("x", "q", 6, priority=1)),
    ]
    report = last(tree, events)
    assert report["evicted"] == []
    assert report["running"] == ["a", "o1"]
    assert report["pending"] == ["x"]


# --- R9 starvation guard -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("strict_after", "advance", "small2_admitted"),
    [("60s", 30, True), ("60s", 60, False), ("0s", 0, False), ("never", 3600, True)],
)
def test_r9_strict_after(strict_after: str, advance: int, small2_admitted: bool) -> None:
    tree = flat(leaf("l", ["q"], 10, 10, strictAfter=strict_after))
    events = [
        submit(run("a", "q", 8)),
        submit(run("big", "q", 5)),
        submit(run("small1", "q", 1)),
        {"advance": {"seconds": advance}},
        submit(run("small2", "q", 1)),
        {"finish": {"run": "a"}},
    ]
    reports = simulate(tree, events)
    assert ("small2" in reports[4]["running"]) is small2_admitted
    # Once the blocker finishes, the head is admitted either way.
    assert "big" in reports[5]["running"]


# --- R10 eviction with termination and reservation ----------------------------------------------------


def test_r10_evicted_runs_stay_charged_and_the_freed_quota_is_reserved() -> None:
    tree = parse_tree(
        flat(leaf("A", ["a"], 5, 10), leaf("B", ["b"], 5, 10), instantTermination=False)
    )
    engine = AdmissionEngine(tree)
    for name in ("a1", "a2"):
        engine.submit(RunSpec(name, "a", (PodSet(1, {"cpu": 5 * G}),)))
    engine.cycle()
    engine.submit(RunSpec("b1", "b", (PodSet(1, {"cpu": 5 * G}),)))
    decisions = engine.cycle()
    assert [(d.action, d.run) for d in decisions] == [("evict", "a2"), ("reserve", "b1")]
    assert decisions[0].reason == "reclaimed by b1"
    assert engine.runs["a2"].state is RunState.EVICTING
    assert engine.usage("root") == {"cpu": 10 * G}  # still charged until termination
    assert engine.ledger.reserved[engine.ledger.index["B"]] == {"cpu": 5 * G}
    assert engine.explain("b1") == "waiting for preempted runs to terminate"
    engine.terminated("a2")
    assert [(d.action, d.run) for d in engine.cycle()] == [("admit", "b1")]
    # mypy keeps the EVICTING narrowed above; `terminated` changed the state since.
    assert engine.runs["a2"].state is RunState.PENDING  # type: ignore[comparison-overlap]
    assert engine.runs["a2"].enqueued[0] == 0  # type: ignore[unreachable]  # original enqueue kept
    assert engine.ledger.reserved[0] == {}


def test_r10_simulated_termination_events() -> None:
    events = [
        submit(run("a1", "a", 5), run("a2", "a", 5)),
        submit(run("b1", "b", 5)),
        {"terminated": {"run": "a2"}},
    ]
    reports = simulate(
        flat(leaf("A", ["a"], 5, 10), leaf("B", ["b"], 5, 10), instantTermination=False), events
    )
    assert (reports[1]["evicting"], reports[1]["evicted"], reports[1]["pending"]) == (
        ["a2"],
        ["a2"],
        ["b1"],
    )
    assert reports[1]["usage"]["root"] == {"cpu": "10"}
    assert (reports[2]["running"], reports[2]["pending"], reports[2]["evicting"]) == (
        ["a1", "b1"],
        ["a2"],
        [],
    )


def test_r10_the_reservation_lapses_after_the_preemption_timeout() -> None:
    tree = parse_tree(
        flat(
            leaf("A", ["a"], 5, 10),
            leaf("B", ["b"], 5, 10),
            instantTermination=False,
            preemptionTimeout="2m",
        )
    )
    engine = AdmissionEngine(tree)
    engine.submit(RunSpec("a1", "a", (PodSet(2, {"cpu": 5 * G}),)))
    engine.cycle()
    engine.submit(RunSpec("b1", "b", (PodSet(1, {"cpu": 5 * G}),)))
    engine.cycle()
    assert engine.runs["b1"].reserved_at == 0
    engine.advance(120)
    assert engine.runs["b1"].reserved_at is None
    # mypy keeps the `== 0` narrowed above; `advance` released the reservation since.
    assert engine.ledger.reserved[0] == {}  # type: ignore[unreachable]


# --- R11 readiness ------------------------------------------------------------------------------------


def test_r11_timeout_backoff_and_limit() -> None:
    tree = flat(leaf("l", ["q"], 10, 10), readyTimeout="60s", backoffBase="10s", backoffLimit=1)
    events = [
        submit(run("slow", "q", 5, ready=False)),
        {"advance": {"seconds": 60}},  # timeout 1: evicted, back off 10 s
        {"advance": {"seconds": 5}},  # still backing off
        {"advance": {"seconds": 5}},  # re-admitted at t=70
        {"advance": {"seconds": 60}},  # timeout 2 > limit 1: fails
    ]
    reports = simulate(tree, events)
    assert reports[0]["running"] == ["slow"]
    assert (reports[1]["evicted"], reports[1]["pending"]) == (["slow"], ["slow"])
    assert reports[2]["pending"] == ["slow"]
    assert reports[3]["running"] == ["slow"]
    assert reports[4]["evicted"] == ["slow"]
    assert "slow" not in reports[4]["running"] + reports[4]["pending"]


def test_r11_backoff_doubles_and_is_capped() -> None:
    tree = parse_tree(
        flat(leaf("l", ["q"], 10, 10), readyTimeout="10s", backoffBase="4s", backoffMax="10s")
    )
    engine = AdmissionEngine(tree)
    engine.submit(RunSpec("r", "q", (PodSet(1, {"cpu": G}),), ready_on_admission=False))
    engine.cycle()
    delays = []
    for _ in range(4):
        admitted = engine.runs["r"].admitted
        assert admitted is not None
        engine.advance(admitted[0] + 10)
        assert engine.runs["r"].not_before is not None
        delays.append(engine.runs["r"].not_before - engine.now)
        engine.advance(engine.runs["r"].not_before)
    assert delays == [4, 8, 10, 10]


def test_r11_a_ready_run_is_never_timed_out() -> None:
    tree = flat(leaf("l", ["q"], 10, 10), readyTimeout="60s")
    events = [
        submit(run("r", "q", 5, ready=False)),
        {"ready": {"run": "r"}},
        {"advance": {"seconds": 600}},
    ]
    assert simulate(tree, events)[-1]["running"] == ["r"]


def test_r11_block_admission_until_ready() -> None:
    tree = flat(leaf("l", ["q"], 10, 10), blockAdmissionUntilReady=True)
    g1 = {**gang("g1", "q", 1, cpu=2), "ready": False}
    events = [
        submit(g1),
        submit(gang("g2", "q", 1, cpu=2), run("single", "q", 1)),
        {"ready": {"run": "g1"}},
    ]
    reports = simulate(tree, events)
    assert reports[1]["running"] == ["g1", "single"]
    assert reports[1]["pending"] == ["g2"]
    assert reports[2]["running"] == ["g1", "g2", "single"]


# --- R12 counts ---------------------------------------------------------------------------------------


def test_r12_runs_and_sweep_schedulers_are_counted_separately() -> None:
    tree = flat(leaf("l", ["q"], 10, 10))
    tree["root"]["max"].update(runs=2, sweep_schedulers=1)
    events = [
        submit(*(run(f"r{i}", "q", 1) for i in range(3))),
        submit(run("s1", "q", 1, scheduler=True), run("s2", "q", 1, scheduler=True)),
    ]
    report = last(tree, events)
    assert report["running"] == ["r0", "r1", "s1"]
    assert report["pending"] == ["r2", "s2"]
    assert report["usage"]["root"] == {"cpu": "3", "runs": "2", "sweep_schedulers": "1"}


def test_r12_a_leaf_runs_max_is_a_per_queue_max_jobs() -> None:
    tree = flat(leaf("l", ["q"], 10, 10), leaf("m", ["p"], 0, 10))
    tree["root"]["children"][0]["max"]["runs"] = 1
    report = last(tree, [submit(run("q-1", "q", 1), run("q-2", "q", 1), run("p-1", "p", 1))])
    assert report["running"] == ["p-1", "q-1"]


def test_engine_explains_why_a_run_waits() -> None:
    engine = AdmissionEngine(parse_tree(ack_tree()))
    for i in range(5):
        engine.submit(RunSpec(f"r{i}", "q1", (PodSet(1, {"cpu": 5 * G}),)))
    engine.cycle()
    assert engine.explain("r4") == "waiting for quota: a.1 uses 20/20 cpu"
    assert engine.explain("r0") == "ready"


def test_time_is_injected_and_cannot_go_backwards() -> None:
    engine = AdmissionEngine(parse_tree(ack_tree()), now=Fraction(100))
    engine.submit(RunSpec("r", "q1", (PodSet(1, {"cpu": G}),)))
    assert engine.runs["r"].enqueued[0] == 100
    with pytest.raises(ValueError, match="time cannot go backwards"):
        engine.advance(50)


def test_restart_adopts_running_workloads_before_admitting_new_ones() -> None:
    engine = AdmissionEngine(parse_tree(ack_tree()), now=50)
    for i in range(5):  # the tree shrank since these started: a.1's max is now 20
        engine.adopt(
            RunSpec(f"old{i}", "q1", (PodSet(1, {"cpu": 5 * G}),)), admitted_at=i, ready=True
        )
    engine.adopt(RunSpec("booting", "q2", (PodSet(2, {"cpu": G}),)), admitted_at=40, ready=False)
    assert engine.usage("a.1") == {"cpu": 25 * G}
    assert engine.runs["booting"].state is RunState.ADMITTED
    engine.submit(RunSpec("new", "q1", (PodSet(1, {"cpu": G}),)))
    assert engine.cycle() == []
    assert engine.explain("new") == "waiting for quota: a.1 uses 25/20 cpu"
    engine.finish("old0")
    engine.finish("old1")
    assert [(d.action, d.run) for d in engine.cycle()] == [("admit", "new")]


def test_finishing_a_pending_run_cancels_it_and_its_reservation() -> None:
    tree = parse_tree(
        flat(leaf("A", ["a"], 5, 10), leaf("B", ["b"], 5, 10), instantTermination=False)
    )
    engine = AdmissionEngine(tree)
    engine.submit(RunSpec("a1", "a", (PodSet(2, {"cpu": 5 * G}),)))
    engine.cycle()
    engine.submit(RunSpec("b1", "b", (PodSet(1, {"cpu": 5 * G}),)))
    engine.cycle()
    assert engine.ledger.reserved[0] == {"cpu": 5 * G}
    engine.finish("b1")
    assert engine.ledger.reserved[0] == {}
    assert engine.runs["b1"].state is RunState.FINISHED
    engine.terminated("a1")
    assert [(d.action, d.run) for d in engine.cycle()] == [("admit", "a1")]


def test_ended_runs_can_be_forgotten() -> None:
    engine = AdmissionEngine(parse_tree(ack_tree()))
    engine.submit(RunSpec("r", "q1", (PodSet(1, {"cpu": G}),)))
    engine.cycle()
    with pytest.raises(ValueError, match="only ended runs are forgotten"):
        engine.forget("r")
    engine.finish("r")
    engine.forget("r")
    assert "r" not in engine.runs
    engine.submit(RunSpec("r", "q1", (PodSet(1, {"cpu": G}),)))  # the id may come back
