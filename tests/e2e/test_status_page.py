"""The status page and `/api/status` of a running agent on the sandbox, over real HTTP."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import aiohttp

from launch_agent.runtime.agent import Agent
from launch_agent.sandbox.wandb import ItemState
from tests.e2e.conftest import Env, run_spec, until
from tests.e2e.test_quota_agent import quota_agent, setup

TOKEN = "status-token-5f1d0c9e"  # a known value the page must never show
EVIL = "<script>alert(1)</script>"
EVIL_PROJECT = '<img src=x onerror="alert(1)">'
EVIL_RUN = "<img src=x onerror=alert(2)>"


def status_config(env: Env, **extra: Any) -> Any:
    return env.config(status={"token": TOKEN, "refresh_seconds": 3}, **extra)


async def fetch(agent: Agent, path: str, token: str | None = TOKEN) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{agent.health_port}{path}", headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def status(agent: Agent) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"http://127.0.0.1:{agent.health_port}/api/status",
            headers={"Authorization": f"Bearer {TOKEN}"},
        ) as resp,
    ):
        assert resp.status == 200
        data: dict[str, Any] = await resp.json()
        return data


async def until_status(
    agent: Agent, check: Callable[[dict[str, Any]], bool], within: float = 15.0
) -> dict[str, Any]:
    """`/api/status` once `check` holds for it."""
    deadline = time.monotonic() + within
    while True:
        data = await status(agent)
        if check(data):
            return data
        if time.monotonic() > deadline:
            raise AssertionError(f"status never satisfied the check: {data}")
        await asyncio.sleep(0.05)


def node(data: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(n for n in data["quota"]["nodes"] if n["name"] == name)
    return found


async def test_token_guards_the_page_and_not_the_probes(env: Env) -> None:
    async with env.running(env.agent(status_config(env))) as agent:
        for path in ("/", "/api/status"):
            assert (await fetch(agent, path, token=None))[0] == 401
            assert (await fetch(agent, path, token="wrong"))[0] == 401
            assert (await fetch(agent, path))[0] == 200
        assert (await fetch(agent, "/healthz", token=None))[0] == 200
        assert (await fetch(agent, "/readyz", token=None))[0] == 200
        assert (await fetch(agent, "/metrics", token=None))[0] == 200


async def test_no_token_leaves_the_page_open(env: Env) -> None:
    async with env.running() as agent:
        code, html = await fetch(agent, "/", token=None)
        assert code == 200 and "test-agent" in html


async def test_a_run_appears_then_fails_with_its_reason_escaped(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=r1", f'fail after=5s log="{EVIL}"')
    item = env.push(run_spec("r1"))
    async with env.running(env.agent(status_config(env))) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        data = await status(agent)
        assert set(data) >= {"agent", "queues", "runs", "quota", "builds"}
        # No leader election in this agent's config: it leads alone and names itself.
        assert data["agent"]["role"] == "single"
        assert data["agent"]["leader"] == data["agent"]["hostname"]
        assert data["agent"]["apis"]["wandb"]["ok"] is True
        assert data["agent"]["apis"]["kubernetes"]["ok"] is True
        runs = data["runs"]["items"]
        assert [r["item"] for r in runs] == [item.id]
        assert runs[0]["url"] == f"{env.wandb.url}/ent/proj/runs/r1"
        assert data["queues"][0]["name"] == "q1"
        assert data["queues"][0]["popped_last_hour"] == 1

        env.advance(10)
        await until(lambda: item.state is ItemState.FAILED, message="failure")
        await until(lambda: agent.runs.get(item.id) is None, message="record released")
        data = await status(agent)
        assert data["runs"]["total"] == 0
        (failure,) = data["failures"]
        assert (failure["item"], failure["queue"], failure["stage"]) == (item.id, "q1", "run")
        assert EVIL in failure["message"]
        assert data["queues"][0]["failed_last_hour"] == 1

        code, html = await fetch(agent, "/")
        assert code == 200
        assert EVIL not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
        assert "<script" not in html


async def test_an_adopted_run_failing_counts_for_its_queue(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=r1", "fail after=5s")
    item = env.push(run_spec("r1"))
    async with env.running(env.agent(status_config(env))):
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
    # A new process adopts the run from the cluster; it never popped it.
    async with env.running(env.agent(status_config(env))) as agent:
        await until(lambda: agent.runs.get(item.id) is not None, message="adopted")
        data = await status(agent)
        assert data["runs"]["items"][0]["adopted"] is True
        assert data["queues"][0]["popped_last_hour"] == 0
        env.advance(10)
        data = await until_status(agent, lambda d: bool(d["failures"]))
        assert data["failures"][0]["queue"] == "q1"
        assert data["queues"][0]["failed_last_hour"] == 1


async def test_submitted_names_are_escaped(env: Env) -> None:
    # The submitter picks the project and the run id; the page shows and links both. (Neither
    # can hold `/`, which W&B reserves, so the markup is an attribute handler.)
    first = env.push(run_spec("r1", project=EVIL_PROJECT))
    second = env.push(run_spec(EVIL_RUN))
    async with env.running(env.agent(status_config(env))) as agent:
        popped = (ItemState.CLAIMED, ItemState.FAILED)
        await until(lambda: first.state in popped and second.state in popped, message="popped")
        data = await until_status(agent, lambda d: d["runs"]["total"] + len(d["failures"]) == 2)
        urls = {r["run_id"]: r["url"] for r in data["runs"]["items"]}
        assert urls["r1"] == (
            f"{env.wandb.url}/ent/%3Cimg%20src%3Dx%20onerror%3D%22alert%281%29%22%3E/runs/r1"
        )
        shown = [r["run_id"] for r in data["runs"]["items"]] + [
            f["message"] for f in data["failures"]
        ]
        assert any(EVIL_RUN in text for text in shown), shown
        code, html = await fetch(agent, "/")
        assert code == 200
        assert EVIL not in html and "<script" not in html and "<img" not in html
        assert "&lt;img src=x onerror=alert(2)&gt;" in html


async def test_no_secret_is_shown(env: Env) -> None:
    api_key = env.wandb.api_key
    # Registry credentials the agent knows of (a docker config it would read for Kaniko, the
    # git credentials file): the page has no field for them, and must not grow one.
    config = status_config(env, builder={"type": "noop", "git": {"credentials_file": "/x"}})
    assert config.api_key is not None and config.api_key.get_secret_value() == api_key
    env.push(run_spec("r1"))
    async with env.running(env.agent(config)) as agent:
        await until(lambda: len(agent.runs) == 1, message="a run")
        for path in ("/", "/api/status", "/metrics"):
            code, body = await fetch(agent, path)
            assert code == 200
            assert api_key not in body, path
            assert TOKEN not in body, path


async def test_metrics_answer_admin_questions(env: Env) -> None:
    item = env.push(run_spec("r1"))
    async with env.running() as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        await until(lambda: bool(env.pods_of(item)), message="pods")
        _, text = await fetch(agent, "/metrics", token=None)
        assert "launch_agent_leader 1.0" in text
        assert (
            'launch_agent_api_request_seconds_count{api="kubernetes",operation="create jobs"}'
            in text
        )
        assert 'launch_agent_api_request_seconds_count{api="wandb"' in text
        assert "launch_agent_last_successful_poll_timestamp_seconds" in text
        assert 'launch_agent_runs{state="' in text
        assert "launch_agent_runs_past_start_deadline 0.0" in text


async def test_quota_usage_and_pending_move(env: Env) -> None:
    setup(env, {"a": "a.1", "b": "b.1"}, cpu={"a": 2})
    first = env.push(run_spec("r1"), queue="qa")
    async with env.running(quota_agent(env)) as agent:
        await until(lambda: bool(env.pods_of(first)), message="first run admitted")
        data = await status(agent)
        assert node(data, "a.1")["resources"][0] == {
            "resource": "cpu", "used": 2, "min": 2, "max": 4, "borrowed": 0
        }  # fmt: skip
        for i in (2, 3):
            env.push(run_spec(f"r{i}"), queue="qa")
        # Two more runs of 2 CPUs: one fits (a.1 borrows 2 from b), one waits.
        data = await until_status(agent, lambda d: node(d, "a.1")["pending"] == 1)
        a1 = node(data, "a.1")
        assert a1["resources"][0]["used"] == 4
        assert a1["resources"][0]["borrowed"] == 2
        assert node(data, "root")["resources"][0]["used"] == 4
        _, text = await fetch(agent, "/metrics", token=None)
        assert 'launch_agent_quota_used{node="a.1",resource="cpu"} 4.0' in text
        assert 'launch_agent_quota_borrowed{node="a.1",resource="cpu"} 2.0' in text
        assert 'launch_agent_quota_pending_runs{leaf="a.1"} 1.0' in text
        assert 'launch_agent_quota_max{node="root",resource="cpu"} 4.0' in text


async def test_a_run_that_does_not_start_is_past_its_deadline(env: Env) -> None:
    env.cluster.script("launch-agent.io/run-id=r1", 'unschedulable message="0/1 nodes fit"')
    item = env.push(run_spec("r1"))
    tracking = {"stop_check_seconds": 0.1, "unschedulable_timeout_seconds": 120}
    config = status_config(env, tracking={**tracking, "start_timeout_seconds": 0.5})
    async with env.running(env.agent(config)) as agent:
        await until(lambda: item.state is ItemState.CLAIMED, message="ack")
        data = await until_status(agent, lambda d: d["runs"]["past_start_deadline"] == 1)
        (run,) = data["runs"]["items"]
        assert (run["state"], run["past_start_deadline"]) == ("starting", True)
        _, text = await fetch(agent, "/metrics", token=None)
        assert "launch_agent_runs_past_start_deadline 1.0" in text
        assert 'launch_agent_runs{state="starting"} 1.0' in text
        _, html = await fetch(agent, "/")
        assert "1 past the start deadline" in html
