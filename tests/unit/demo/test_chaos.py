"""The chaos bench's plan and verdict rules (pure parts of `launch_agent.demo.chaos`)."""

from __future__ import annotations

import random

from launch_agent.demo.chaos import QUEUES, Plan, _ended, plans
from launch_agent.sandbox.wandb import ItemState, LaunchState


def test_a_seed_replays_the_same_plan_and_mixes_every_outcome() -> None:
    first, again = plans(200, random.Random(7)), plans(200, random.Random(7))
    assert first == again
    assert plans(200, random.Random(8)) != first
    assert {p.outcome for p in first} == {"succeed", "fail", "stop"}
    assert {p.queue for p in first} == set(QUEUES)
    # A run stopped from the UI must still be running when the harness presses Stop.
    assert all(p.seconds >= 20 for p in first if p.outcome == "stop")
    assert Plan("r", "q", "fail", 3).script == "exit code=3 after=3s"


def test_an_item_ends_only_in_the_state_its_outcome_calls_for() -> None:
    state = LaunchState(entity="ent")
    queue = state.add_queue("q")
    item = state.push(queue, {"resource": "kubernetes"})
    failing, succeeding = Plan("r", "q", "fail", 1), Plan("r", "q", "succeed", 1)
    assert not _ended(failing, item) and not _ended(succeeding, item)
    item.state = ItemState.CLAIMED
    assert _ended(succeeding, item) and not _ended(failing, item)
    state.fail(item.id, "exited with code 3", "run", None)
    assert _ended(failing, item) and not _ended(succeeding, item)
