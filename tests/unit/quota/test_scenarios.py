"""Acceptance: scenarios S1 and S2 of quota-admission.md §6, and S3 (in-queue preemption while
borrowing, docs/quota.md R8), through `launch-agent quota simulate` (the real entry point, real
YAML files), step by step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from launch_agent.cli import main
from tests.unit.quota.helpers import ack_tree, counts, gang, leaf, run, submit

QUEUES = ["q1", "q2", "q3", "q4"]


def simulate_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tree: Any, events: Any
) -> list[dict[str, Any]]:
    (tmp_path / "tree.yaml").write_text(yaml.safe_dump(tree))
    (tmp_path / "events.yaml").write_text(yaml.safe_dump(events))
    status = main(
        [
            "quota",
            "simulate",
            "--tree",
            str(tmp_path / "tree.yaml"),
            "--events",
            str(tmp_path / "events.yaml"),
        ]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


def s1_events() -> list[dict[str, Any]]:
    events = [submit(*(run(f"{q}-r{i}", q) for i in range(1, 6))) for q in QUEUES]
    events.append({"finish": {"run": "q3-r1"}})
    return events


def five(queue: str, running: range) -> list[str]:
    return [f"{queue}-r{i}" for i in running]


@pytest.fixture
def s1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return simulate_cli(tmp_path, capsys, ack_tree(), s1_events())


def test_s1_step1_q1_borrows_up_to_its_leaf_max(s1: list[dict[str, Any]]) -> None:
    assert s1[0]["event"] == 0
    assert s1[0]["running"] == five("q1", range(1, 5))
    assert s1[0]["pending"] == ["q1-r5"]
    assert s1[0]["usage"]["a.1"] == {"cpu": "20"}
    assert s1[0]["usage"]["root"] == {"cpu": "20"}


def test_s1_step2_root_is_full(s1: list[dict[str, Any]]) -> None:
    assert s1[1]["running"] == five("q1", range(1, 5)) + five("q2", range(1, 5))
    assert s1[1]["pending"] == ["q1-r5", "q2-r5"]
    assert s1[1]["evicted"] == []
    assert s1[1]["usage"]["root"] == {"cpu": "40"}


def test_s1_step3_reclaim_is_spread_over_the_borrowing_siblings(s1: list[dict[str, Any]]) -> None:
    step = s1[2]
    assert counts(step, QUEUES) == {"q1": 3, "q2": 3, "q3": 2, "q4": 0}
    # a.1 and a.2 tie at b = 10/40: a.2 holds the newest run; then a.1 has the larger share.
    assert step["evicted"] == ["q2-r4", "q1-r4"]
    # 3′: q3-r3 would take b.1 to 15 > min 10, so it may not preempt and stays pending.
    assert "q3-r3" in step["pending"]
    assert step["pending"] == ["q1-r4", "q1-r5", "q2-r4", "q2-r5", "q3-r3", "q3-r4", "q3-r5"]
    assert step["usage"]["b.1"] == {"cpu": "10"}
    assert step["usage"]["root.a"] == {"cpu": "30"}


def test_s1_step4_every_namespace_at_its_min(s1: list[dict[str, Any]]) -> None:
    step = s1[3]
    assert counts(step, QUEUES) == {"q1": 2, "q2": 2, "q3": 2, "q4": 2}
    assert step["evicted"] == ["q2-r3", "q1-r3"]
    for node in ("a.1", "a.2", "b.1", "b.2"):
        assert step["usage"][node] == {"cpu": "10"}


def test_s1_step5_guaranteed_work_beats_borrowing(s1: list[dict[str, Any]]) -> None:
    step = s1[4]
    assert step["running"] == sorted(
        five("q1", range(1, 3))
        + five("q2", range(1, 3))
        + ["q3-r2", "q3-r3"]
        + five("q4", range(1, 3))
    )
    assert "q3-r1" not in step["running"] + step["pending"]  # finished runs are omitted
    assert step["evicted"] == []


def global_newest_first(admitted: list[str], needed: int) -> list[str]:
    """The rule S1 must reject: evict the lowest-priority (all equal here), most recently
    admitted borrowed runs of the whole tree, whatever subtree they are in."""
    return list(reversed(admitted))[:needed]


def test_s1_negative_check_global_newest_first_gives_4_2(s1: list[dict[str, Any]]) -> None:
    # Admission order after step 2: q1-r1..r4 then q2-r1..r4. q3 needs two 5-CPU runs back.
    admitted = five("q1", range(1, 5)) + five("q2", range(1, 5))
    victims = global_newest_first(admitted, 2)
    survivors = [r for r in admitted if r not in victims]
    wrong = {q: sum(1 for r in survivors if r.startswith(q + "-")) for q in ("q1", "q2")}
    assert wrong == {"q1": 4, "q2": 2}
    # The acceptance check of step 3 fails for that rule and passes for the engine.
    assert wrong != {"q1": 3, "q2": 3}
    assert {q: counts(s1[2], QUEUES)[q] for q in ("q1", "q2")} == {"q1": 3, "q2": 3}


@pytest.fixture
def s2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    events = [
        submit(gang("G1", "q1", 3)),
        submit(gang("G2", "q1", 1)),
        submit(gang("G3", "q1", 4)),
        submit(gang("H1", "q2", 3)),
        submit(gang("K1", "q3", 1)),
        submit(gang("H2", "q2", 1)),
    ]
    return simulate_cli(tmp_path, capsys, ack_tree(), events)


def test_s2_gangs(s2: list[dict[str, Any]]) -> None:
    expected = [
        (["G1"], [], [], []),
        (["G1"], ["G2"], [], []),
        (["G1"], ["G2"], ["G3"], []),
        (["G1", "H1"], ["G2"], ["G3"], []),
        (["G1", "K1"], ["G2", "H1"], ["G3"], ["H1"]),
        (["G1", "H2", "K1"], ["G2", "H1"], ["G3"], []),
    ]
    for step, (running, pending, inadmissible, evicted) in zip(s2, expected, strict=True):
        assert (step["running"], step["pending"], step["inadmissible"], step["evicted"]) == (
            running,
            pending,
            inadmissible,
            evicted,
        ), step


def test_s2_whole_gang_eviction_leaves_capacity_idle(s2: list[dict[str, Any]]) -> None:
    # Step 5: H1's 4 pods (20 CPU) go to make room for K1 (10): 10 CPU stay idle.
    assert s2[4]["usage"]["root"] == {"cpu": "30"}
    assert s2[4]["usage"]["a.2"] == {"cpu": "0"}
    # G3 (25 CPU > a.1 max 20) is inadmissible: no pod of it is ever charged.
    assert s2[2]["usage"]["a.1"] == {"cpu": "20"}
    # Step 6: BestEffortFIFO lets H2 pass the infeasible H1.
    assert s2[5]["usage"]["root"] == {"cpu": "40"}


def s3_tree() -> dict[str, Any]:
    """Leaf P (min 10, max 20) preempts within its queue; Q guarantees the other 5 of a 15-cpu
    root and is idle, so P may borrow Q's 5."""
    return {
        "root": {
            "name": "root",
            "min": {"cpu": 15},
            "max": {"cpu": 15},
            "children": [
                leaf("P", ["p"], 10, 20, withinQueue="LowerPriority"),
                leaf("Q", ["q"], 5, 15),
            ],
        }
    }


@pytest.fixture
def s3(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    events = [
        submit(run("p-low-1", "p", 5, priority=0)),
        submit(run("p-low-2", "p", 5, priority=0)),
        submit(run("p-mid", "p", 5, priority=50)),
        submit(run("p-high", "p", 10, priority=100)),
        {"finish": {"run": "p-high"}},
    ]
    return simulate_cli(tmp_path, capsys, s3_tree(), events)


def test_s3_in_queue_preemption_while_borrowing(s3: list[dict[str, Any]]) -> None:
    """P borrows 5 (15 of min 10) when p-high (10 cpu) arrives. It is over P's min, so it may
    not reclaim (R7), but it may preempt P's own lower-priority runs (R8): its minimal plan,
    both priority-0 runs (the root has room for 10 only without both), leaves P borrowing 5,
    no more than before, so it is carried out. p-mid (priority 50, not a candidate of the
    minimal plan) keeps running."""
    assert [step["running"] for step in s3[:3]] == [
        ["p-low-1"],
        ["p-low-1", "p-low-2"],
        ["p-low-1", "p-low-2", "p-mid"],
    ]
    assert s3[2]["usage"]["P"] == {"cpu": "15"}  # borrowing 5 of Q's idle guarantee
    step = s3[3]
    assert step["evicted"] == ["p-low-2", "p-low-1"]  # newest first
    assert step["running"] == ["p-high", "p-mid"]
    assert step["pending"] == ["p-low-1", "p-low-2"]
    assert step["usage"]["P"] == {"cpu": "15"}  # borrowing 5, as before
    assert step["usage"]["root"] == {"cpu": "15"}
    # p-high finishes: both priority-0 runs come back (plain admissions may borrow).
    assert s3[4]["running"] == ["p-low-1", "p-low-2", "p-mid"]
    assert s3[4]["evicted"] == []
