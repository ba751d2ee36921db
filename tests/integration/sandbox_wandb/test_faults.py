"""Fault injection and accounting on the W&B server, seen by a real HTTP client."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from launch_agent.sandbox.faults import FaultRule, RequestLog
from launch_agent.sandbox.wandb import ItemState, LaunchState, WandbServer
from tests.integration.sandbox_wandb.conftest import POP, SPEC, Client, basic_auth, pop_vars

VIEWER = "query Viewer { viewer { id } }"


async def status_of(client: Client, query: str = VIEWER, variables: dict | None = None) -> int:  # type: ignore[type-arg]
    body = {"query": query, "variables": variables or {}}
    async with client.session.post(f"{client.url}/graphql", json=body) as response:
        await response.read()
        return response.status


async def test_http_error_for_one_operation_only(server: WandbServer, client: Client) -> None:
    item = server.state.push_by_name("ent", "model-registry", "q1", SPEC)
    server.faults.add(FaultRule("popFromRunQueue", status=503, message="try later"))
    async with client.session.post(
        f"{client.url}/graphql", json={"query": POP, "variables": pop_vars()}
    ) as response:
        assert response.status == 503
        assert await response.json() == {"errors": [{"message": "try later"}]}
    assert item.state is ItemState.PENDING  # the fault answered before anything changed
    assert await status_of(client) == 200
    assert [(e.key, e.status) for e in server.log] == [("popFromRunQueue", 503), ("Viewer", 200)]


async def test_a_rule_fires_a_limited_number_of_times(server: WandbServer, client: Client) -> None:
    server.faults.add(FaultRule("Viewer", status=500, times=2))
    assert [await status_of(client) for _ in range(4)] == [500, 500, 200, 200]


async def test_rates_are_seeded(server: WandbServer, client: Client) -> None:
    rule = server.faults.add(FaultRule("Viewer", status=429, rate=0.5))
    statuses = [await status_of(client) for _ in range(40)]
    assert statuses.count(429) == rule.fired
    assert 5 < rule.fired < 35


async def test_graphql_error_answers_200_with_errors(server: WandbServer, client: Client) -> None:
    server.faults.add(FaultRule("Viewer", graphql_error=True, message="internal"))
    answer = await client.post(VIEWER)
    assert answer == {"data": None, "errors": [{"message": "internal"}]}


async def test_a_delay_still_answers(server: WandbServer, client: Client) -> None:
    server.faults.add(FaultRule("Viewer", delay=0.05))
    assert await client.data(VIEWER) == {"viewer": {"id": "VXNlcjox"}}
    (entry,) = list(server.log)
    assert entry.seconds >= 0.05


async def test_a_dropped_connection(server: WandbServer, client: Client) -> None:
    item = server.state.push_by_name("ent", "model-registry", "q1", SPEC)
    server.faults.add(FaultRule("popFromRunQueue", drop=True, times=1))
    with pytest.raises(aiohttp.ClientError):
        await client.post(POP, pop_vars())
    assert item.state is ItemState.PENDING
    assert (await client.data(POP, pop_vars()))["popFromRunQueue"]["runQueueItemId"] == item.id


async def test_batched_documents_match_field_rules(server: WandbServer, client: Client) -> None:
    server.faults.add(FaultRule("field:popFromRunQueue", status=502))
    batched = 'mutation Mine { a: popFromRunQueue(input: {entityName: "ent", projectName: "model-registry", queueName: "q1"}) { runQueueItemId } }'
    assert await status_of(client, batched) == 502
    assert await status_of(client) == 200


async def test_an_outage_fails_every_route_until_it_ends(
    server: WandbServer, client: Client
) -> None:
    server.faults.outage(60, status=502)
    assert await status_of(client) == 502
    stream = f"{client.url}/files/ent/model-registry/r/file_stream"
    async with client.session.post(stream, json={}) as response:
        assert response.status == 502
    server.faults.end_outage()
    assert await status_of(client) == 200


async def test_refused_connections_then_back(server: WandbServer, client: Client) -> None:
    assert await status_of(client) == 200  # a kept-alive connection now exists
    port = server.port
    await server.refuse_connections()
    with pytest.raises(aiohttp.ClientError):
        await status_of(client)  # the kept-alive connection is cut
    async with aiohttp.ClientSession(headers={"Authorization": basic_auth(server.api_key)}) as s:
        with pytest.raises(aiohttp.ClientConnectorError):
            await status_of(Client(s, server.url))  # nothing listens
    await server.accept_connections()
    assert server.port == port
    assert await status_of(client) == 200


async def test_upload_faults_have_their_own_key(server: WandbServer, client: Client) -> None:
    server.faults.add(FaultRule("REST upload", status=500))
    query = """mutation CreateRunFiles { createRunFiles(input: {entityName: "ent",
      projectName: "p", runName: "r", files: ["f.txt"]}) { files { uploadUrl } } }"""
    url = (await client.data(query))["createRunFiles"]["files"][0]["uploadUrl"]
    async with client.session.put(url, data=b"x") as response:
        assert response.status == 500
    assert server.log.count("REST upload") == 1


@pytest.fixture
async def small_log_server() -> AsyncIterator[WandbServer]:
    async with WandbServer(LaunchState(), log=RequestLog(maxlen=5)) as wb:
        yield wb


async def test_the_log_is_bounded_and_counters_are_not(small_log_server: WandbServer) -> None:
    headers = {"Authorization": basic_auth(small_log_server.api_key)}
    async with aiohttp.ClientSession(headers=headers) as session:
        client = Client(session, small_log_server.url)
        for _ in range(12):
            await client.data(VIEWER)
    assert len(small_log_server.log) == 5
    assert small_log_server.log.count("Viewer") == 12


async def test_a_rate_limit_answers_as_w_and_b_does(server: WandbServer, client: Client) -> None:
    limit = server.limit_rate(2, window=30.0)
    answers = []
    for _ in range(3):
        async with client.session.post(
            f"{client.url}/graphql", json={"query": "query Viewer { viewer { entity } }"}
        ) as response:
            answers.append((response.status, dict(response.headers), await response.json()))
    (s1, h1, _), (s2, h2, _), (s3, h3, body) = answers
    assert (s1, s2, s3) == (200, 200, 429)
    assert (h1["RateLimit-Limit"], h1["RateLimit-Remaining"]) == ("2", "1")
    assert h2["RateLimit-Remaining"] == "0"
    assert 1 <= int(h2["RateLimit-Reset"]) <= 30
    assert h3["Retry-After"] == h3["RateLimit-Reset"]
    assert body == {
        "errors": [{"message": "rate limit exceeded: too many requests for this API key"}]
    }
    assert (limit.served, limit.rejected) == (2, 1)
    server.unlimit_rate()
    assert await status_of(client) == 200
