"""GraphQL resolvers: translate between the schema's shapes and `LaunchState`'s operations.

Every W&B rule lives in `state.py`; a resolver only unpacks arguments, calls one state method
and renders the result as a plain dict in the schema's field names (graphql-core's default
resolver reads dict keys). Objects whose fields take arguments (a project's `run(name:)`)
carry their state object under a private key for the field resolver to use.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from graphql import GraphQLObjectType, GraphQLResolveInfo, GraphQLSchema

from launch_agent.sandbox.wandb.model import (
    LaunchAgent,
    Project,
    Run,
    RunQueue,
    RunQueueItem,
    Sweep,
    WandbError,
    encode_id,
    iso,
    loads_object,
)
from launch_agent.sandbox.wandb.state import LaunchState

Obj = dict[str, Any]


@dataclass
class Context:
    """Per-request context: the state and the server's own URL for upload links."""

    state: LaunchState
    base_url: str
    upload_token: str = field(default_factory=lambda: secrets.token_urlsafe(12))


if TYPE_CHECKING:
    Info = GraphQLResolveInfo[Context]
else:
    Info = GraphQLResolveInfo


def _state(info: Info) -> LaunchState:
    return info.context.state


def _iso_or_none(seconds: float | None) -> str | None:
    return None if seconds is None else iso(seconds)


# -- views ------------------------------------------------------------------------------


def entity_view(state: LaunchState, name: str) -> Obj | None:
    entity = state.entity(name)
    if entity is None:
        return None
    return {
        "id": entity.id,
        "name": entity.name,
        "isTeam": entity.is_team,
        # The reference agent's run asks for a CoreWeave organization; null is what a W&B
        # organization without CoreWeave answers.
        "organization": {
            "id": encode_id("Organization", 1),
            "name": entity.name,
            "coreWeaveOrganizationId": None,
        },
    }


def project_view(state: LaunchState, project: Project) -> Obj:
    return {
        "id": project.id,
        "internalId": project.id,
        "name": project.name,
        "entityName": project.entity,
        "entity": entity_view(state, project.entity),
        "_p": project,
    }


def queue_view(queue: RunQueue) -> Obj:
    return {
        "id": queue.id,
        "name": queue.name,
        "createdBy": queue.created_by,
        "access": queue.access,
        "prioritizationMode": queue.prioritization_mode,
        "defaultResourceConfigID": queue.config_id,
        "externalLinks": json.dumps(queue.external_links),
        "_q": queue,
    }


def resource_config_view(queue: RunQueue) -> Obj:
    config = queue.config or {}
    resource = str(config.get("resource") or "kubernetes")
    return {
        "id": queue.config_id,
        "resource": resource,
        "config": json.dumps({"resource_args": config.get("resource_args") or {}}),
        "templateVariables": [
            {"name": name, "schema": json.dumps(schema)}
            for name, schema in queue.template_variables.items()
        ],
    }


def item_view(item: RunQueueItem) -> Obj:
    return {
        "id": item.id,
        "state": item.state.value,
        "runSpec": item.run_spec_wire(),
        "priority": item.priority,
        "associatedRunId": item.associated_run_id,
        "launchAgentId": item.launch_agent_id,
        "createdAt": iso(item.created_at),
    }


def agent_view(agent: LaunchAgent) -> Obj:
    return {
        "id": agent.id,
        "name": agent.name,
        "runQueues": agent.queue_ids,
        "hostname": agent.hostname,
        "agentStatus": agent.status,
        "agentConfig": json.dumps(agent.config),
        "version": agent.version,
        "stopPolling": agent.stop_polling,
        "heartbeatAt": iso(agent.heartbeat_at),
        "createdAt": iso(agent.created_at),
    }


def run_view(state: LaunchState, run: Run) -> Obj:
    home = state.find_project(run.entity, run.project)
    return {
        "id": run.id,
        "name": run.name,
        "displayName": run.display_name or run.name,
        "description": run.description,
        "config": run.config or "{}",
        "sweepName": run.sweep_name,
        "project": None if home is None else project_view(state, home),
        "historyLineCount": run.history_line_count,
        "state": run.state,
        "stopped": run.stopped,
        "exitcode": run.exitcode,
        "heartbeatAt": _iso_or_none(run.heartbeat_at),
        "shouldStop": run.stopped,
        "failed": run.state in ("failed", "crashed"),
        "running": run.state == "running",
        "summaryMetrics": "{}",
        "createdAt": iso(run.created_at),
    }


def sweep_view(state: LaunchState, sweep: Sweep) -> Obj:
    runs = [state.run(sweep.entity, sweep.project, name) for name in sweep.runs]
    return {
        "id": sweep.id,
        "name": sweep.name,
        "method": "grid",
        "state": sweep.state,
        "description": None,
        "config": sweep.config,
        "runs": {"edges": [{"node": run_view(state, r)} for r in runs if r is not None]},
        "project": project_view(state, state.project(sweep.entity, sweep.project)),
    }


# -- queries ----------------------------------------------------------------------------


def viewer(_: None, info: Info) -> Obj:
    state = _state(info)
    teams = [entity_view(state, e.name) for e in state.entities.values() if e.is_team]
    return {
        "id": encode_id("User", 1),
        "name": state.username,
        "deletedAt": None,
        "apiKeys": {"edges": []},
        "entity": state.default_entity,
        "username": state.username,
        "email": state.email,
        "admin": False,
        "flags": "{}",
        "teams": {"edges": [{"node": team} for team in teams]},
    }


def entity(_: None, info: Info, name: str | None = None) -> Obj | None:
    return entity_view(_state(info), name or _state(info).default_entity)


def entity_resource_config(parent: Obj, info: Info, id: str) -> Obj | None:
    queue = _state(info).resource_configs.get(id)
    if queue is None or queue.entity != parent["name"]:
        return None
    return resource_config_view(queue)


def project(
    _: None, info: Info, name: str | None = None, entityName: str | None = None
) -> Obj | None:
    state = _state(info)
    found = state.find_project(entityName, name)
    return None if found is None else project_view(state, found)


def model(
    _: None, info: Info, name: str | None = None, entityName: str | None = None
) -> Obj | None:
    """`RunResumeStatus`: the project, created on first use as W&B does for a new run."""
    state = _state(info)
    home = state.project(entityName or state.default_entity, name or "uncategorized", create=True)
    return project_view(state, home)


def model_bucket(parent: Obj, info: Info, name: str, missingOk: bool | None = None) -> Obj | None:
    run = parent["_p"].runs.get(name)
    if run is None:
        return None
    return {
        "id": run.id,
        "name": run.name,
        "summaryMetrics": "{}",
        "displayName": run.display_name or run.name,
        "logLineCount": len(run.output),
        "historyLineCount": run.history_line_count,
        "eventsLineCount": 0,
        "historyTail": "[]",
        "eventsTail": "[]",
        "config": run.config or "{}",
        "tags": [],
        "notes": run.description,
        "wandbConfig": "{}",
    }


def project_run_queues(parent: Obj, _info: Info) -> list[Obj]:
    return [queue_view(q) for q in parent["_p"].queues.values()]


def project_run_queue(parent: Obj, _info: Info, name: str) -> Obj | None:
    queue = parent["_p"].queues.get(name)
    return None if queue is None else queue_view(queue)


def project_run(parent: Obj, info: Info, name: str) -> Obj | None:
    run = parent["_p"].runs.get(name)
    return None if run is None else run_view(_state(info), run)


def project_sweep(parent: Obj, info: Info, sweepName: str) -> Obj | None:
    sweep = parent["_p"].sweeps.get(sweepName)
    return None if sweep is None else sweep_view(_state(info), sweep)


def queue_items(parent: Obj, info: Info, first: int | None = None) -> Obj:
    # In push order, oldest first, every state: the order W&B's own listing uses is not
    # documented, and a client that finds a new item only because the model put it first
    # would pass here and miss it there.
    items = _state(info).queue_items(parent["_q"])
    if first is not None:
        items = items[: max(first, 0)]
    return {"edges": [{"node": item_view(i)} for i in items]}


def queue_item(parent: Obj, info: Info, id: str) -> Obj | None:
    # `state.queue_items` first: a lapsed lease reads PENDING, as on the real server.
    found = [i for i in _state(info).queue_items(parent["_q"]) if i.id == id]
    return item_view(found[0]) if found else None


def sampled_history(_parent: Obj, _info: Info, specs: list[str]) -> list[Any]:
    return [[] for _ in specs]


def launch_agent(_: None, info: Info, id: str) -> Obj:
    return agent_view(_state(info).agent(id))


def run_queue(_: None, info: Info, id: str) -> Obj | None:
    queue = _state(info).queues_by_id.get(id)
    return None if queue is None else queue_view(queue)


def server_info(_: None, info: Info) -> Obj:
    features = _state(info).features
    return {"features": [{"name": k, "isEnabled": v} for k, v in sorted(features.items())]}


# -- mutations --------------------------------------------------------------------------


def create_run_queue(_: None, info: Info, input: Obj) -> Obj:
    queue = _state(info).add_queue(
        input["queueName"],
        entity=input["entityName"],
        project=input["projectName"],
        access=input["access"],
        prioritization_mode=input.get("prioritizationMode") or "V0",
    )
    return {"success": True, "queueID": queue.id}


def create_launch_agent(_: None, info: Info, input: Obj) -> Obj:
    raw = input.get("agentConfig")
    config = loads_object(raw, "agentConfig") if raw else {}
    agent = _state(info).create_agent(
        input["entityName"],
        input["projectName"],
        input["runQueues"],
        input["hostname"],
        config=config,
        version=input.get("version"),
    )
    return {"success": True, "launchAgentId": agent.id}


def update_launch_agent(_: None, info: Info, input: Obj) -> Obj:
    state = _state(info)
    agent = state.update_agent(input["launchAgentId"], input.get("agentStatus"))
    if input.get("stopPolling") is not None:
        agent.stop_polling = bool(input["stopPolling"])
    return {"success": True}


def pop_from_run_queue(_: None, info: Info, input: Obj) -> Obj | None:
    state = _state(info)
    queue = state.queue(input["entityName"], input["projectName"], input["queueName"])
    item = state.pop(queue, input.get("launchAgentId"))
    if item is None:
        return None
    return {"runQueueItemId": item.id, "runSpec": item.run_spec_wire()}


def ack_run_queue_item(_: None, info: Info, input: Obj) -> Obj:
    return {"success": _state(info).ack(input["runQueueItemId"], input["runName"])}


def fail_run_queue_item(_: None, info: Info, input: Obj) -> Obj:
    _state(info).fail(
        input["runQueueItemId"], input["message"], input["stage"], input.get("filePaths")
    )
    return {"success": True}


def warn_run_queue_item(_: None, info: Info, input: Obj) -> Obj:
    _state(info).warn(
        input["runQueueItemId"], input["message"], input["stage"], input.get("filePaths")
    )
    return {"success": True}


def _push(state: LaunchState, queue: RunQueue, input: Obj) -> RunQueueItem:
    raw_values = input.get("templateVariableValues")
    values = loads_object(raw_values, "templateVariableValues") if raw_values else None
    return state.push_text(
        queue, input["runSpec"], priority=input.get("priority"), template_values=values
    )


def _spec_text(item: RunQueueItem) -> str:
    return item.run_spec_text if item.run_spec_text is not None else json.dumps(item.run_spec)


def push_to_run_queue_by_name(_: None, info: Info, input: Obj) -> Obj:
    state = _state(info)
    queue = state.queue(input["entityName"], input["projectName"], input["queueName"])
    item = _push(state, queue, input)
    return {"runQueueItemId": item.id, "runSpec": _spec_text(item)}


def push_to_run_queue(_: None, info: Info, input: Obj) -> Obj:
    state = _state(info)
    queue = state.queues_by_id.get(input["queueID"])
    if queue is None:
        raise WandbError(f"run queue {input['queueID']} not found")
    return {"runQueueItemId": _push(state, queue, input).id}


def upsert_bucket(_: None, info: Info, input: Obj) -> Obj:
    state = _state(info)
    name = input.get("name") or secrets.token_hex(4)
    entity_name = input.get("entityName") or state.default_entity
    project_name = input.get("modelName") or "uncategorized"
    run, inserted = state.upsert_run(
        entity_name,
        project_name,
        name,
        display_name=input.get("displayName"),
        description=input.get("description"),
        config=input.get("config"),
        job_type=input.get("jobType"),
        sweep_name=input.get("sweep"),
        host=input.get("host"),
    )
    # A client upserting its own run is `wandb.init`: a run W&B created as pending at ack
    # time becomes running, which is how the agent learns that the workload started.
    if input.get("state"):
        run.state = input["state"]
    elif run.state == "pending":
        run.state = "running"
    return {"bucket": run_view(state, run), "inserted": inserted}


def create_run_files(_: None, info: Info, input: Obj) -> Obj:
    context = info.context
    entity_name, project_name, run_name = (
        input["entityName"],
        input["projectName"],
        input["runName"],
    )
    run, _inserted = context.state.upsert_run(entity_name, project_name, run_name)
    prefix = (
        f"{context.base_url}/upload/{context.upload_token}/"
        f"{quote(entity_name, safe='')}/{quote(project_name, safe='')}/{quote(run_name, safe='')}"
    )
    files = [{"name": n, "uploadUrl": f"{prefix}/{quote(n)}"} for n in input["files"]]
    return {"runID": run.id, "uploadHeaders": [], "files": files}


def upsert_sweep(_: None, info: Info, input: Obj) -> Obj:
    state = _state(info)
    if not input.get("id"):
        # `wandb sweep` / `wandb launch-sweep`: a new sweep (and its scheduler item).
        if not input.get("config"):
            raise WandbError("a new sweep needs a config")
        sweep = state.create_sweep(
            input.get("entityName") or state.default_entity,
            input.get("projectName") or "uncategorized",
            input["config"],
            state=input.get("state") or "RUNNING",
            launch_scheduler=input.get("launchScheduler"),
        )
        view = sweep_view(state, sweep)
        return {"sweep": view, "inserted": True, "configValidationWarnings": []}
    found = state.sweep_by_id(input["id"])
    if found is None:
        raise WandbError(f"sweep {input.get('id')} not found")
    if input.get("state"):
        state.set_sweep_state(found, input["state"])
    return {"sweep": sweep_view(state, found), "inserted": False, "configValidationWarnings": []}


def create_agent(_: None, info: Info, input: Obj) -> Obj:
    state = _state(info)
    agent_id = state.create_sweep_agent(
        input.get("entityName") or state.default_entity,
        input.get("projectName"),
        input["sweep"],
        input["host"],
    )
    return {"agent": {"id": agent_id}}


def agent_heartbeat(_: None, info: Info, input: Obj) -> Obj:
    state = _state(info)
    run_states = loads_object(input.get("runState") or "{}", "runState")
    commands = state.sweep_heartbeat(input["id"], run_states)
    return {"agent": {"id": input["id"]}, "commands": commands}


RESOLVERS: dict[tuple[str, str], Any] = {
    ("Query", "viewer"): viewer,
    ("Query", "entity"): entity,
    ("Query", "project"): project,
    ("Query", "launchAgent"): launch_agent,
    ("Query", "runQueue"): run_queue,
    ("Query", "serverInfo"): server_info,
    ("Entity", "defaultResourceConfig"): entity_resource_config,
    ("Project", "runQueues"): project_run_queues,
    ("Project", "runQueue"): project_run_queue,
    ("Project", "run"): project_run,
    ("Project", "sweep"): project_sweep,
    ("Query", "model"): model,
    ("Model", "bucket"): model_bucket,
    ("RunQueue", "runQueueItems"): queue_items,
    ("RunQueue", "runQueueItem"): queue_item,
    ("Run", "sampledHistory"): sampled_history,
    ("Mutation", "createRunQueue"): create_run_queue,
    ("Mutation", "createLaunchAgent"): create_launch_agent,
    ("Mutation", "updateLaunchAgent"): update_launch_agent,
    ("Mutation", "popFromRunQueue"): pop_from_run_queue,
    ("Mutation", "ackRunQueueItem"): ack_run_queue_item,
    ("Mutation", "failRunQueueItem"): fail_run_queue_item,
    ("Mutation", "updateRunQueueItemWarning"): warn_run_queue_item,
    ("Mutation", "pushToRunQueueByName"): push_to_run_queue_by_name,
    ("Mutation", "pushToRunQueue"): push_to_run_queue,
    ("Mutation", "upsertBucket"): upsert_bucket,
    ("Mutation", "createRunFiles"): create_run_files,
    ("Mutation", "upsertSweep"): upsert_sweep,
    ("Mutation", "createAgent"): create_agent,
    ("Mutation", "agentHeartbeat"): agent_heartbeat,
}


def bind(schema: GraphQLSchema, table: dict[tuple[str, str], Any] | None = None) -> GraphQLSchema:
    """Attach resolvers to the schema's fields (fails loudly if the SDL lost a field)."""
    for (type_name, field_name), resolver in (RESOLVERS if table is None else table).items():
        owner = schema.get_type(type_name)
        assert isinstance(owner, GraphQLObjectType), type_name
        owner.fields[field_name].resolve = resolver
    return schema
