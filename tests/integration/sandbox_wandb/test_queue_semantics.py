"""Run queues over HTTP: priorities and FIFO, leases, ack once, failures, warnings, pushes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launch_agent.sandbox.wandb import ItemState, WandbServer
from tests.integration.sandbox_wandb.conftest import (
    ACK,
    FAIL,
    POP,
    PUSH,
    SPEC,
    WARN,
    Client,
    Clock,
    pop_vars,
)


async def push(client: Client, spec: dict[str, Any], **extra: Any) -> dict[str, Any]:
    variables = {
        "entityName": "ent",
        "projectName": "model-registry",
        "queueName": "q1",
        "runSpec": json.dumps(spec),
        **extra,
    }
    pushed: dict[str, Any] = (await client.data(PUSH, variables))["pushToRunQueueByName"]
    return pushed


async def pop(client: Client, queue: str = "q1") -> dict[str, Any] | None:
    result: dict[str, Any] | None = (await client.data(POP, pop_vars(queue)))["popFromRunQueue"]
    return result


ORDERS = [
    # (priorities in push order, prioritization mode, expected pop order as push indexes)
    ([2, 2, 2], "V0", [0, 1, 2]),
    ([3, 0, 2, 0], "V0", [1, 3, 2, 0]),
    ([None, 1, None], "V0", [1, 0, 2]),
    ([3, 0, 2, 0], "DISABLED", [0, 1, 2, 3]),
]


@pytest.mark.parametrize(("priorities", "mode", "expected"), ORDERS)
async def test_pop_order_is_priority_then_fifo(
    server: WandbServer,
    client: Client,
    priorities: list[int | None],
    mode: str,
    expected: list[int],
) -> None:
    server.state.add_queue("pq", prioritization_mode=mode)
    ids = []
    for n, priority in enumerate(priorities):
        extra = {"queueName": "pq"} | ({"priority": priority} if priority is not None else {})
        ids.append((await push(client, {**SPEC, "run_id": f"r{n}"}, **extra))["runQueueItemId"])
    popped = [(await pop(client, "pq")) for _ in priorities]
    assert [p["runQueueItemId"] for p in popped if p] == [ids[i] for i in expected]
    assert await pop(client, "pq") is None


async def test_push_takes_a_json_string_and_pop_returns_an_object(client: Client) -> None:
    pushed = await push(client, SPEC)
    assert isinstance(pushed["runSpec"], str)
    assert json.loads(pushed["runSpec"]) == SPEC
    popped = await pop(client)
    assert popped == {"runQueueItemId": pushed["runQueueItemId"], "runSpec": SPEC}


async def test_push_of_a_non_json_run_spec_is_a_graphql_error(client: Client) -> None:
    answer = await client.post(
        PUSH,
        {"entityName": "ent", "projectName": "model-registry", "queueName": "q1", "runSpec": "{"},
    )
    assert "JSONString is not valid JSON" in answer["errors"][0]["message"]


async def test_push_to_an_unknown_queue_names_it(client: Client) -> None:
    answer = await client.post(
        PUSH,
        {
            "entityName": "ent",
            "projectName": "model-registry",
            "queueName": "nope",
            "runSpec": "{}",
        },
    )
    assert answer["data"] == {"pushToRunQueueByName": None}
    assert answer["errors"][0]["message"] == "run queue ent/model-registry/nope not found"
    assert answer["errors"][0]["path"] == ["pushToRunQueueByName"]


async def test_queue_config_is_merged_and_templates_are_filled(
    server: WandbServer, client: Client
) -> None:
    server.state.add_queue(
        "tq",
        config={
            "resource": "kubernetes",
            "resource_args": {
                "kubernetes": {
                    "metadata": {"namespace": "{{ns}}", "labels": {"team": "ml"}},
                    "spec": {"parallelism": "{{workers}}"},
                }
            },
        },
    )
    spec = {**SPEC, "resource_args": {"kubernetes": {"metadata": {"labels": {"run": "x"}}}}}
    pushed = await push(
        client, spec, queueName="tq", templateVariableValues=json.dumps({"ns": "a", "workers": 4})
    )
    merged = json.loads(pushed["runSpec"])["resource_args"]["kubernetes"]
    assert merged == {
        "metadata": {"namespace": "a", "labels": {"team": "ml", "run": "x"}},
        "spec": {"parallelism": 4},
    }


async def test_pop_leases_and_ack_claims_once(server: WandbServer, client: Client) -> None:
    item_id = (await push(client, SPEC))["runQueueItemId"]
    await pop(client)
    assert server.state.item(item_id).state is ItemState.LEASED
    first = await client.data(ACK, {"itemId": item_id, "runId": "run00001"})
    second = await client.data(ACK, {"itemId": item_id, "runId": "run00002"})
    assert first == {"ackRunQueueItem": {"success": True}}
    assert second == {"ackRunQueueItem": {"success": False}}
    item = server.state.item(item_id)
    assert item.state is ItemState.CLAIMED
    assert item.associated_run_id == "run00001"
    # W&B creates the run, pending until the workload calls wandb.init.
    run = server.state.run("ent", "proj", "run00001")
    assert run is not None
    assert run.state == "pending"


async def test_ack_of_a_pending_item_fails(client: Client) -> None:
    item_id = (await push(client, SPEC))["runQueueItemId"]
    answer = await client.data(ACK, {"itemId": item_id, "runId": "r"})
    assert answer == {"ackRunQueueItem": {"success": False}}


async def test_ack_of_an_unknown_item_is_an_error(client: Client) -> None:
    answer = await client.post(ACK, {"itemId": "bm9wZQ==", "runId": "r"})
    assert answer["errors"][0]["message"] == "run queue item bm9wZQ== not found"


async def test_a_lapsed_lease_puts_the_item_back_first(
    server: WandbServer, client: Client, clock: Clock
) -> None:
    first = (await push(client, SPEC))["runQueueItemId"]
    second = (await push(client, SPEC))["runQueueItemId"]
    assert (await pop(client))["runQueueItemId"] == first  # type: ignore[index]
    clock.advance(59)
    assert (await pop(client))["runQueueItemId"] == second  # type: ignore[index]
    assert await pop(client) is None
    clock.advance(1)  # the first lease lapses, the second has 59 s left
    again = await pop(client)
    assert again is not None
    assert again["runQueueItemId"] == first
    item = server.state.item(first)
    assert item.pops == 2
    assert [s for _, s in item.history] == [
        ItemState.PENDING,
        ItemState.LEASED,
        ItemState.PENDING,
        ItemState.LEASED,
    ]


async def test_an_ack_after_the_lease_lapsed_fails(client: Client, clock: Clock) -> None:
    item_id = (await push(client, SPEC))["runQueueItemId"]
    await pop(client)
    clock.advance(61)
    answer = await client.data(ACK, {"itemId": item_id, "runId": "late"})
    assert answer == {"ackRunQueueItem": {"success": False}}


async def test_lease_time_is_configurable(
    server: WandbServer, client: Client, clock: Clock
) -> None:
    server.state.lease_seconds = 5
    item_id = (await push(client, SPEC))["runQueueItemId"]
    await pop(client)
    clock.advance(5)
    assert server.state.item(item_id).state is ItemState.LEASED  # lapses are seen on access
    assert server.state.queue_items(server.state.queue("ent", "model-registry", "q1")) == [
        server.state.item(item_id)
    ]
    assert server.state.item(item_id).state is ItemState.PENDING


async def test_fail_records_message_stage_and_files(server: WandbServer, client: Client) -> None:
    item_id = (await push(client, SPEC))["runQueueItemId"]
    await pop(client)
    variables = {
        "runQueueItemId": item_id,
        "message": "image pull failed for busybox:nope",
        "stage": "run",
        "filePaths": [f"{item_id}/error/error.log"],
    }
    assert await client.data(FAIL, variables) == {"failRunQueueItem": {"success": True}}
    item = server.state.item(item_id)
    assert item.state is ItemState.FAILED
    assert item.failure is not None
    assert (item.failure.message, item.failure.stage, item.failure.file_paths) == (
        "image pull failed for busybox:nope",
        "run",
        (f"{item_id}/error/error.log",),
    )
    # A failed item is never popped again and cannot be acked.
    assert await pop(client) is None
    ack = await client.data(ACK, {"itemId": item_id, "runId": "r"})
    assert ack == {"ackRunQueueItem": {"success": False}}


async def test_fail_without_file_paths(server: WandbServer, client: Client) -> None:
    item_id = (await push(client, SPEC))["runQueueItemId"]
    variables = {"runQueueItemId": item_id, "message": "m", "stage": "agent"}
    await client.data(FAIL, variables)
    failure = server.state.item(item_id).failure
    assert failure is not None
    assert failure.file_paths == ()


async def test_warnings_accumulate_without_changing_state(
    server: WandbServer, client: Client
) -> None:
    item_id = (await push(client, SPEC))["runQueueItemId"]
    await pop(client)
    for message in ["0/3 nodes are available: 3 Insufficient nvidia.com/gpu.", "still waiting"]:
        variables = {
            "runQueueItemId": item_id,
            "message": message,
            "stage": "Kubernetes",
            "filePaths": [],
        }
        assert await client.data(WARN, variables) == {
            "updateRunQueueItemWarning": {"success": True}
        }
    item = server.state.item(item_id)
    assert [w.message for w in item.warnings] == [
        "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
        "still waiting",
    ]
    assert {w.stage for w in item.warnings} == {"Kubernetes"}
    assert item.state is ItemState.LEASED


async def test_requeue_is_a_new_item_with_the_same_run_id(
    server: WandbServer, client: Client
) -> None:
    first = (await push(client, {**SPEC, "run_id": "runcccc1"}))["runQueueItemId"]
    await pop(client)
    await client.data(ACK, {"itemId": first, "runId": "runcccc1"})
    requeued = await push(client, {**SPEC, "run_id": "runcccc1", "_resume_count": 1})
    assert requeued["runQueueItemId"] != first
    popped = await pop(client)
    assert popped is not None
    assert popped["runSpec"]["run_id"] == "runcccc1"
    assert popped["runSpec"]["_resume_count"] == 1


async def test_queue_items_are_listed_with_their_states(
    server: WandbServer, client: Client
) -> None:
    a = (await push(client, SPEC))["runQueueItemId"]
    b = (await push(client, SPEC, priority=1))["runQueueItemId"]
    await pop(client)
    query = """query Items($entity: String!) { project(entityName: $entity, name: "model-registry") {
        runQueue(name: "q1") { runQueueItems { edges { node { id state priority } } } } } }"""
    data = await client.data(query, {"entity": "ent"})
    edges = data["project"]["runQueue"]["runQueueItems"]["edges"]
    assert {e["node"]["id"]: e["node"]["state"] for e in edges} == {a: "PENDING", b: "LEASED"}
