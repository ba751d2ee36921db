"""A partial W&B GraphQL schema, to check the documents the agent sends before a server does.

W&B's schema is not public (it lives in a private repository), so this SDL is written by hand
from the operations the real wandb 0.31.0 client sends (`reference/wandb-graphql-operations.jsonl`)
and the public schema facts in `reference/wandb-launch-agent.md` §1.3. It covers only the types
those operations touch. What is inferred rather than known (nullability, enum values, `JSON`
versus `JSONString`) is kept as permissive as the recorded documents allow: a variable declared
nullable by the real client maps to a nullable argument here.

The tests keep it honest in both directions: every recorded real-client operation must validate
(so the SDL cannot drift into agreeing only with our own documents), and every document the
agent builds, batched ones included, must validate with its variables coerced against it.

The client does not validate at run time: the real server is the authority there, and a
guessed nullability must never block a request the server would accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from graphql import (
    GraphQLSchema,
    OperationDefinitionNode,
    build_schema,
    parse,
    print_ast,
    validate,
)
from graphql.error import GraphQLError
from graphql.execution.values import get_variable_values

SDL = """
scalar JSON
scalar JSONString
scalar DateTime

type Query {
  viewer: User
  project(name: String, entityName: String): Project
  entity(name: String): Entity
  launchAgent(id: ID!): LaunchAgent
  serverInfo: ServerInfo
}

type User {
  id: ID!
  entity: String
  username: String
  email: String
  flags: JSONString
  teams: EntityConnection
}

type EntityConnection { edges: [EntityEdge!]! }
type EntityEdge { node: Entity }

type Entity {
  id: ID!
  name: String!
  isTeam: Boolean!
  organization: Organization
}

type Organization { coreWeaveOrganizationId: String }

type ServerInfo { features: [ServerFeature!]! }
type ServerFeature { name: String! isEnabled: Boolean! }

type Project {
  id: ID!
  name: String!
  entity: Entity!
  runQueues: [RunQueue!]!
  run(name: String!): Run
  sweep(sweepName: String!): Sweep
}

enum RunQueueAccessType { ENTITY PROJECT USER }
enum RunQueuePrioritizationMode { DISABLED V0 }

type RunQueue {
  id: ID!
  name: String!
  createdBy: String
  access: RunQueueAccessType!
}

type Run {
  id: ID!
  name: String!
  displayName: String
  description: String
  state: String
  stopped: Boolean
  config: JSONString
  sweepName: String
  project: Project
  historyLineCount: Int
  exitcode: Float
  heartbeatAt: DateTime
  shouldStop: Boolean
  failed: Boolean
  running: Boolean
  summaryMetrics: JSONString
  sampledHistory(specs: [JSONString!]!): [JSON]
}

type RunConnection { edges: [RunEdge!]! }
type RunEdge { node: Run! }

type Sweep {
  id: ID!
  name: String!
  method: String
  state: String!
  description: String
  config: String
  createdAt: DateTime
  heartbeatAt: DateTime
  updatedAt: DateTime
  earlyStopJobRunning: Boolean
  bestLoss: Float
  controller: JSONString
  scheduler: JSONString
  runs: RunConnection!
}

type LaunchAgent {
  id: ID!
  name: String!
  runQueues: [ID!]!
  hostname: String!
  agentStatus: String
  stopPolling: Boolean!
  heartbeatAt: DateTime
}

type Mutation {
  createRunQueue(input: CreateRunQueueInput!): CreateRunQueuePayload
  createLaunchAgent(input: CreateLaunchAgentInput!): CreateLaunchAgentPayload
  updateLaunchAgent(input: UpdateLaunchAgentInput!): SuccessPayload
  popFromRunQueue(input: PopFromRunQueueInput!): PopFromRunQueuePayload
  ackRunQueueItem(input: AckRunQueueItemInput!): SuccessPayload
  failRunQueueItem(input: RunQueueItemReportInput!): SuccessPayload
  updateRunQueueItemWarning(input: RunQueueItemReportInput!): SuccessPayload
  pushToRunQueueByName(input: PushToRunQueueByNameInput!): PushToRunQueueByNamePayload
  upsertBucket(input: UpsertBucketInput!): UpsertBucketPayload
  createRunFiles(input: CreateRunFilesInput!): CreateRunFilesPayload
  upsertSweep(input: UpsertSweepInput!): UpsertSweepPayload
}

type SuccessPayload { success: Boolean! }

input CreateRunQueueInput {
  entityName: String!
  projectName: String!
  queueName: String!
  access: RunQueueAccessType!
  prioritizationMode: RunQueuePrioritizationMode
  defaultResourceConfigID: ID
}
type CreateRunQueuePayload { success: Boolean queueID: ID }

input CreateLaunchAgentInput {
  entityName: String!
  projectName: String!
  runQueues: [ID!]!
  hostname: String!
  agentConfig: JSONString
  version: String
}
type CreateLaunchAgentPayload { launchAgentId: ID! }

input UpdateLaunchAgentInput { launchAgentId: ID! agentStatus: String }

input PopFromRunQueueInput {
  entityName: String!
  projectName: String!
  queueName: String!
  launchAgentId: ID
}
# `runSpec` is a JSON object here, unlike the push payload's JSONString (§1.3).
type PopFromRunQueuePayload { runQueueItemId: ID! runSpec: JSON! }

input AckRunQueueItemInput { runQueueItemId: ID! runName: String! }

input RunQueueItemReportInput {
  runQueueItemId: ID!
  message: String!
  stage: String!
  filePaths: [String!]
}

input PushToRunQueueByNameInput {
  entityName: String!
  projectName: String!
  queueName: String!
  runSpec: JSONString!
  priority: Int
  templateVariableValues: JSONString
}
type PushToRunQueueByNamePayload { runQueueItemId: ID! runSpec: JSONString }

input UpsertBucketInput {
  id: String
  name: String
  groupName: String
  modelName: String
  entityName: String
  description: String
  displayName: String
  notes: String
  config: JSONString
  commit: String
  host: String
  debug: Boolean
  jobProgram: String
  jobRepo: String
  jobType: String
  state: String
  sweep: String
  tags: [String!]
  summaryMetrics: JSONString
}
type UpsertBucketPayload { bucket: Run inserted: Boolean }

input CreateRunFilesInput {
  entityName: String!
  projectName: String!
  runName: String!
  files: [String!]!
}
type CreateRunFilesPayload { runID: ID! uploadHeaders: [String!]! files: [RunFile!]! }
type RunFile { name: String! uploadUrl: String }

input UpsertSweepInput { id: ID state: String entityName: String projectName: String }
type UpsertSweepPayload { sweep: Sweep }
"""


@cache
def schema() -> GraphQLSchema:
    return build_schema(SDL)


def normalize(document: str) -> str:
    """The document printed canonically: equal for documents that differ only in layout."""
    return print_ast(parse(document))


def check(document: str, variables: Mapping[str, Any] | None = None) -> list[str]:
    """Problems of `document` (and of `variables` for it) against the SDL; empty when valid."""
    try:
        ast = parse(document)
    except GraphQLError as exc:
        return [f"syntax: {exc.message}"]
    problems = [error.message for error in validate(schema(), ast)]
    if problems or variables is None:
        return problems
    for definition in ast.definitions:
        if isinstance(definition, OperationDefinitionNode):
            coerced = get_variable_values(
                schema(), definition.variable_definitions or (), dict(variables)
            )
            if isinstance(coerced, list):
                problems.extend(f"variables: {error.message}" for error in coerced)
            declared = {v.variable.name.value for v in definition.variable_definitions or ()}
            extra = sorted(set(variables) - declared)
            if extra:
                problems.append(f"variables: not declared by the document: {extra}")
    return problems
