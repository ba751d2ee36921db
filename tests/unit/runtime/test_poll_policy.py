"""Poller decisions: capacity, fairness across queues, adaptive interval."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.runtime.poll_policy import PollInterval, PopPlan, capacity, queues_to_pop

CAPACITY = [(1, 0, 1), (1, 1, 0), (10, 3, 7), (2, 5, 0), (-1, 1000, None)]


@pytest.mark.parametrize(("max_jobs", "inflight", "expected"), CAPACITY)
def test_capacity(max_jobs: int, inflight: int, expected: int | None) -> None:
    assert capacity(max_jobs, inflight) == expected


ROTATION = [
    (["a", "b", "c"], None, 0, ["a", "b", "c"]),
    (["a", "b", "c"], 1, 0, ["a"]),
    (["a", "b", "c"], 1, 1, ["b"]),
    (["a", "b", "c"], 2, 2, ["c", "a"]),
    (["a", "b", "c"], 0, 5, []),
    ([], None, 3, []),
]


@pytest.mark.parametrize(("queues", "room", "turn", "expected"), ROTATION)
def test_queues_to_pop(queues: list[str], room: int | None, turn: int, expected: list[str]) -> None:
    assert queues_to_pop(queues, room, turn) == expected


@given(st.lists(st.text(min_size=1), min_size=1, max_size=8, unique=True), st.integers(1, 8))
def test_every_queue_gets_a_turn(queues: list[str], room: int) -> None:
    seen: set[str] = set()
    for turn in range(len(queues)):
        seen.update(queues_to_pop(queues, room, turn))
    assert seen == set(queues)


def test_interval_backs_off_when_idle_and_resets_after_work() -> None:
    interval = PollInterval(active=0.5, idle=10)
    waits = [interval.after(False) for _ in range(6)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 10, 10]
    assert interval.after(True) == 0.5


PLANS = [
    # (depths from earlier rounds, queues, room, turn, expected slots)
    ({}, ["a", "b"], None, 0, ["a", "b"]),
    ({"a": 4}, ["a", "b"], None, 0, ["a", "b", "a", "a", "a"]),
    ({"a": 4, "b": 2}, ["a", "b"], 3, 0, ["a", "b", "a"]),
    ({"a": 4, "b": 2}, ["a", "b"], 3, 1, ["b", "a", "b"]),
    ({"a": 8}, ["a"], 5, 0, ["a"] * 5),
    ({"a": 8}, ["a"], 0, 0, []),
    ({}, [], None, 0, []),
]


@pytest.mark.parametrize(("depth", "queues", "room", "turn", "expected"), PLANS)
def test_pop_plan_slots(
    depth: dict[str, int], queues: list[str], room: int | None, turn: int, expected: list[str]
) -> None:
    assert PopPlan(max_per_queue=16, depth=dict(depth)).slots(queues, room, turn) == expected


CAPPED = [
    # (depths, queues, room, caps, expected slots)
    ({"a": 4, "b": 4}, ["a", "b"], None, {"a": 0}, ["b"] * 4),
    ({"a": 4, "b": 4}, ["a", "b"], None, {"a": 1, "b": 2}, ["a", "b", "b"]),
    ({"a": 4}, ["a", "b"], 2, {"b": 0}, ["a", "a"]),
    ({}, ["a", "b"], None, {"a": 0, "b": 0}, []),
    ({"a": 2}, ["a"], None, {"other": 0}, ["a", "a"]),
]


@pytest.mark.parametrize(("depth", "queues", "room", "caps", "expected"), CAPPED)
def test_pop_plan_caps_single_queues(
    depth: dict[str, int],
    queues: list[str],
    room: int | None,
    caps: dict[str, int],
    expected: list[str],
) -> None:
    plan = PopPlan(max_per_queue=16, depth=dict(depth))
    assert plan.slots(queues, room, 0, caps) == expected


def test_pop_plan_doubles_while_full_and_resets_when_short() -> None:
    plan = PopPlan(max_per_queue=8)
    asked = []
    for got_all in [True, True, True, True, True, False, True]:
        n = plan.slots(["q"], None, 0).count("q")
        asked.append(n)
        plan.record("q", n, n if got_all else n - 1)
    assert asked == [1, 2, 4, 8, 8, 8, 1]
    assert plan.depth == {"q": 2}


@given(
    st.dictionaries(st.sampled_from("abcd"), st.integers(1, 16)),
    st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True),
    st.one_of(st.none(), st.integers(0, 40)),
    st.integers(0, 7),
)
def test_pop_plan_respects_room_and_is_fair(
    depth: dict[str, int], queues: list[str], room: int | None, turn: int
) -> None:
    slots = PopPlan(max_per_queue=16, depth=dict(depth)).slots(queues, room, turn)
    if room is not None:
        assert len(slots) <= room
    counts = {q: slots.count(q) for q in queues}
    for q in queues:
        assert counts[q] <= depth.get(q, 1)
    # Interleaved: a queue that still wanted more is never more than one pop behind another.
    for q in queues:
        for other in queues:
            if counts[q] < depth.get(q, 1):
                assert counts[other] <= counts[q] + 1
