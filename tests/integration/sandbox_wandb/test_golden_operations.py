"""Every document the real wandb 0.31.0 client sends gets a valid answer of the right shape.

The documents and example variables are the recorded ones in
`tests/fixtures/wandb/wandb-graphql-operations.jsonl`; ids in the examples are replaced by ids of
objects seeded in the sandbox (W&B ids are opaque). "Right shape" means: no GraphQL errors and
every field the document selects (under its alias) is present in the answer, recursively.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from graphql import FieldNode, OperationDefinitionNode, SelectionSetNode, parse

from launch_agent.sandbox.wandb import ItemState, WandbServer
from tests.integration.sandbox_wandb.conftest import SPEC, Client

ROOT = Path(__file__).resolve().parents[3]
GOLDEN = ROOT / "tests" / "fixtures" / "wandb" / "wandb-graphql-operations.jsonl"
OPERATIONS = [json.loads(line) for line in GOLDEN.read_text().splitlines() if line.strip()]


def missing_fields(selection: SelectionSetNode, data: Any, path: str = "") -> list[str]:
    """Paths of selected fields absent from `data` (lists are checked element by element)."""
    if isinstance(data, list):
        return [p for element in data for p in missing_fields(selection, element, path)]
    if data is None:
        return []
    problems: list[str] = []
    for node in selection.selections:
        assert isinstance(node, FieldNode)
        key = node.alias.value if node.alias else node.name.value
        if not isinstance(data, dict) or key not in data:
            problems.append(f"{path}.{key}")
        elif node.selection_set is not None:
            problems += missing_fields(node.selection_set, data[key], f"{path}.{key}")
    return problems


def seed(server: WandbServer) -> dict[str, dict[str, Any]]:
    """Objects the examples refer to, and the variables that point at them."""
    state = server.state
    queue = state.queue("ent", "model-registry", "q1")
    agent = state.create_agent("ent", "model-registry", [queue.id], "agent-host")
    leased = state.push(queue, SPEC)
    failing = state.push(queue, SPEC)
    state.pop(queue, agent.id)
    state.pop(queue, agent.id)
    state.upsert_run("ent", "proj", "runbbbb1")
    state.add_sweep("ent", "proj", "swp00001")
    sweep = state.add_sweep("ent", "proj", "swp00002")
    sweep.runs.append("runbbbb1")
    assert leased.state is ItemState.LEASED
    configured = state.add_queue(
        "q-config",
        config={"resource": "kubernetes", "resource_args": {"kubernetes": {"spec": {}}}},
        template_variables={"gpus": {"type": "integer", "default": 1}},
    )
    return {
        "GetRunQueueMetadata": {"runQueue": configured.name},
        "GetDefaultResourceConfig": {"id": configured.config_id},
        "createLaunchAgent": {"queues": [queue.id]},
        "LaunchAgent": {"agentId": agent.id},
        "popFromRunQueue": {"launchAgentId": agent.id},
        "updateLaunchAgent": {"agentId": agent.id},
        "ackRunQueueItem": {"itemId": leased.id},
        "failRunQueueItem": {"runQueueItemId": failing.id, "filePaths": [f"{failing.id}/e.log"]},
        "updateRunQueueItemWarning": {"runQueueItemId": failing.id},
        "GetRunQueueItem": {"itemId": failing.id},
        "UpsertSweep": {"id": sweep.id},
    }


def test_the_golden_file_has_every_operation_the_agent_needs() -> None:
    names = {op["operation"] for op in OPERATIONS}
    assert {"Viewer", "popFromRunQueue", "ackRunQueueItem", "CreateRunFiles"} <= names
    assert len(OPERATIONS) >= 20


@pytest.mark.parametrize("recorded", OPERATIONS, ids=[op["operation"] for op in OPERATIONS])
async def test_recorded_operation_gets_a_valid_answer(
    server: WandbServer, client: Client, recorded: dict[str, Any]
) -> None:
    overrides = seed(server)
    if recorded["operation"] == "popFromRunQueue":
        server.state.push_by_name("ent", "model-registry", "q1", SPEC)
    variables = {**recorded["variables_example"], **overrides.get(recorded["operation"], {})}
    # wandb-core names its documents; the launch API's hand-written ones arrive without a name.
    extra = {"operationName": recorded["operation"]} if recorded["origin"] == "wandb-core" else {}
    answer = await client.post(recorded["query"], variables, **extra)
    assert "errors" not in answer, answer
    operation = parse(recorded["query"]).definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    assert missing_fields(operation.selection_set, answer["data"]) == []
    # Every root field answers something: null only where W&B answers null (an empty queue).
    assert all(value is not None for value in answer["data"].values()), answer
    assert server.log.count(recorded["operation"]) == 1
