"""Launch agents, runs, stop from the UI, and the files of a run (upload URLs, file_stream)."""

from __future__ import annotations

import json

import aiohttp

from launch_agent.sandbox.wandb import WandbServer
from tests.integration.sandbox_wandb.conftest import Client, Clock

CREATE_AGENT = """
mutation createLaunchAgent($entity: String!, $project: String!, $queues: [ID!]!,
                           $hostname: String!, $agentConfig: JSONString, $version: String) {
  createLaunchAgent(input: {entityName: $entity, projectName: $project, runQueues: $queues,
                            hostname: $hostname, agentConfig: $agentConfig, version: $version}) {
    launchAgentId
  }
}
"""
GET_AGENT = """
query LaunchAgent($agentId: ID!) {
  launchAgent(id: $agentId) { id name runQueues hostname agentStatus stopPolling heartbeatAt }
}
"""
UPDATE_AGENT = """
mutation updateLaunchAgent($agentId: ID!, $agentStatus: String) {
  updateLaunchAgent(input: { launchAgentId: $agentId agentStatus: $agentStatus }) { success }
}
"""
RUN_STATE = """
query RunState($project: String!, $entity: String!, $name: String!) {
  project(name: $project, entityName: $entity) { run(name: $name) { state } }
}
"""
RUN_STOPPED = """
query RunStoppedStatus($projectName: String, $entityName: String, $runId: String!) {
  project(name: $projectName, entityName: $entityName) { run(name: $runId) { stopped } }
}
"""
UPSERT = """
mutation UpsertBucket($name: String, $project: String, $entity: String, $config: JSONString) {
  upsertBucket(input: {name: $name, modelName: $project, entityName: $entity, config: $config}) {
    bucket { id name project { name entity { name } } }
    inserted
  }
}
"""
CREATE_FILES = """
mutation CreateRunFiles($entity: String!, $project: String!, $run: String!, $files: [String!]!) {
  createRunFiles(input: {entityName: $entity, projectName: $project, runName: $run,
                         files: $files}) {
    runID uploadHeaders files { name uploadUrl }
  }
}
"""


async def create_agent(server: WandbServer, client: Client) -> str:
    queue = server.state.queue("ent", "model-registry", "q1")
    variables = {
        "entity": "ent",
        "project": "model-registry",
        "queues": [queue.id],
        "hostname": "host-1",
        "agentConfig": json.dumps({"max_jobs": 4}),
        "version": "wandb@0.31.0",
    }
    data = await client.data(CREATE_AGENT, variables)
    agent_id: str = data["createLaunchAgent"]["launchAgentId"]
    return agent_id


async def test_create_and_read_an_agent(server: WandbServer, client: Client) -> None:
    agent_id = await create_agent(server, client)
    data = await client.data(GET_AGENT, {"agentId": agent_id})
    agent = data["launchAgent"]
    assert agent["id"] == agent_id
    assert agent["runQueues"] == [server.state.queue("ent", "model-registry", "q1").id]
    assert agent["hostname"] == "host-1"
    assert agent["stopPolling"] is False
    assert agent["agentStatus"] == "POLLING"
    # The name becomes a run id and a Kubernetes label value.
    assert agent["name"].startswith("agent-")
    assert len(agent["name"]) <= 63
    assert server.state.agent(agent_id).config == {"max_jobs": 4}
    assert server.state.agent(agent_id).version == "wandb@0.31.0"


async def test_agent_with_an_unknown_queue_is_refused(client: Client) -> None:
    variables = {
        "entity": "ent",
        "project": "model-registry",
        "queues": ["UnVuUXVldWU6OTk="],
        "hostname": "h",
    }
    answer = await client.post(CREATE_AGENT, variables)
    assert answer["errors"][0]["message"] == "run queues not found: UnVuUXVldWU6OTk="


async def test_status_history_and_heartbeat(
    server: WandbServer, client: Client, clock: Clock
) -> None:
    agent_id = await create_agent(server, client)
    for status in ["RUNNING", "POLLING", "KILLED"]:
        clock.advance(10)
        answer = await client.data(UPDATE_AGENT, {"agentId": agent_id, "agentStatus": status})
        assert answer == {"updateLaunchAgent": {"success": True}}
    agent = server.state.agent(agent_id)
    assert [s for _, s in agent.status_history] == ["POLLING", "RUNNING", "POLLING", "KILLED"]
    assert agent.heartbeat_at == clock.now
    data = await client.data(GET_AGENT, {"agentId": agent_id})
    assert data["launchAgent"]["agentStatus"] == "KILLED"
    assert data["launchAgent"]["heartbeatAt"].endswith("Z")


async def test_stop_polling_is_set_from_python(server: WandbServer, client: Client) -> None:
    agent_id = await create_agent(server, client)
    server.state.set_stop_polling(agent_id)
    data = await client.data(GET_AGENT, {"agentId": agent_id})
    assert data["launchAgent"]["stopPolling"] is True


async def test_unknown_agent_is_an_error(client: Client) -> None:
    answer = await client.post(GET_AGENT, {"agentId": "TGF1bmNoQWdlbnQ6OTk="})
    assert answer["data"] == {"launchAgent": None}  # nullable; the error says why
    assert "launch agent TGF1bmNoQWdlbnQ6OTk= not found" in answer["errors"][0]["message"]


async def test_run_state_and_stop_from_the_ui(server: WandbServer, client: Client) -> None:
    missing = await client.data(RUN_STATE, {"project": "proj", "entity": "ent", "name": "r1"})
    assert missing == {"project": None}
    server.state.upsert_run("ent", "proj", "r1")
    variables = {"projectName": "proj", "entityName": "ent", "runId": "r1"}
    assert await client.data(RUN_STOPPED, variables) == {"project": {"run": {"stopped": False}}}
    server.state.stop_run("ent", "proj", "r1")
    assert await client.data(RUN_STOPPED, variables) == {"project": {"run": {"stopped": True}}}
    server.state.set_run_state("ent", "proj", "r1", "finished")
    state = await client.data(RUN_STATE, {"project": "proj", "entity": "ent", "name": "r1"})
    assert state == {"project": {"run": {"state": "finished"}}}


async def test_upsert_bucket_is_wandb_init(server: WandbServer, client: Client) -> None:
    server.state.upsert_run("ent", "proj", "r2")  # created pending at ack time
    variables = {"name": "r2", "project": "proj", "entity": "ent", "config": "{}"}
    data = await client.data(UPSERT, variables)
    assert data["upsertBucket"]["inserted"] is False
    assert data["upsertBucket"]["bucket"]["project"] == {"name": "proj", "entity": {"name": "ent"}}
    run = server.state.run("ent", "proj", "r2")
    assert run is not None
    assert run.state == "running"
    again = await client.data(UPSERT, {**variables, "name": "fresh"})
    assert again["upsertBucket"]["inserted"] is True


async def test_run_files_upload_and_file_stream(server: WandbServer, client: Client) -> None:
    names = ["wandb-metadata.json", "UnVuUXVldWVJdGVtOjE=/error/error.log"]
    variables = {"entity": "ent", "project": "model-registry", "run": "agent-1", "files": names}
    data = (await client.data(CREATE_FILES, variables))["createRunFiles"]
    assert data["uploadHeaders"] == []
    assert [f["name"] for f in data["files"]] == names
    for upload in data["files"]:
        # Upload URLs are presigned: no Authorization header.
        async with (
            aiohttp.ClientSession() as anonymous,
            anonymous.put(upload["uploadUrl"], data=b"boom\n") as response,
        ):
            assert response.status == 200
    run = server.state.run("ent", "model-registry", "agent-1")
    assert run is not None
    assert run.files == dict.fromkeys(names, b"boom\n")
    stream = f"{server.url}/files/ent/model-registry/agent-1/file_stream"
    lines = {"files": {"output.log": {"offset": 0, "content": ["hello", "world"]}}}
    async with client.session.post(stream, json=lines) as response:
        assert response.status == 200
        assert await response.json() == {"exitcode": None, "limits": {}}
    async with client.session.post(stream, json={"complete": True, "exitcode": 1}) as response:
        assert response.status == 200
    assert list(run.output) == ["hello", "world"]
    assert (run.file_stream_posts, run.exitcode, run.state) == (2, 1, "failed")
    assert server.log.count("REST upload") == 2
    assert server.log.count("REST file_stream") == 2


async def test_an_upload_url_with_a_wrong_signature_is_refused(server: WandbServer) -> None:
    forged = f"{server.url}/upload/forged/ent/p/r/f"
    async with aiohttp.ClientSession() as anonymous, anonymous.put(forged, data=b"x") as response:
        assert response.status == 403


async def test_a_bad_file_stream_body_is_a_400(server: WandbServer, client: Client) -> None:
    stream = f"{server.url}/files/ent/model-registry/agent-1/file_stream"
    async with client.session.post(stream, data=b"[1") as response:
        assert response.status == 400
        assert "not JSON" in (await response.json())["errors"][0]["message"]
