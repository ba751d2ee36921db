"""A partial W&B GraphQL schema, anchored to the documents the real client sends.

W&B's schema is private (not published), so this SDL is written from
the recorded operations in `tests/fixtures/wandb/wandb-graphql-operations.jsonl` and the public
generated types. It covers the launch operations, the operations of the reference agent's own
run (wandb-core) and the sweep queries. A golden test checks that every recorded document still
validates, so the SDL cannot drift into agreeing only with itself. Anything outside it is
rejected the way any GraphQL server rejects it (`Cannot query field ... on type ...`).

Two scalars matter: `JSON` is an object on the wire (`popFromRunQueue.runSpec`), `JSONString`
is a string holding JSON (`pushToRunQueueByName`'s `runSpec` both ways, `agentConfig`). A client
that confuses them breaks against the real server, so the sandbox keeps them apart.
"""

from __future__ import annotations

import json
from typing import Any

from graphql import GraphQLError, GraphQLScalarType, GraphQLSchema, build_schema
from graphql.language import StringValueNode, ValueNode

from launch_agent.sandbox.wandb import wire_json

SDL = """
scalar JSON
scalar JSONString
scalar DateTime

schema { query: Query mutation: Mutation }

type Query {
  viewer: User
  entity(name: String): Entity
  project(name: String, entityName: String): Project
  model(name: String, entityName: String): Model
  launchAgent(id: ID!): LaunchAgent
  runQueue(id: ID!): RunQueue
  serverInfo: ServerInfo
  artifact(id: ID!): Artifact
}

type Mutation {
  createRunQueue(input: CreateRunQueueInput!): CreateRunQueuePayload
  createLaunchAgent(input: CreateLaunchAgentInput!): CreateLaunchAgentPayload
  updateLaunchAgent(input: UpdateLaunchAgentInput!): UpdateLaunchAgentPayload
  popFromRunQueue(input: PopFromRunQueueInput!): PopFromRunQueuePayload
  ackRunQueueItem(input: AckRunQueueItemInput!): AckRunQueueItemPayload
  failRunQueueItem(input: FailRunQueueItemInput!): FailRunQueueItemPayload
  updateRunQueueItemWarning(
    input: UpdateRunQueueItemWarningInput!
  ): UpdateRunQueueItemWarningPayload
  pushToRunQueueByName(input: PushToRunQueueByNameInput!): PushToRunQueueByNamePayload
  pushToRunQueue(input: PushToRunQueueInput!): PushToRunQueuePayload
  upsertBucket(input: UpsertBucketInput!): UpsertBucketPayload
  createRunFiles(input: CreateRunFilesInput!): CreateRunFilesPayload
  upsertSweep(input: UpsertSweepInput!): UpsertSweepPayload
  createAgent(input: CreateAgentInput!): CreateAgentPayload
  agentHeartbeat(input: AgentHeartbeatInput!): AgentHeartbeatPayload
}

type User {
  id: ID!
  name: String
  deletedAt: DateTime
  apiKeys: ApiKeyConnection
  entity: String
  username: String
  email: String
  admin: Boolean
  flags: JSONString
  teams: EntityConnection
}

type EntityConnection { edges: [EntityEdge!]! }
type ApiKeyConnection { edges: [ApiKeyEdge!]! }
type ApiKeyEdge { node: ApiKey }
type ApiKey { id: ID! name: String! description: String }
type EntityEdge { node: Entity }

type Entity {
  id: ID!
  name: String!
  isTeam: Boolean!
  organization: Organization
  defaultResourceConfig(id: ID!): DefaultResourceConfig
}

# A queue's config as wandb's public API reads it (`RunQueue._get_default_resource_config`,
# wandb/apis/public/jobs.py): `config` is `{"resource_args": {<resource>: ...}}` as JSON text.
type DefaultResourceConfig {
  id: ID!
  resource: String!
  config: JSONString!
  templateVariables: [TemplateVariable!]!
}
type TemplateVariable { name: String! schema: JSONString! }

type Organization {
  id: ID!
  name: String!
  coreWeaveOrganizationId: String
}

type Project {
  id: ID!
  internalId: ID!
  name: String!
  entityName: String!
  entity: Entity!
  runQueues: [RunQueue!]!
  runQueue(name: String!): RunQueue
  run(name: String!): Run
  sweep(sweepName: String!): Sweep
  artifactCollectionMembership(name: String!): ArtifactCollectionMembership
  artifactCollection(name: String!): ArtifactCollection
}

interface ArtifactCollection {
  id: ID!
  name: String!
  description: String
  createdAt: DateTime!
  project: Project
  artifactMembership(aliasName: String!): ArtifactCollectionMembership
}

type ArtifactSequence implements ArtifactCollection {
  id: ID!
  name: String!
  description: String
  createdAt: DateTime!
  project: Project
  artifactMembership(aliasName: String!): ArtifactCollectionMembership
}

type ArtifactCollectionMembership {
  id: ID!
  versionIndex: Int
  createdAt: DateTime!
  aliases: [ArtifactAlias!]!
  artifactCollection: ArtifactCollection
  artifact: Artifact
  files(after: String, first: Int, names: [String!]): FileConnection
}

type ArtifactAlias {
  id: ID!
  alias: String!
  artifactCollection: ArtifactCollection
}

enum ArtifactState { COMMITTED DELETED PENDING }
enum ArtifactDigestAlgorithm { MANIFEST_MD5 MANIFEST_XXH128 }

type ArtifactType { id: ID! name: String! }
type Tag { id: ID! name: String! }

type Artifact {
  id: ID!
  artifactSequence: ArtifactSequence!
  versionIndex: Int
  artifactType: ArtifactType!
  description: String
  metadata: JSONString
  ttlDurationSeconds: Int!
  ttlIsInherited: Boolean!
  tags: [Tag!]!
  historyStep: Int
  state: ArtifactState!
  size: Int!
  digest: String!
  digestAlgorithm: ArtifactDigestAlgorithm
  commitHash: String
  fileCount: Int!
  createdAt: DateTime!
  updatedAt: DateTime
  aliases: [ArtifactAlias!]!
  currentManifest: ArtifactManifest
  files(after: String, first: Int, names: [String!]): FileConnection
}

type ArtifactManifest { id: ID! file: File! }

type File {
  id: ID!
  name: String!
  directUrl: String!
  url: String
  sizeBytes: Int
  md5: String
}

type FileConnection { pageInfo: PageInfo! edges: [FileEdge!]! }
type FileEdge { node: File cursor: String! }
type PageInfo { endCursor: String hasNextPage: Boolean! }

enum RunQueueAccessType { PROJECT USER }
enum RunQueuePrioritizationMode { DISABLED V0 }
enum RunQueueItemState { PENDING LEASED CLAIMED FAILED }

type RunQueue {
  id: ID!
  name: String!
  createdBy: String
  access: RunQueueAccessType!
  prioritizationMode: RunQueuePrioritizationMode
  defaultResourceConfigID: ID
  externalLinks: JSONString
  # wandb's public API: `RunQueue.items` lists `runQueueItems(first: 100)`, `QueuedRun.state`
  # reads `runQueueItem(id:)` (wandb/apis/public/jobs.py).
  runQueueItems(first: Int): RunQueueItemConnection!
  runQueueItem(id: ID!): RunQueueItem
}

type RunQueueItemConnection { edges: [RunQueueItemEdge!]! }
type RunQueueItemEdge { node: RunQueueItem! }

type RunQueueItem {
  id: ID!
  state: RunQueueItemState!
  runSpec: JSON
  priority: Int
  associatedRunId: String
  launchAgentId: ID
  createdAt: DateTime
}

type LaunchAgent {
  id: ID!
  name: String!
  runQueues: [ID!]!
  hostname: String!
  agentStatus: String
  agentConfig: JSONString
  version: String
  stopPolling: Boolean!
  heartbeatAt: DateTime
  createdAt: DateTime
}

type Run {
  id: ID!
  name: String!
  displayName: String
  description: String
  config: JSONString
  sweepName: String
  project: Project
  historyLineCount: Int
  state: String
  stopped: Boolean
  exitcode: Float
  heartbeatAt: DateTime
  shouldStop: Boolean
  failed: Boolean
  running: Boolean
  summaryMetrics: JSONString
  sampledHistory(specs: [JSONString!]!): [JSON]
  createdAt: DateTime
}

type RunConnection { edges: [RunEdge!]! }
type RunEdge { node: Run! }

type Sweep {
  id: ID!
  name: String!
  method: String
  state: String
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
  project: Project
}

type ServerInfo { features: [ServerFeature!]! }
type ServerFeature { name: String! isEnabled: Boolean! }

input CreateRunQueueInput {
  entityName: String!
  projectName: String!
  queueName: String!
  access: RunQueueAccessType!
  prioritizationMode: RunQueuePrioritizationMode
  defaultResourceConfigID: ID
  externalLinks: JSONString
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
type CreateLaunchAgentPayload { success: Boolean launchAgentId: ID! }

input UpdateLaunchAgentInput {
  launchAgentId: ID!
  agentStatus: String
  stopPolling: Boolean
}
type UpdateLaunchAgentPayload { success: Boolean }

input PopFromRunQueueInput {
  entityName: String!
  projectName: String!
  queueName: String!
  launchAgentId: ID
}
type PopFromRunQueuePayload { runQueueItemId: ID! runSpec: JSON! }

input AckRunQueueItemInput { runQueueItemId: ID! runName: String! }
type AckRunQueueItemPayload { success: Boolean! }

input FailRunQueueItemInput {
  runQueueItemId: ID!
  message: String!
  stage: String!
  filePaths: [String!]
}
type FailRunQueueItemPayload { success: Boolean! }

input UpdateRunQueueItemWarningInput {
  runQueueItemId: ID!
  message: String!
  stage: String!
  filePaths: [String!]
}
type UpdateRunQueueItemWarningPayload { success: Boolean! }

input PushToRunQueueByNameInput {
  entityName: String!
  projectName: String!
  queueName: String!
  runSpec: JSONString!
  priority: Int
  templateVariableValues: JSONString
}
type PushToRunQueueByNamePayload { runQueueItemId: ID! runSpec: JSONString }

input PushToRunQueueInput {
  queueID: ID!
  runSpec: JSONString!
  priority: Int
  templateVariableValues: JSONString
}
type PushToRunQueuePayload { runQueueItemId: ID! }

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

# wandb-core's `RunResumeStatus` (wandb.init with resume): a project under its old name.
type Model {
  id: ID!
  name: String!
  entity: Entity!
  bucket(name: String!, missingOk: Boolean): Bucket
}
type Bucket {
  id: ID!
  name: String!
  summaryMetrics: JSONString
  displayName: String
  logLineCount: Int
  historyLineCount: Int
  eventsLineCount: Int
  historyTail: JSONString
  eventsTail: JSONString
  config: JSONString
  tags: [String!]
  notes: String
  wandbConfig(keys: [String!]): JSONString
}

input CreateRunFilesInput {
  entityName: String!
  projectName: String!
  runName: String!
  files: [String!]!
}
type CreateRunFilesPayload { runID: ID! uploadHeaders: [String!]! files: [RunFileUpload!]! }
type RunFileUpload { name: String! uploadUrl: String }

input UpsertSweepInput {
  id: ID
  state: String
  entityName: String
  projectName: String
  config: String
  description: String
  controller: JSONString
  launchScheduler: JSONString
  templateVariableValues: JSONString
  scheduler: JSONString
  priorRunsFilters: JSONString
  displayName: String
}
type UpsertSweepPayload {
  sweep: Sweep
  inserted: Boolean
  configValidationWarnings: [String!]
}

input CreateAgentInput {
  host: String!
  projectName: String
  entityName: String
  sweep: String!
}
type CreateAgentPayload { agent: SweepAgent }
type SweepAgent { id: ID! }
input AgentHeartbeatInput { id: ID! metrics: JSONString runState: JSONString }
type AgentHeartbeatPayload { agent: SweepAgent commands: JSONString }
"""


def _serialize_json_string(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))


def _parse_json_string(value: Any) -> str:
    if not isinstance(value, str):
        raise GraphQLError(f"JSONString cannot represent a non-string value: {value!r}")
    try:
        wire_json.loads(value)
    except ValueError as exc:
        raise GraphQLError(f"JSONString is not valid JSON: {exc}") from None
    return value


def _parse_json_string_literal(node: ValueNode, _extra: Any = None) -> str:
    if not isinstance(node, StringValueNode):
        raise GraphQLError("JSONString literal must be a string")
    return _parse_json_string(node.value)


def build() -> GraphQLSchema:
    """The schema with W&B's scalar behaviour; resolvers are bound by `resolvers.bind`."""
    schema = build_schema(SDL)
    json_string = schema.type_map["JSONString"]
    assert isinstance(json_string, GraphQLScalarType)
    # graphql-core 3.2 calls serialize/parse_value/parse_literal; 3.3 calls the coerce_*
    # names (which it copies at construction time), so both are set.
    coercers = {
        "serialize": _serialize_json_string,
        "coerce_output_value": _serialize_json_string,
        "parse_value": _parse_json_string,
        "coerce_input_value": _parse_json_string,
        "parse_literal": _parse_json_string_literal,
        "coerce_input_literal": _parse_json_string_literal,
    }
    for name, function in coercers.items():
        if name in ("serialize", "parse_value", "parse_literal") or hasattr(json_string, name):
            setattr(json_string, name, function)
    return schema
