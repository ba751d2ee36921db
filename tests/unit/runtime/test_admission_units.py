"""The admission stage's small units on their own: the pending caps (`gate.py`) and the
stamp-ordering buffer (`ordering.py`)."""

from __future__ import annotations

from launch_agent.runtime.admission.gate import PendingHolds, share_caps
from launch_agent.runtime.admission.ordering import StampOrder
from launch_agent.runtime.runs import RunRecord


def record(rqi: str) -> RunRecord:
    return RunRecord(
        rqi_id=rqi,
        queue="q",
        entity="e",
        project="p",
        run_id=rqi,
        namespace="default",
        name=rqi,
        api_version="batch/v1",
        kind="Job",
    )


def test_a_groups_free_slots_are_shared_and_the_remainder_rotates() -> None:
    groups = {"a": ["q1", "q2", "q3"], "b": ["q4"]}
    rounds = [share_caps(groups, {"a": 4, "b": -2}, turn) for turn in range(3)]
    for caps in rounds:
        assert sum(caps[q] for q in ("q1", "q2", "q3")) == 4
        assert caps["q4"] == 0, "a group over its cap pops nothing"
    # Each queue of `a` gets the odd slot once in three rounds.
    extra = [[q for q in ("q1", "q2", "q3") if caps[q] == 2] for caps in rounds]
    assert sorted(q for got in extra for q in got) == ["q1", "q2", "q3"]


def test_an_item_holds_one_slot_however_often_it_is_offered() -> None:
    woken: list[str] = []
    holds = PendingHolds(lambda: woken.append("room"))
    assert holds.take("x", "a.1") is True
    assert holds.take("x", "a.1") is False, "offered again while its dispatch runs"
    assert holds.held("a.1") == 1
    holds.release("x")
    holds.release("x")
    assert holds.held("a.1") == 0
    assert woken == ["room"], "the poller is woken once, when the slot frees"


def test_created_runs_come_out_in_stamp_order() -> None:
    order = StampOrder()
    for rqi in ("a", "b", "c"):
        order.stamp(rqi)
    assert order.created(record("unstamped")) is None
    assert order.created(record("c")) == []
    assert order.awaiting("c") and order.stamped("c")
    assert order.abandon("b") == [], "b's dispatch failed; a is still being created"
    assert [r.rqi_id for r in order.created(record("a")) or []] == ["a", "c"]
    assert not order.stamped("a") and not order.stamped("c")
    assert order.abandon("never-stamped") == []


def test_an_item_stamped_twice_keeps_one_ticket_and_blocks_no_later_run() -> None:
    """Two dispatches of one item (W&B offered it again while the first was in flight) stamp
    it twice; the second stamp replaced the first ticket, which was then never created nor
    abandoned, and every later run waited behind it for good (the chaos bench's quota stall)."""
    order = StampOrder()
    order.stamp("a")
    order.stamp("a")
    order.stamp("b")
    assert [r.rqi_id for r in order.created(record("a")) or []] == ["a"]
    assert order.abandon("a") == [], "a's second dispatch ends: nothing left to abandon"
    assert [r.rqi_id for r in order.created(record("b")) or []] == ["b"]
    assert not order.stamped("b")
