"""GraphQL over HTTP as W&B serves it: names, aliases, batching, variables, errors, auth."""

from __future__ import annotations

import base64
import json
from typing import Any

import aiohttp
import pytest

from launch_agent.sandbox.wandb import ItemState, WandbServer
from tests.integration.sandbox_wandb.conftest import SPEC, Client, basic_auth

BATCHED_POPS = """
mutation PopMany($entity: String!, $agent: ID) {
  a: popFromRunQueue(input: {entityName: $entity, projectName: "model-registry",
                             queueName: "q1", launchAgentId: $agent}) { runQueueItemId runSpec }
  b: popFromRunQueue(input: {entityName: $entity, projectName: "model-registry",
                             queueName: "q2", launchAgentId: $agent}) { runQueueItemId }
  c: popFromRunQueue(input: {entityName: $entity, projectName: "model-registry",
                             queueName: "q1", launchAgentId: $agent}) { runQueueItemId }
}
"""


async def test_operation_name_is_read_from_the_document(
    server: WandbServer, client: Client
) -> None:
    await client.data(
        "query EntityIsTeam($e: String!) { entity(name: $e) { id isTeam } }", {"e": "ent"}
    )
    assert server.log.count("EntityIsTeam") == 1
    assert server.log.count("field:entity") == 1


async def test_an_empty_operation_name_means_none(server: WandbServer, client: Client) -> None:
    # What wandb 0.31.0 sends for the launch API's documents (observed on the wire).
    query = "query EntityIsTeam($e: String!) { entity(name: $e) { isTeam } }"
    data = await client.data(query, {"e": "ent"}, operationName="")
    assert data == {"entity": {"isTeam": False}}
    assert server.log.count("EntityIsTeam") == 1


async def test_anonymous_documents_are_keyed_by_their_first_root_field(
    server: WandbServer, client: Client
) -> None:
    await client.data("{ serverInfo { features { name } } }")
    assert server.log.count("serverInfo") == 1


async def test_aliased_root_fields_pop_several_queues_in_one_request(
    server: WandbServer, client: Client
) -> None:
    server.state.add_queue("q2")
    first = server.state.push_by_name("ent", "model-registry", "q1", SPEC)
    second = server.state.push_by_name("ent", "model-registry", "q1", SPEC)
    data = await client.data(BATCHED_POPS, {"entity": "ent", "agent": None})
    assert data == {
        "a": {"runQueueItemId": first.id, "runSpec": SPEC},
        "b": None,
        "c": {"runQueueItemId": second.id},
    }
    assert server.log.count("PopMany") == 1
    assert server.log.count("field:popFromRunQueue") == 3
    assert first.state is ItemState.LEASED
    assert second.state is ItemState.LEASED


async def test_run_stopped_status_for_many_runs_with_aliases(
    server: WandbServer, client: Client
) -> None:
    for name in ["r1", "r2", "r3"]:
        server.state.upsert_run("ent", "proj", name)
    server.state.stop_run("ent", "proj", "r2")
    query = """query Stopped($p: String, $e: String) {
      s1: project(name: $p, entityName: $e) { run(name: "r1") { stopped } }
      s2: project(name: $p, entityName: $e) { run(name: "r2") { stopped } }
      s3: project(name: $p, entityName: $e) { r: run(name: "r3") { stopped } }
      gone: project(name: $p, entityName: $e) { run(name: "nope") { stopped } }
    }"""
    data = await client.data(query, {"p": "proj", "e": "ent"})
    assert data == {
        "s1": {"run": {"stopped": False}},
        "s2": {"run": {"stopped": True}},
        "s3": {"r": {"stopped": False}},
        "gone": {"run": None},
    }


async def test_two_operations_need_an_operation_name(client: Client) -> None:
    document = "query A { viewer { id } } query B { serverInfo { features { name } } }"
    answer = await client.post(document)
    assert answer["errors"][0]["message"] == (
        "Must provide operation name if query contains multiple operations."
    )
    chosen = await client.data(document, operationName="B")
    assert chosen == {"serverInfo": {"features": []}}


ERRORS = [
    ("{ viewer { idd } }", {}, "Cannot query field 'idd' on type 'User'. Did you mean 'id'?"),
    ("{ nope }", {}, "Cannot query field 'nope' on type 'Query'."),
    ("query { viewer { id }", {}, "Syntax Error: Expected Name, found <EOF>."),
    ("query Q($e: String!) { entity(name: $e) { id } }", {}, "Variable '$e'"),
    (
        'mutation { popFromRunQueue(input: {queueName: "q1"}) { runQueueItemId } }',
        {},
        "entityName",
    ),
    ("query Q($n: Int) { viewer { id } }", {"n": "seven"}, "Variable '$n'"),
]


@pytest.mark.parametrize(("document", "variables", "message"), ERRORS)
async def test_invalid_documents_get_graphql_errors(
    client: Client, document: str, variables: dict[str, Any], message: str
) -> None:
    answer = await client.post(document, variables)
    # graphql-core's wording of some messages differs between 3.2 and 3.3: match the part that
    # names the problem.
    assert message in answer["errors"][0]["message"]
    assert answer.get("data") is None


async def test_unknown_operation_name(client: Client) -> None:
    answer = await client.post("query A { viewer { id } }", operationName="Z")
    assert answer["errors"][0]["message"] == "Unknown operation named 'Z'."


async def test_viewer_is_the_api_key_owner(server: WandbServer, client: Client) -> None:
    server.state.add_entity("team-a", is_team=True)
    data = await client.data(
        "{ viewer { entity username flags teams { edges { node { name } } } } }"
    )
    assert data["viewer"] == {
        "entity": "ent",
        "username": "sandbox-user",
        "flags": "{}",
        "teams": {"edges": [{"node": {"name": "team-a"}}]},
    }


AUTH = [
    (None, 401),
    ("Basic " + "!!!", 401),
    ("Bearer " + "0123456789abcdef0123456789abcdef01234567", 401),
    (basic_auth("f" * 40), 401),
]


@pytest.mark.parametrize(("header", "status"), AUTH)
async def test_a_wrong_api_key_is_a_401(
    server: WandbServer, header: str | None, status: int
) -> None:
    headers = {"Authorization": header} if header else {}
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(f"{server.url}/graphql", json={"query": "{ viewer { id } }"}) as r:
            assert r.status == status
            assert (await r.json())["errors"][0]["message"] == "invalid API key"
        stream = f"{server.url}/files/ent/model-registry/x/file_stream"
        async with session.post(stream, json={}) as r:
            assert r.status == 401
    assert server.log.count("graphql") == 1  # refused before the body was read


async def test_the_right_key_with_any_user_name(server: WandbServer) -> None:
    token = base64.b64encode(f"someone:{server.api_key}".encode()).decode()
    headers = {"Authorization": f"Basic {token}"}
    query = {"query": "{ viewer { id } }"}
    async with (
        aiohttp.ClientSession(headers=headers) as session,
        session.post(f"{server.url}/graphql", json=query) as r,
    ):
        assert r.status == 200


BAD_BODIES = [
    (b"not json", "request body is not JSON"),
    (json.dumps([{"query": "{ viewer { id } }"}]).encode(), "request body must be an object"),
    (json.dumps({"query": "{ viewer { id } }", "variables": []}).encode(), "`variables` must"),
]


@pytest.mark.parametrize(("body", "message"), BAD_BODIES)
async def test_a_malformed_request_is_a_400(client: Client, body: bytes, message: str) -> None:
    async with client.session.post(f"{client.url}/graphql", data=body) as response:
        assert response.status == 400
        assert message in (await response.json())["errors"][0]["message"]


async def test_unknown_paths_are_404(server: WandbServer, client: Client) -> None:
    async with client.session.get(f"{client.url}/api/v1/whatever") as response:
        assert response.status == 404
    assert server.log.count("REST other") == 1
