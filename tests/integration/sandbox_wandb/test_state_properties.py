"""Invariants of the queue model, checked on random operation sequences (no server needed)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.sandbox.wandb import ItemState, LaunchState
from tests.integration.sandbox_wandb.conftest import SPEC, Clock


@given(st.lists(st.integers(min_value=0, max_value=4), max_size=40))
def test_pops_come_in_priority_then_push_order(priorities: list[int]) -> None:
    state = LaunchState()
    queue = state.add_queue("q")
    pushed = [state.push(queue, SPEC, priority=p).id for p in priorities]
    popped = []
    while (item := state.pop(queue, None)) is not None:
        popped.append(item.id)
    expected = [pushed[i] for i in sorted(range(len(priorities)), key=lambda i: priorities[i])]
    assert popped == expected


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("push"), st.integers(0, 4)),
        st.tuples(st.just("pop"), st.just(0)),
        st.tuples(st.just("ack"), st.integers(0, 30)),
        st.tuples(st.just("fail"), st.integers(0, 30)),
        st.tuples(st.just("wait"), st.integers(1, 90)),
    ),
    max_size=60,
)


@settings(max_examples=150)
@given(OPS)
def test_items_are_never_handed_out_twice_at_once(ops: list[tuple[str, int]]) -> None:
    clock = Clock()
    state = LaunchState(lease_seconds=60, clock=clock)
    queue = state.add_queue("q")
    ids: list[str] = []
    acked: set[str] = set()
    for op, arg in ops:
        if op == "push":
            ids.append(state.push(queue, SPEC, priority=arg).id)
        elif op == "pop":
            item = state.pop(queue, None)
            if item is not None:
                # Only an item nobody holds can be handed out.
                assert item.state is ItemState.LEASED
                assert item.id not in acked
                assert [s for _, s in item.history][-2] is ItemState.PENDING
        elif op in ("ack", "fail") and ids:
            item_id = ids[arg % len(ids)]
            if op == "ack":
                was_leased = (
                    state.item(item_id).state is ItemState.LEASED
                    and (state.item(item_id).lease_until or 0) > clock.now
                )
                assert state.ack(item_id, f"run-{item_id}") is was_leased
                if was_leased:
                    acked.add(item_id)
            else:
                state.fail(item_id, "m", "agent", None)
        elif op == "wait":
            clock.advance(arg)
    for item_id in acked:
        assert state.item(item_id).state in (ItemState.CLAIMED, ItemState.FAILED)
    # After lapsed leases are returned, exactly the PENDING items can still be popped.
    state.lapse_leases()
    pending = {i for i in ids if state.item(i).state is ItemState.PENDING}
    popped = set()
    while (item := state.pop(queue, None)) is not None:
        popped.add(item.id)
    assert popped == pending
