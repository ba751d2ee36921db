"""The GraphQL documents the agent sends to W&B, and the batched documents built from them.

Single operations are the documents wandb 0.31.0 sends (`sdk/launch/api.py`), with the same
operation names, variable names and selections, so the W&B server sees the traffic it already
serves for `wandb launch-agent`. A unit test compares each one with the recorded real-client
document (`reference/wandb-graphql-operations.jsonl`) structurally, ignoring whitespace.

Two operations are batched, because the agent would otherwise pay one request per queue on
every poll tick and one request per running run on every stop check:

- `popFromRunQueue` for several queues is one mutation with one aliased root field per queue
  (`q0: popFromRunQueue(...)`, `q1: ...`). GraphQL executes mutation root fields in order, one
  after the other, so this is the same sequence of pops the reference makes, in one round trip.
- `RunStoppedStatus` for several runs is one query with one aliased `project` root field per run
  (`s0: project(...) { run(...) { stopped } }`).

Aliases stay at the root so any server (and the sandbox) that supports aliased root fields can
answer. Variable names are built from a fixed prefix and the index of the entry (`queueName_0`,
`runId_3`); a user string never becomes part of a name, so names cannot collide with each other
or with the shared variables, and the document depends only on the batch size, which makes it
cacheable. A batch of one is the exact single document, so a one-queue agent sends byte for byte
what the reference sends. The helpers return the document, its variables and the response keys
to read, in input order.

Pure: no I/O. `launch_agent.adapters.wandb_client` sends these.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

# The project that holds run queues and launch agents (`LAUNCH_DEFAULT_PROJECT`).
LAUNCH_PROJECT = "model-registry"

VIEWER = """
query Viewer {
  viewer { id entity username email flags teams { edges { node { name } } } }
}
"""

PROJECT_RUN_QUEUES = """
query ProjectRunQueues($entity: String!, $projectName: String!) {
  project(entityName: $entity, name: $projectName) {
    runQueues { id name createdBy access }
  }
}
"""

CREATE_LAUNCH_AGENT = """
mutation createLaunchAgent(
  $entity: String!, $project: String!, $queues: [ID!]!, $hostname: String!,
  $agentConfig: JSONString, $version: String
) {
  createLaunchAgent(input: {
    entityName: $entity, projectName: $project, runQueues: $queues, hostname: $hostname,
    agentConfig: $agentConfig, version: $version
  }) { launchAgentId }
}
"""

LAUNCH_AGENT = """
query LaunchAgent($agentId: ID!) {
  launchAgent(id: $agentId) {
    id name runQueues hostname agentStatus stopPolling heartbeatAt
  }
}
"""

UPDATE_LAUNCH_AGENT = """
mutation updateLaunchAgent($agentId: ID!, $agentStatus: String) {
  updateLaunchAgent(input: { launchAgentId: $agentId agentStatus: $agentStatus }) { success }
}
"""

POP_FROM_RUN_QUEUE = """
mutation popFromRunQueue(
  $entity: String!, $project: String!, $queueName: String!, $launchAgentId: ID
) {
  popFromRunQueue(input: {
    entityName: $entity, projectName: $project, queueName: $queueName,
    launchAgentId: $launchAgentId
  }) { runQueueItemId runSpec }
}
"""

ACK_RUN_QUEUE_ITEM = """
mutation ackRunQueueItem($itemId: ID!, $runId: String!) {
  ackRunQueueItem(input: { runQueueItemId: $itemId, runName: $runId }) { success }
}
"""

FAIL_RUN_QUEUE_ITEM = """
mutation failRunQueueItem(
  $runQueueItemId: ID!, $message: String!, $stage: String!, $filePaths: [String!]
) {
  failRunQueueItem(input: {
    runQueueItemId: $runQueueItemId message: $message stage: $stage filePaths: $filePaths
  }) { success }
}
"""

UPDATE_RUN_QUEUE_ITEM_WARNING = """
mutation updateRunQueueItemWarning(
  $runQueueItemId: ID!, $message: String!, $stage: String!, $filePaths: [String!]
) {
  updateRunQueueItemWarning(input: {
    runQueueItemId: $runQueueItemId message: $message stage: $stage filePaths: $filePaths
  }) { success }
}
"""

RUN_STOPPED_STATUS = """
query RunStoppedStatus($projectName: String, $entityName: String, $runId: String!) {
  project(name: $projectName, entityName: $entityName) { run(name: $runId) { stopped } }
}
"""

RUN_STATE = """
query RunState($project: String!, $entity: String!, $name: String!) {
  project(name: $project, entityName: $entity) { run(name: $name) { state } }
}
"""

# Sweeps (wandb `apis/public/sweeps.py`): `check_sweep_state` reads the state before a sweep
# run starts; `_set_sweep_state` reads the sweep's id (`SweepWithRuns`) and then sets the state
# (`UpsertSweep`) when a scheduler fails.
GET_SWEEP_STATE = """
query GetSweepState($entity: String, $project: String, $sweep: String!) {
  project(name: $project, entityName: $entity) { sweep(sweepName: $sweep) { state } }
}
"""

SWEEP_WITH_RUNS = """
query SweepWithRuns(
  $entity: String, $project: String, $sweep: String!, $specs: [JSONString!]!
) {
  project(name: $project, entityName: $entity) {
    sweep(sweepName: $sweep) {
      id name method state description config createdAt heartbeatAt updatedAt
      earlyStopJobRunning bestLoss controller scheduler
      runs {
        edges {
          node {
            name state config exitcode heartbeatAt shouldStop failed stopped running
            summaryMetrics sampledHistory(specs: $specs)
          }
        }
      }
    }
  }
}
"""

UPSERT_SWEEP = """
mutation UpsertSweep($id: ID, $state: String, $entityName: String, $projectName: String) {
  upsertSweep(input: {
    id: $id, state: $state, entityName: $entityName, projectName: $projectName
  }) { sweep { name } }
}
"""

# `launch-agent migrate` reads each queue's config as wandb's public API does
# (`RunQueue._get_metadata` and `RunQueue._get_default_resource_config`, apis/public/jobs.py).
GET_RUN_QUEUE_METADATA = """
query GetRunQueueMetadata($projectName: String!, $entityName: String!, $runQueue: String!) {
  project(name: $projectName, entityName: $entityName) {
    runQueue(name: $runQueue) {
      id access defaultResourceConfigID prioritizationMode externalLinks
    }
  }
}
"""

GET_DEFAULT_RESOURCE_CONFIG = """
query GetDefaultResourceConfig($entityName: String!, $id: ID!) {
  entity(name: $entityName) {
    defaultResourceConfig(id: $id) {
      config resource templateVariables { name schema }
    }
  }
}
"""

# Whether W&B already has a run's outcome (`Reporter.fail` with `verify`): the item's state, as
# wandb's public API reads it (`QueuedRun._get_item`, wandb/apis/public/jobs.py; the
# `GetRunQueueItem` document copied, its first line wrapped). States: PENDING (pushed, or its
# lease lapsed), LEASED (popped), CLAIMED (acked), FAILED (`failRunQueueItem`).
GET_RUN_QUEUE_ITEM = """
query GetRunQueueItem(
    $projectName: String!, $entityName: String!, $runQueue: String!, $itemId: ID!
) {
    project(name: $projectName, entityName: $entityName) {
        runQueue(name: $runQueue) {
            runQueueItem(id: $itemId) {
                id
                state
                associatedRunId
            }
        }
    }
}
"""

# Whether a requeue already reached W&B: the queue's items, as wandb's `RunQueue._get_items`
# (wandb/apis/public/jobs.py) lists them (`GetRunQueueItems`, `runQueueItems(first: 100)`), with
# `state` and `runSpec` added to the node's selection (both are fields of W&B's `RunQueueItem`:
# `state` is what `QueuedRun` reads, `runSpec` what `popFromRunQueue` answers). Not in
# `SINGLE_OPERATIONS`: the real client selects `id` only, so it has no recording to equal.
GET_RUN_QUEUE_ITEMS = """
query GetRunQueueItems($projectName: String!, $entityName: String!, $runQueue: String!) {
    project(name: $projectName, entityName: $entityName) {
        runQueue(name: $runQueue) {
            runQueueItems(first: 100) {
                edges {
                    node {
                        id
                        state
                        runSpec
                    }
                }
            }
        }
    }
}
"""
# The page size of `GET_RUN_QUEUE_ITEMS` (wandb's own: "Up to the first 100 queued runs").
RUN_QUEUE_ITEMS_PAGE = 100

# The reference adds `$priority` and `$templateVariableValues` only when they are set; the
# recorded document is the plain one, built here by `push_to_run_queue_by_name`.
_PUSH_PARAMS = (
    "$entityName: String!, $projectName: String!, $queueName: String!, $runSpec: JSONString!"
)
_PUSH_INPUT = (
    "entityName: $entityName, projectName: $projectName, queueName: $queueName, runSpec: $runSpec"
)

# Operation names, as the W&B server (and the sandbox's request log) sees them.
SINGLE_OPERATIONS: dict[str, str] = {
    "Viewer": VIEWER,
    "ProjectRunQueues": PROJECT_RUN_QUEUES,
    "createLaunchAgent": CREATE_LAUNCH_AGENT,
    "LaunchAgent": LAUNCH_AGENT,
    "updateLaunchAgent": UPDATE_LAUNCH_AGENT,
    "popFromRunQueue": POP_FROM_RUN_QUEUE,
    "ackRunQueueItem": ACK_RUN_QUEUE_ITEM,
    "failRunQueueItem": FAIL_RUN_QUEUE_ITEM,
    "updateRunQueueItemWarning": UPDATE_RUN_QUEUE_ITEM_WARNING,
    "RunStoppedStatus": RUN_STOPPED_STATUS,
    "RunState": RUN_STATE,
    "GetSweepState": GET_SWEEP_STATE,
    "SweepWithRuns": SWEEP_WITH_RUNS,
    "UpsertSweep": UPSERT_SWEEP,
    "GetRunQueueMetadata": GET_RUN_QUEUE_METADATA,
    "GetDefaultResourceConfig": GET_DEFAULT_RESOURCE_CONFIG,
    "GetRunQueueItem": GET_RUN_QUEUE_ITEM,
}


@dataclass(frozen=True)
class Request:
    """One GraphQL request: the document, its variables and where each answer will be.

    `keys[i]` is the key under `data` that holds the answer for the i-th input entry.
    """

    operation: str
    document: str
    variables: dict[str, Any]
    keys: tuple[str, ...]


def pop_batch(entity: str, queues: Sequence[str], launch_agent_id: str | None) -> Request:
    """One pop per entry of `queues`, in order, in one mutation.

    A queue named n times is popped n times: GraphQL runs mutation fields one after the other,
    so each alias leases the next item of that queue (or answers null once it is empty).
    """
    if not queues:
        raise ValueError("pop_batch needs at least one queue")
    variables: dict[str, Any] = {
        "entity": entity,
        "project": LAUNCH_PROJECT,
        "launchAgentId": launch_agent_id,
    }
    if len(queues) == 1:
        variables["queueName"] = queues[0]
        return Request("popFromRunQueue", POP_FROM_RUN_QUEUE, variables, ("popFromRunQueue",))
    for i, queue in enumerate(queues):
        variables[f"queueName_{i}"] = queue
    document, keys = _pop_document(len(queues))
    return Request("popFromRunQueue", document, variables, keys)


@lru_cache(maxsize=64)
def _pop_document(size: int) -> tuple[str, tuple[str, ...]]:
    params = ", ".join(f"$queueName_{i}: String!" for i in range(size))
    fields = "\n".join(
        f"  q{i}: popFromRunQueue(input: {{entityName: $entity, projectName: $project,"
        f" queueName: $queueName_{i}, launchAgentId: $launchAgentId}})"
        " { runQueueItemId runSpec }"
        for i in range(size)
    )
    document = (
        "mutation popFromRunQueue($entity: String!, $project: String!, $launchAgentId: ID,"
        f" {params}) {{\n{fields}\n}}\n"
    )
    return document, tuple(f"q{i}" for i in range(size))


def run_stopped_batch(runs: Sequence[tuple[str, str, str]]) -> Request:
    """Whether each (entity, project, run id) was stopped from the UI, in one query."""
    if not runs:
        raise ValueError("run_stopped_batch needs at least one run")
    if len(runs) == 1:
        entity, project, run_id = runs[0]
        variables = {"projectName": project, "entityName": entity, "runId": run_id}
        return Request("RunStoppedStatus", RUN_STOPPED_STATUS, variables, ("project",))
    variables = {}
    for i, (entity, project, run_id) in enumerate(runs):
        variables[f"projectName_{i}"] = project
        variables[f"entityName_{i}"] = entity
        variables[f"runId_{i}"] = run_id
    document, keys = _run_stopped_document(len(runs))
    return Request("RunStoppedStatus", document, variables, keys)


@lru_cache(maxsize=64)
def _run_stopped_document(size: int) -> tuple[str, tuple[str, ...]]:
    params = ", ".join(
        f"$projectName_{i}: String, $entityName_{i}: String, $runId_{i}: String!"
        for i in range(size)
    )
    fields = "\n".join(
        f"  s{i}: project(name: $projectName_{i}, entityName: $entityName_{i})"
        f" {{ run(name: $runId_{i}) {{ stopped }} }}"
        for i in range(size)
    )
    return (
        f"query RunStoppedStatus({params}) {{\n{fields}\n}}\n",
        tuple(f"s{i}" for i in range(size)),
    )


def push_to_run_queue_by_name(
    entity: str,
    project: str,
    queue_name: str,
    run_spec: Mapping[str, Any],
    *,
    priority: int | None = None,
    template_variable_values: Mapping[str, Any] | None = None,
) -> Request:
    """The reference's `pushToRunQueueByName`, with its optional variables only when set."""
    params = _PUSH_PARAMS
    inputs = _PUSH_INPUT
    variables: dict[str, Any] = {
        "entityName": entity,
        "projectName": project,
        "queueName": queue_name,
        # JSONString: the server wants the spec serialised, not as an object.
        "runSpec": json.dumps(dict(run_spec)),
    }
    if priority is not None:
        params += ", $priority: Int"
        inputs += ", priority: $priority"
        variables["priority"] = priority
    if template_variable_values is not None:
        params += ", $templateVariableValues: JSONString"
        inputs += ", templateVariableValues: $templateVariableValues"
        variables["templateVariableValues"] = json.dumps(dict(template_variable_values))
    document = (
        f"mutation pushToRunQueueByName({params}) {{\n"
        f"  pushToRunQueueByName(input: {{{inputs}}}) {{ runQueueItemId runSpec }}\n}}\n"
    )
    return Request("pushToRunQueueByName", document, variables, ("pushToRunQueueByName",))


def run_queue_items(entity: str, queue: str) -> Request:
    """The first `RUN_QUEUE_ITEMS_PAGE` items of a queue, with their state and runSpec."""
    variables = {"projectName": LAUNCH_PROJECT, "entityName": entity, "runQueue": queue}
    return Request("GetRunQueueItems", GET_RUN_QUEUE_ITEMS, variables, ("project",))


def single(operation: str, variables: Mapping[str, Any], key: str) -> Request:
    """A request for one of `SINGLE_OPERATIONS`, answered under `data[key]`."""
    return Request(operation, SINGLE_OPERATIONS[operation], dict(variables), (key,))
