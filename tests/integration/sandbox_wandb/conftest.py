"""A W&B sandbox server on a loopback port and an aiohttp client that talks GraphQL to it."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from launch_agent.sandbox.wandb import LaunchState, WandbServer


def basic_auth(key: str) -> str:
    """The header W&B clients send: Basic base64("api:" + key)."""
    return "Basic " + base64.b64encode(f"api:{key}".encode()).decode()


class Clock:
    """A settable wall clock, so lease expiry is tested without sleeping."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Client:
    session: aiohttp.ClientSession
    url: str

    async def post(self, query: str, variables: dict[str, Any] | None = None, **extra: Any) -> Any:
        body = {"query": query, "variables": variables or {}, **extra}
        async with self.session.post(f"{self.url}/graphql", json=body) as response:
            assert response.status == 200, await response.text()
            return await response.json()

    async def data(self, query: str, variables: dict[str, Any] | None = None, **extra: Any) -> Any:
        answer = await self.post(query, variables, **extra)
        assert "errors" not in answer, answer
        return answer["data"]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def server(clock: Clock) -> AsyncIterator[WandbServer]:
    state = LaunchState(entity="ent", lease_seconds=60, clock=clock)
    state.add_queue("q1")
    async with WandbServer(state) as wb:
        yield wb


@pytest.fixture
async def client(server: WandbServer) -> AsyncIterator[Client]:
    timeout = aiohttp.ClientTimeout(total=10)
    headers = {"Authorization": basic_auth(server.api_key)}
    async with aiohttp.ClientSession(headers=headers, timeout=timeout) as session:
        yield Client(session, server.url)


POP = """
mutation popFromRunQueue($entity: String!, $project: String!, $queueName: String!,
                         $launchAgentId: ID) {
  popFromRunQueue(input: {entityName: $entity, projectName: $project,
                          queueName: $queueName, launchAgentId: $launchAgentId}) {
    runQueueItemId
    runSpec
  }
}
"""

ACK = """
mutation ackRunQueueItem($itemId: ID!, $runId: String!) {
  ackRunQueueItem(input: { runQueueItemId: $itemId, runName: $runId }) { success }
}
"""

PUSH = """
mutation pushToRunQueueByName($entityName: String!, $projectName: String!,
                              $queueName: String!, $runSpec: JSONString!, $priority: Int,
                              $templateVariableValues: JSONString) {
  pushToRunQueueByName(input: {entityName: $entityName, projectName: $projectName,
                               queueName: $queueName, runSpec: $runSpec, priority: $priority,
                               templateVariableValues: $templateVariableValues}) {
    runQueueItemId
    runSpec
  }
}
"""

FAIL = """
mutation failRunQueueItem($runQueueItemId: ID!, $message: String!, $stage: String!,
                          $filePaths: [String!]) {
  failRunQueueItem(input: {runQueueItemId: $runQueueItemId message: $message stage: $stage
                           filePaths: $filePaths}) { success }
}
"""

WARN = FAIL.replace("failRunQueueItem", "updateRunQueueItemWarning")


def pop_vars(queue: str = "q1", agent: str | None = None) -> dict[str, Any]:
    return {
        "entity": "ent",
        "project": "model-registry",
        "queueName": queue,
        "launchAgentId": agent,
    }


SPEC: dict[str, Any] = {
    "resource": "kubernetes",
    "resource_args": {"kubernetes": {"kind": "Job"}},
    "docker": {"docker_image": "busybox:latest"},
    "entity": "ent",
    "project": "proj",
    "overrides": {"args": [], "run_config": {}, "entry_point": []},
}
