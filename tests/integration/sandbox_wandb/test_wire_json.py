"""The sandbox reads JSON as W&B's Go server does and keeps a pushed runSpec as it was sent."""

from __future__ import annotations

import json
from typing import Any

import pytest

from launch_agent.sandbox.wandb import WandbServer, wire_json
from tests.integration.sandbox_wandb.conftest import POP, PUSH, Client, pop_vars


def _nested(levels: int) -> str:
    return '{"entity": "ent", "x": ' + "[" * (levels - 1) + "]" * (levels - 1) + "}"


def test_nesting_up_to_go_max_depth_parses_and_beyond_is_refused() -> None:
    value = wire_json.loads(_nested(10_000))
    depth, current = 1, value["x"]
    while current:
        depth, current = depth + 1, current[0]
    assert depth + 1 == 10_000
    with pytest.raises(wire_json.WireJSONError, match="exceeded max depth"):
        wire_json.loads(_nested(10_001))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"a": 1, "a": 2}', {"a": 2}),  # Go: the last duplicate wins
        ('{"a": 1e999999}', {"a": float("inf")}),  # valid grammar; served back as written
        ('{"a": "\\ud800"}', {"a": "\ud800"}),
        (' [1, -2.5e3, true, false, null, "\\u00e9\\n"] ', [1, -2500.0, True, False, None, "é\n"]),
        ("[" + "9" * 5000 + "]", [float("inf")]),  # Go: a float64 too
    ],
)
def test_go_accepts(text: str, expected: Any) -> None:
    assert wire_json.loads(text) == expected
    deep = "[" * 600 + text + "]" * 600  # the iterative parser agrees with the C one
    value = wire_json.loads(deep)
    for _ in range(600):
        value = value[0]
    assert value == expected


@pytest.mark.parametrize(
    "text",
    ['{"a": NaN}', "[Infinity]", "[1,]", '{"a" 1}', "[01]", '["\x01"]', "[1] x", '{"a": tru}', "["],
)
def test_go_refuses(text: str) -> None:
    with pytest.raises(wire_json.WireJSONError):
        wire_json.loads(text)
    with pytest.raises(wire_json.WireJSONError):
        wire_json.loads("[" * 600 + text + "]" * 600)


def test_invalid_utf8_becomes_the_replacement_character() -> None:
    assert wire_json.loads(wire_json.decode_body(b'["a\xffb"]')) == ["a\ufffdb"]


def test_raw_json_is_written_verbatim() -> None:
    raw = '{"b": 1, "b": 2, "n": 1e999999}'
    assert wire_json.dumps({"x": [wire_json.RawJSON(raw), "y"]}) == '{"x":[' + raw + ',"y"]}'


def _push_vars(text: str) -> dict[str, Any]:
    return {
        "entityName": "ent",
        "projectName": "model-registry",
        "queueName": "q1",
        "runSpec": text,
    }


async def test_a_pushed_run_spec_is_stored_and_popped_as_sent(
    server: WandbServer, client: Client
) -> None:
    text = '{"entity": "ent",  "k": 1, "k": 2, "n": 1e999999, "s": "\\ud800"}'
    pushed = await client.data(PUSH, _push_vars(text))
    assert pushed["pushToRunQueueByName"]["runSpec"] == text
    async with client.session.post(
        f"{client.url}/graphql", json={"query": POP, "variables": pop_vars("q1")}
    ) as resp:
        body = await resp.text()
    assert '"runSpec":' + text in body


async def test_ten_thousand_levels_over_http_and_one_more_refused(
    server: WandbServer, client: Client
) -> None:
    accepted = await client.post(PUSH, _push_vars(_nested(10_000)))
    assert "errors" not in accepted, accepted
    refused = await client.post(PUSH, _push_vars(_nested(10_001)))
    assert "exceeded max depth" in json.dumps(refused["errors"])
    # The GraphQL request itself may be that deep too (variables the server ignores).
    deep_request = '{"query": "{ viewer { id } }", "variables": {"x": ' + _nested(9_990) + "}}"
    async with client.session.post(f"{client.url}/graphql", data=deep_request) as resp:
        assert resp.status == 200, await resp.text()
    too_deep = '{"query": "{ viewer { id } }", "variables": {"x": ' + _nested(10_000) + "}}"
    async with client.session.post(f"{client.url}/graphql", data=too_deep) as resp:
        assert resp.status == 400
        assert "exceeded max depth" in await resp.text()
