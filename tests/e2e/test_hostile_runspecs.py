"""Hostile runSpecs pushed over GraphQL, as a submitter can: each fails in W&B, the agent goes on.

The runSpec text goes to the sandbox exactly as written (a JSONString variable), which keeps
and serves it verbatim on pop, like W&B's Go server: 10,000 levels deep, duplicate keys,
numbers Python reads as infinity, lone surrogates. Ordinary items pushed before and after must
run, every hostile item must be failed once (popped once: not re-offered), and the agent that
handles them all is the one started at the beginning (one registration, its task never died).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

import aiohttp

from launch_agent.adapters import wandb_documents as docs
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, run_spec, until

ORDINARY = '"entity": "ent", "project": "proj", "docker": {"docker_image": "registry.example/t:1"}'


def _deep(levels: int) -> str:
    """A runSpec `levels` deep in all (the runSpec object is level 1)."""
    inner = levels - 1
    return (
        "{"
        + ORDINARY
        + ', "overrides": {"run_config": {"x": '
        + "[" * (inner - 2)
        + "]" * (inner - 2)
        + "}}}"
    )


@dataclass(frozen=True)
class Hostile:
    name: str
    text: str  # the runSpec JSON text as pushed
    fragments: tuple[str, ...]


HOSTILE = [
    Hostile(
        "go-max-depth",
        _deep(10_000),
        ("runSpec.overrides.run_config.x", "nested deeper than 100 levels"),
    ),
    Hostile("just-too-deep", _deep(101), ("nested deeper than 100 levels",)),
    Hostile(
        "five-megabytes",
        "{" + ORDINARY + ', "overrides": {"run_config": {"blob": "' + "a" * 5_000_000 + '"}}}',
        ("runSpec is 5,000,", "bytes of JSON; the limit is 1,048,576", "limits.max_item_bytes"),
    ),
    Hostile(
        "duplicate-key",
        "{" + ORDINARY + ', "resource_args": {"kubernetes": {"spec": 1, "spec": 2}}}',
        ("runSpec.resource_args.kubernetes", "duplicate key 'spec'"),
    ),
    Hostile("list", "[1, 2]", ("runSpec is list [1, 2], expected a JSON object",)),
    Hostile(
        "string-of-a-list",
        json.dumps("[1, 2]"),
        ("runSpec is list [1, 2], expected a JSON object",),
    ),
    Hostile(
        "string-of-a-deep-spec",
        json.dumps(_deep(3_000)),
        ("nested deeper than 100 levels",),
    ),
    Hostile(
        "lone-surrogate",
        '{"entity": "ent\\ud800", "project": "proj"}',
        ("runSpec.entity", "lone surrogate \\ud800"),
    ),
    Hostile(
        "infinite-number",
        "{" + ORDINARY + ', "overrides": {"args": ["--lr", 1e999999]}}',
        ("runSpec.overrides.args[1]", "number 1e999999 is out of range"),
    ),
    Hostile(
        "huge-integer",
        "{" + ORDINARY + ', "overrides": {"args": [' + "7" * 5_000 + "]}}",
        ("runSpec.overrides.args[0]", "integer of 5,000 digits is too long"),
    ),
    Hostile("scalar", "42", ("runSpec is int 42, expected a JSON object",)),
]


async def _push_body(env: Env, session: aiohttp.ClientSession, body: bytes) -> dict[str, object]:
    token = base64.b64encode(f"api:{env.wandb.api_key}".encode()).decode()
    async with session.post(
        f"{env.wandb.url}/graphql",
        data=body,
        headers={"Authorization": f"Basic {token}", "Content-Type": "application/json"},
    ) as resp:
        answer: dict[str, object] = await resp.json()
        assert resp.status == 200, answer
        return answer


def _body(run_spec_text: str) -> bytes:
    request = docs.push_to_run_queue_by_name("ent", docs.LAUNCH_PROJECT, "q1", {})
    variables = {**request.variables, "runSpec": run_spec_text}
    return json.dumps({"query": request.document, "variables": variables}).encode()


async def _push(env: Env, session: aiohttp.ClientSession, body: bytes) -> RunQueueItem:
    answer = await _push_body(env, session, body)
    assert "errors" not in answer, answer
    data = answer["data"]
    assert isinstance(data, dict)
    return env.state.item(data["pushToRunQueueByName"]["runQueueItemId"])


async def test_hostile_items_fail_in_wandb_and_the_agent_keeps_running(env: Env) -> None:
    async with aiohttp.ClientSession() as session:
        first = env.push(run_spec("good-before"))
        items = {h.name: await _push(env, session, _body(h.text)) for h in HOSTILE}
        # Invalid UTF-8 in the request: Go's server decodes it as U+FFFD, so the run is
        # ordinary by the time the agent sees it, and runs.
        utf8 = _body("{" + ORDINARY + ', "overrides": {"args": ["--tag", "abINVALID"]}}')
        invalid_utf8 = await _push(env, session, utf8.replace(b"INVALID", b"\xff\xfe"))
    last = env.push(run_spec("good-after"))

    async with env.running() as agent:
        await until(
            lambda: all(i.state is ItemState.FAILED for i in items.values()),
            within=60,
            message="every hostile item failed",
        )
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in (first, last, invalid_utf8)),
            within=30,
            message="the ordinary items claimed",
        )
        for hostile in HOSTILE:
            item = items[hostile.name]
            assert item.failure is not None
            assert item.failure.stage == "agent", (hostile.name, item.failure)
            for fragment in hostile.fragments:
                assert fragment in item.failure.message, (hostile.name, item.failure.message)
            assert item.pops == 1, (hostile.name, item.pops)
        assert len(env.state.agents) == 1
        assert agent.ready.is_set()
    jobs = env.jobs()
    assert len(jobs) == 3, [j["metadata"]["name"] for j in jobs]
    args = [c.get("args") for j in jobs for c in j["spec"]["template"]["spec"]["containers"]]
    assert ["--tag", "ab\ufffd\ufffd"] in args, args


async def test_the_sandbox_refuses_what_go_refuses(env: Env) -> None:
    async with aiohttp.ClientSession() as session:
        too_deep = await _push_body(env, session, _body(_deep(10_001)))
        nan = await _push_body(env, session, _body('{"entity": "ent", "x": NaN}'))
    for answer in (too_deep, nan):
        assert answer.get("errors"), answer
    assert "exceeded max depth" in json.dumps(too_deep)
    assert "not valid JSON" in json.dumps(nan)
    assert not env.state.items
