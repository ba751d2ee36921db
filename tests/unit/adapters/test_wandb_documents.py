"""The agent's GraphQL documents against what the real wandb client sends, and against the SDL.

- Golden: each single operation equals the recorded real-client document (graphql-core parse +
  print, so only layout may differ) and uses the same variable names.
- SDL anchor: the partial SDL accepts every recorded real-client operation with its recorded
  variables, so it describes W&B's traffic and not only ours; and it rejects near misses.
- Batching: batched documents validate, keep input order, never let a user string into a name,
  and repeat exactly the single operation's root field and selection under aliases.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from graphql import FieldNode, OperationDefinitionNode, parse, print_ast
from hypothesis import given, settings
from hypothesis import strategies as st

from launch_agent.adapters import wandb_documents as docs
from tests.unit.adapters.wandb_sdl import check, normalize

ROOT = Path(__file__).resolve().parents[3]
RECORDED_FILE = ROOT / "tests" / "fixtures" / "wandb" / "wandb-graphql-operations.jsonl"


def _recorded() -> dict[str, dict[str, Any]]:
    lines = RECORDED_FILE.read_text(encoding="utf-8").splitlines()
    return {op["operation"]: op for op in map(json.loads, filter(None, lines))}


RECORDED = _recorded()


def _requests() -> list[docs.Request]:
    """One request per operation the client sends, built by the client's own helpers."""
    return [
        docs.single("Viewer", {}, "viewer"),
        docs.single("ProjectRunQueues", {"entity": "ent", "projectName": "model-registry"}, "p"),
        docs.single(
            "createLaunchAgent",
            {
                "entity": "ent",
                "project": "model-registry",
                "queues": ["UnVuUXVldWU6MQ=="],
                "hostname": "h",
                "agentConfig": "{}",
                "version": "launch-agent@0.1.0",
            },
            "createLaunchAgent",
        ),
        docs.single("LaunchAgent", {"agentId": "a"}, "launchAgent"),
        docs.single("updateLaunchAgent", {"agentId": "a", "agentStatus": "RUNNING"}, "u"),
        docs.pop_batch("ent", ["q1"], "TGF1bmNoQWdlbnQ6MQ=="),
        docs.single("ackRunQueueItem", {"itemId": "i", "runId": "r"}, "ackRunQueueItem"),
        docs.single(
            "failRunQueueItem",
            {"runQueueItemId": "i", "message": "m", "stage": "agent", "filePaths": ["f"]},
            "failRunQueueItem",
        ),
        docs.single(
            "updateRunQueueItemWarning",
            {"runQueueItemId": "i", "message": "m", "stage": "run", "filePaths": []},
            "updateRunQueueItemWarning",
        ),
        docs.run_stopped_batch([("ent", "proj", "run1")]),
        docs.single("RunState", {"project": "p", "entity": "e", "name": "r"}, "project"),
        docs.push_to_run_queue_by_name("ent", "model-registry", "q1", {"resource": "kubernetes"}),
        docs.single("GetSweepState", {"entity": "e", "project": "p", "sweep": "s"}, "project"),
        docs.single(
            "SweepWithRuns",
            {"entity": "e", "project": "p", "sweep": "s", "specs": ["{}"]},
            "project",
        ),
        docs.single(
            "UpsertSweep",
            {"id": "U3dlZXA6MQ==", "state": "CANCELED", "entityName": "e", "projectName": "p"},
            "upsertSweep",
        ),
        docs.single(
            "GetRunQueueMetadata",
            {"projectName": "model-registry", "entityName": "ent", "runQueue": "q1"},
            "project",
        ),
        docs.single("GetDefaultResourceConfig", {"entityName": "ent", "id": "x"}, "entity"),
        docs.single(
            "GetRunQueueItem",
            {"projectName": "model-registry", "entityName": "ent", "runQueue": "q1", "itemId": "i"},
            "project",
        ),
    ]


@pytest.mark.parametrize("request_", _requests(), ids=lambda r: r.operation)
def test_single_operation_equals_the_real_client(request_: docs.Request) -> None:
    recorded = RECORDED[request_.operation]
    assert normalize(request_.document) == normalize(recorded["query"])
    assert set(request_.variables) == set(recorded["variables_example"])


@pytest.mark.parametrize("request_", _requests(), ids=lambda r: r.operation)
def test_every_request_validates_with_its_variables(request_: docs.Request) -> None:
    assert check(request_.document, request_.variables) == []


def test_the_queue_listing_is_the_public_apis_with_state_and_run_spec() -> None:
    """`GetRunQueueItems` is wandb's `RunQueue._get_items` document with two more node fields
    (no recording to equal: the real client selects `id` only); it validates against the SDL."""
    request = docs.run_queue_items("ent", "q1")
    assert check(request.document, request.variables) == []
    assert "runQueueItems(first: 100)" in normalize(request.document)
    assert docs.RUN_QUEUE_ITEMS_PAGE == 100


def test_every_single_document_is_covered_by_a_recording() -> None:
    assert set(docs.SINGLE_OPERATIONS) <= set(RECORDED)


@pytest.mark.parametrize("operation", sorted(RECORDED))
def test_sdl_accepts_every_recorded_real_client_operation(operation: str) -> None:
    recorded = RECORDED[operation]
    assert check(recorded["query"], recorded["variables_example"]) == []


NEAR_MISSES = [
    (
        "mutation m($e: String!, $p: String!, $q: String!) { popFromRunQueue(input:"
        " {entityName: $e, projectName: $p, queueName: $q}) { runQueueItemID } }",
        None,
        "Cannot query field 'runQueueItemID'",
    ),
    (
        'query { project(entity: "e", name: "p") { runQueues { id } } }',
        None,
        "Unknown argument 'entity'",
    ),
    (
        "query q($id: ID!) { launchAgent(id: $id) { stopPolling } }",
        {},
        "Expected a value of non-null type 'ID!' to be provided.",
    ),
    (
        "query q($n: Int!) { project(name: $n) { id } }",
        None,
        "Variable '$n' of type 'Int!' used in position expecting type 'String'.",
    ),
    (
        "mutation m($i: ID!) { ackRunQueueItem(input: {runQueueItemId: $i}) { success } }",
        None,
        "to include required field 'runName'",
    ),
    ("query { viewer { id }", None, "syntax"),
    (docs.RUN_STATE, {"project": "p", "entity": "e", "name": "r", "extra": 1}, "not declared"),
]


@pytest.mark.parametrize(("document", "variables", "expected"), NEAR_MISSES)
def test_sdl_rejects_near_misses(
    document: str, variables: dict[str, Any] | None, expected: str
) -> None:
    problems = check(document, variables)
    assert any(expected in p for p in problems), problems


POP_TABLE = [
    (["a"], ("popFromRunQueue",), {"queueName": "a"}),
    (["a", "b"], ("q0", "q1"), {"queueName_0": "a", "queueName_1": "b"}),
    (
        ["z", "y", "x"],
        ("q0", "q1", "q2"),
        {"queueName_0": "z", "queueName_1": "y", "queueName_2": "x"},
    ),
]


@pytest.mark.parametrize(("queues", "keys", "names"), POP_TABLE)
def test_pop_batch_keys_and_variables(
    queues: list[str], keys: tuple[str, ...], names: dict[str, str]
) -> None:
    request = docs.pop_batch("ent", queues, "agent-1")
    assert request.operation == "popFromRunQueue"
    assert request.keys == keys
    shared = {"entity": "ent", "project": "model-registry", "launchAgentId": "agent-1"}
    assert request.variables == shared | names


STOP_TABLE = [
    ([("e", "p", "r")], ("project",), {"entityName": "e", "projectName": "p", "runId": "r"}),
    (
        [("e", "p", "r1"), ("f", "q", "r2")],
        ("s0", "s1"),
        {
            "entityName_0": "e",
            "projectName_0": "p",
            "runId_0": "r1",
            "entityName_1": "f",
            "projectName_1": "q",
            "runId_1": "r2",
        },
    ),
]


@pytest.mark.parametrize(("runs", "keys", "variables"), STOP_TABLE)
def test_run_stopped_batch_keys_and_variables(
    runs: list[tuple[str, str, str]], keys: tuple[str, ...], variables: dict[str, str]
) -> None:
    request = docs.run_stopped_batch(runs)
    assert request.operation == "RunStoppedStatus"
    assert request.keys == keys
    assert request.variables == variables


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: docs.pop_batch("e", [], None), "at least one queue"),
        (lambda: docs.run_stopped_batch([]), "at least one run"),
    ],
)
def test_batch_builders_refuse_bad_input(call: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def _root_fields(document: str) -> list[FieldNode]:
    operation = parse(document).definitions[0]
    assert isinstance(operation, OperationDefinitionNode)
    return [f for f in operation.selection_set.selections if isinstance(f, FieldNode)]


def _without_alias(field: FieldNode, rename: dict[str, str]) -> str:
    """The field printed without its alias, with batch variable names mapped to single ones."""
    printed = print_ast(
        FieldNode(name=field.name, arguments=field.arguments, selection_set=field.selection_set)
    )
    for batch_name, single_name in rename.items():
        printed = re.sub(rf"\${re.escape(batch_name)}\b", f"${single_name}", printed)
    return printed


@pytest.mark.parametrize("size", [2, 3, 7])
def test_batched_pop_repeats_the_real_root_field(size: int) -> None:
    (single,) = _root_fields(docs.POP_FROM_RUN_QUEUE)
    request = docs.pop_batch("e", [f"q{i}" for i in range(size)], "a")
    fields = _root_fields(request.document)
    assert [f.alias.value if f.alias else None for f in fields] == list(request.keys)
    for i, field in enumerate(fields):
        assert _without_alias(field, {f"queueName_{i}": "queueName"}) == print_ast(single)


@pytest.mark.parametrize("size", [2, 5])
def test_batched_stop_check_repeats_the_real_root_field(size: int) -> None:
    (single,) = _root_fields(docs.RUN_STOPPED_STATUS)
    request = docs.run_stopped_batch([("e", "p", f"r{i}") for i in range(size)])
    fields = _root_fields(request.document)
    assert [f.alias.value if f.alias else None for f in fields] == list(request.keys)
    for i, field in enumerate(fields):
        rename = {
            f"projectName_{i}": "projectName",
            f"entityName_{i}": "entityName",
            f"runId_{i}": "runId",
        }
        assert _without_alias(field, rename) == print_ast(single)


# Any string, including GraphQL punctuation and `$`: names must never reach the document.
NAMES = st.text(min_size=1, max_size=20)


@settings(max_examples=60, deadline=None)
@given(queues=st.lists(NAMES, min_size=1, max_size=12, unique=True), entity=NAMES)
def test_pop_batches_validate_and_depend_only_on_size(queues: list[str], entity: str) -> None:
    request = docs.pop_batch(entity, queues, "agent")
    assert check(request.document, request.variables) == []
    assert len(request.keys) == len(queues) == len(set(request.keys))
    assert (
        request.document
        == docs.pop_batch("x", [f"n{i}" for i in range(len(queues))], None).document
    )
    by_key = [
        request.variables["queueName" if len(queues) == 1 else f"queueName_{i}"]
        for i in range(len(queues))
    ]
    assert by_key == queues


@settings(max_examples=60, deadline=None)
@given(runs=st.lists(st.tuples(NAMES, NAMES, NAMES), min_size=1, max_size=30, unique=True))
def test_stop_check_batches_validate_and_depend_only_on_size(
    runs: list[tuple[str, str, str]],
) -> None:
    request = docs.run_stopped_batch(runs)
    assert check(request.document, request.variables) == []
    assert len(request.keys) == len(runs) == len(set(request.keys))
    other = docs.run_stopped_batch([("e", "p", f"r{i}") for i in range(len(runs))])
    assert request.document == other.document


PUSH_TABLE = [
    ({}, {"entityName", "projectName", "queueName", "runSpec"}),
    ({"priority": 1}, {"entityName", "projectName", "queueName", "runSpec", "priority"}),
    (
        {"priority": 0, "template_variable_values": {"gpus": 2}},
        {"entityName", "projectName", "queueName", "runSpec", "priority", "templateVariableValues"},
    ),
]


@pytest.mark.parametrize(("options", "variables"), PUSH_TABLE)
def test_push_adds_optional_variables_only_when_set(
    options: dict[str, Any], variables: set[str]
) -> None:
    request = docs.push_to_run_queue_by_name("e", "model-registry", "q", {"a": [1]}, **options)
    assert set(request.variables) == variables
    assert check(request.document, request.variables) == []
    # JSONString on the wire: the spec travels serialised.
    assert json.loads(request.variables["runSpec"]) == {"a": [1]}
