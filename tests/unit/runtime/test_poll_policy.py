"""Poller decisions: capacity, fairness across queues, adaptive interval."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from launch_agent.runtime.poll_policy import PollInterval, capacity, queues_to_pop

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
