"""Reading W&B answers: typed results, per-alias errors, precise messages for wrong shapes."""

from __future__ import annotations

from typing import Any

import pytest

from launch_agent.adapters import wandb_results as results
from launch_agent.adapters.wandb_errors import WandbGraphQLError, WandbProtocolError

SPLIT_OK = [
    ({"data": {"q0": None}}, ("q0",), {"q0": None}, {}),
    (
        {"data": {"q0": {"x": 1}, "q1": None}, "errors": [{"message": "no queue", "path": ["q1"]}]},
        ("q0", "q1"),
        {"q0": {"x": 1}, "q1": None},
        {"q1": "no queue"},
    ),
    (
        {
            "data": {"s0": None, "s1": None, "s2": {}},
            "errors": [
                {"message": "a", "path": ["s0", "run"]},
                {"message": "b", "path": ["s0"]},
                {"message": "c", "path": ["s1"]},
            ],
        },
        ("s0", "s1", "s2"),
        {"s0": None, "s1": None, "s2": {}},
        {"s0": "a; b", "s1": "c"},
    ),
]


@pytest.mark.parametrize(("body", "keys", "data", "errors"), SPLIT_OK)
def test_split_errors_attributes_errors_to_aliases(
    body: dict[str, Any], keys: tuple[str, ...], data: dict[str, Any], errors: dict[str, str]
) -> None:
    assert results.split_errors("op", body, keys) == (data, errors)


SPLIT_FAIL = [
    ({"data": None, "errors": [{"message": "boom"}]}, ("q0",), WandbGraphQLError, "boom"),
    (
        {"data": {}, "errors": [{"message": "x", "path": ["other"]}]},
        ("q0",),
        WandbGraphQLError,
        "x",
    ),
    (
        {"data": {"q0": None}, "errors": [{"message": "gone", "path": ["q0"]}]},
        ("q0",),
        WandbGraphQLError,
        "W&B rejected op: gone",
    ),
    ({"errors": ["plain string"]}, (), WandbGraphQLError, "plain string"),
    ({}, (), WandbProtocolError, "neither `data` nor `errors`"),
    ({"data": []}, (), WandbProtocolError, "`data` is list"),
    ({"data": {}, "errors": {"message": "x"}}, (), WandbProtocolError, "not a list"),
]


@pytest.mark.parametrize(("body", "keys", "error", "message"), SPLIT_FAIL)
def test_split_errors_fails_when_nothing_is_usable(
    body: dict[str, Any], keys: tuple[str, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        results.split_errors("op", body, keys)


POPPED = [
    (None, None),
    (
        {"runQueueItemId": "i1", "runSpec": {"entity": "e"}},
        results.RunQueueItem("i1", "q", {"entity": "e"}, None),
    ),
    (
        {"runQueueItemId": "i2", "runSpec": '{"entity": "e"}'},
        results.RunQueueItem("i2", "q", {"entity": "e"}, None),
    ),
    (
        {"runQueueItemId": "i3", "runSpec": "not json"},
        results.RunQueueItem(
            "i3", "q", {}, "runSpec is a string that is not JSON: Expecting value"
        ),
    ),
    (
        {"runQueueItemId": "i4", "runSpec": [1, 2]},
        results.RunQueueItem("i4", "q", {}, "runSpec is list [1, 2], expected a JSON object"),
    ),
    (
        {"runQueueItemId": "i5", "runSpec": None},
        results.RunQueueItem("i5", "q", {}, "runSpec is null, expected a JSON object"),
    ),
]


@pytest.mark.parametrize(("value", "expected"), POPPED)
def test_popped_items_keep_unreadable_specs_as_problems(
    value: Any, expected: results.RunQueueItem | None
) -> None:
    item = results.popped("q", value)
    if expected is None or expected.problem is None:
        assert item == expected
    else:
        assert item is not None
        assert (item.id, item.queue, item.run_spec) == (expected.id, "q", {})
        assert item.problem is not None
        assert item.problem.startswith(expected.problem)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("x", "popFromRunQueue \\('q'\\) is str"),
        ({"runSpec": {}}, "runQueueItemId is null"),
        ({"runQueueItemId": ""}, "runQueueItemId is str"),
    ],
)
def test_popped_without_an_id_is_a_protocol_error(value: Any, message: str) -> None:
    with pytest.raises(WandbProtocolError, match=message):
        results.popped("q", value)


@pytest.mark.parametrize(
    ("value", "stopped"),
    [
        (None, False),
        ({"run": None}, False),
        ({"run": {"stopped": None}}, False),
        ({"run": {"stopped": False}}, False),
        ({"run": {"stopped": True}}, True),
        ({"run": {"stopped": "true"}}, False),
    ],
)
def test_run_stopped(value: Any, stopped: bool) -> None:
    assert results.run_stopped(value) is stopped


@pytest.mark.parametrize(
    ("value", "state"),
    [
        (None, None),
        ({"run": None}, None),
        ({"run": {"state": "running"}}, "running"),
        ({"run": {"state": 3}}, None),
    ],
)
def test_run_state(value: Any, state: str | None) -> None:
    assert results.run_state(value) == state


def test_viewer_reads_teams_and_tolerates_missing_parts() -> None:
    value = {
        "id": "VXNlcjox",
        "entity": "ent",
        "username": "u",
        "email": None,
        "teams": {"edges": [{"node": {"name": "t1"}}, {"node": None}, "junk"]},
    }
    assert results.viewer(value) == results.Viewer("VXNlcjox", "ent", "u", None, ("t1",))
    assert results.viewer(None) is None
    assert results.viewer({"id": "x"}) == results.Viewer("x", None, None, None, ())


def test_run_queues() -> None:
    value = {
        "runQueues": [
            {"id": "UnVuUXVldWU6MQ==", "name": "q1", "createdBy": 7, "access": "PROJECT"},
            {"id": "UnVuUXVldWU6Mg==", "name": "q2", "createdBy": None, "access": None},
        ]
    }
    assert results.run_queues(value) == [
        results.RunQueue("UnVuUXVldWU6MQ==", "q1", "7", "PROJECT"),
        results.RunQueue("UnVuUXVldWU6Mg==", "q2", None, None),
    ]
    assert results.run_queues(None) is None
    assert results.run_queues({"runQueues": None}) == []
    with pytest.raises(WandbProtocolError, match=r"runQueues\[0\]\.name is null"):
        results.run_queues({"runQueues": [{"id": "x"}]})


def test_launch_agent() -> None:
    value = {
        "id": "TGF1bmNoQWdlbnQ6MQ==",
        "name": "agent-1",
        "runQueues": ["UnVuUXVldWU6MQ=="],
        "hostname": "h",
        "agentStatus": "POLLING",
        "stopPolling": True,
        "heartbeatAt": "2026-01-01T00:00:00",
    }
    info = results.launch_agent(value)
    assert info is not None
    assert info.stop_polling is True
    assert info.run_queues == ("UnVuUXVldWU6MQ==",)
    assert results.launch_agent(None) is None
    with pytest.raises(WandbProtocolError, match="stopPolling is str"):
        results.launch_agent(value | {"stopPolling": "yes"})


@pytest.mark.parametrize(
    ("value", "outcome"),
    [
        ({"success": True}, True),
        ({"success": False}, False),
        ({"success": None}, "success is null"),
        (None, "data.ackRunQueueItem is null"),
    ],
)
def test_success_payloads(value: Any, outcome: bool | str) -> None:
    if isinstance(outcome, bool):
        assert results.success("ackRunQueueItem", value) is outcome
    else:
        with pytest.raises(WandbProtocolError, match=outcome):
            results.success("ackRunQueueItem", value)


def test_pushed() -> None:
    assert results.pushed({"runQueueItemId": "i", "runSpec": '{"a": 1}'}) == results.PushedItem(
        "i", {"a": 1}
    )
    assert results.pushed({"runQueueItemId": "i", "runSpec": None}) == results.PushedItem("i", None)


def test_run_queue_item_reads_the_state_and_a_missing_item() -> None:
    found = {"runQueue": {"runQueueItem": {"id": "i1", "state": "failed", "associatedRunId": None}}}
    item = results.run_queue_item("q", found)
    assert item is not None
    assert (item.id, item.state) == ("i1", "FAILED")  # `QueuedRun.state` lower-cases; we upper
    assert results.run_queue_item("q", {"runQueue": {"runQueueItem": None}}) is None


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (None, "GetRunQueueItem: data.project is null"),
        ({"runQueue": None}, "W&B has no run queue 'q'"),
        ({"runQueue": {"runQueueItem": {"id": "i1"}}}, "runQueueItem.state is null"),
    ],
)
def test_run_queue_item_of_the_wrong_shape(value: Any, message: str) -> None:
    with pytest.raises(WandbProtocolError, match=message):
        results.run_queue_item("q", value)


def test_run_queue_items_keep_order_and_read_json_string_specs() -> None:
    value = {
        "runQueue": {
            "runQueueItems": {
                "edges": [
                    {"node": {"id": "a", "state": "CLAIMED", "runSpec": {"run_id": "r"}}},
                    {"node": {"id": "b", "state": "PENDING", "runSpec": '{"run_id": "r"}'}},
                    # An unreadable spec matches nothing; it does not spoil the listing.
                    {"node": {"id": "c", "state": "PENDING", "runSpec": "{not json"}},
                ]
            }
        }
    }
    items = results.run_queue_items("q", value)
    assert [(i.id, i.state, i.run_spec) for i in items] == [
        ("a", "CLAIMED", {"run_id": "r"}),
        ("b", "PENDING", {"run_id": "r"}),
        ("c", "PENDING", {}),
    ]


def test_run_queue_items_without_edges_is_a_protocol_error() -> None:
    with pytest.raises(WandbProtocolError, match=r"runQueueItems.edges is null"):
        results.run_queue_items("q", {"runQueue": {"runQueueItems": {}}})
