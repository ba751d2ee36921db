"""Answers no honest W&B sends, from a loopback server: the client never raises past WandbError.

The sandbox W&B only answers what the real server would; these bodies (too deep outside any
item, duplicate keys in the answer's own wrapping, numbers Python cannot convert) come from a
bare aiohttp server, through the real client.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from launch_agent.adapters import wandb_documents as docs
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.adapters.wandb_errors import WandbProtocolError, WandbUnavailable
from launch_agent.model.config import LimitsConfig

KEY = docs.pop_batch("ent", ["q"], None).keys[0]


class Answers:
    def __init__(self) -> None:
        self.body = b"{}"
        self.requests = 0

    async def handle(self, _: web.Request) -> web.Response:
        self.requests += 1
        return web.Response(body=self.body, content_type="application/json")


@pytest.fixture
async def served() -> AsyncIterator[tuple[Answers, WandbClient]]:
    answers = Answers()
    app = web.Application()
    app.router.add_post("/graphql", answers.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    retry = RetryPolicy(attempts=2, base_delay=0.01, timeout=5)
    limits = LimitsConfig(max_item_depth=20, max_item_bytes=10_000)
    try:
        async with WandbClient(f"http://127.0.0.1:{port}", "k", retry=retry, limits=limits) as c:
            yield answers, c
    finally:
        await runner.cleanup()


def _pop_body(run_spec: str) -> bytes:
    return f'{{"data": {{"{KEY}": {{"runQueueItemId": "i1", "runSpec": {run_spec}}}}}}}'.encode()


@pytest.mark.parametrize(
    ("run_spec", "problem"),
    [
        ("[" * 5_000 + "]" * 5_000, "runSpec[0][0][0]"),
        ('{"a": ' + "[" * 25 + "]" * 25 + "}", "runSpec.a[0]"),
        ('{"a": 1, "a": 2}', "runSpec: duplicate key 'a'"),
        ('{"a": {"b": NaN}}', "runSpec.a.b: NaN is not JSON"),
        ('{"a": [' + "9" * 6_000 + "]}", "runSpec.a[0]: integer of 6,000 digits is too long"),
        ('{"a": "' + "x" * 20_000 + '"}', "runSpec is 20,008 bytes of JSON; the limit is 10,000"),
        ('"{\\"a\\": 1, \\"a\\": 2}"', "runSpec: duplicate key 'a'"),
        ('"not json"', "runSpec is a string that is not JSON: Expecting value at line 1"),
    ],
)
async def test_a_hostile_run_spec_is_the_items_problem(
    served: tuple[Answers, WandbClient], run_spec: str, problem: str
) -> None:
    answers, client = served
    answers.body = _pop_body(run_spec)
    popped = await client.pop_many("ent", ["q"], None)
    item = popped[0][1]
    assert item is not None and item.id == "i1"
    assert item.run_spec == {}
    assert item.problem is not None and item.problem.startswith(problem), item.problem


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (
            b'{"data": ' + b"[" * 5_000 + b"]" * 5_000 + b"}",
            "`data` is list, not an object",
        ),  # no item
        (b'{"data": {}, "data": {}}', "not a JSON object"),
        (
            b'{"data": {"viewer": {"id": "' + b"x" * 10 + b'", "entity": 1e999}}}',
            "entity is refused",
        ),
    ],
)
async def test_a_readable_answer_of_the_wrong_shape_is_a_protocol_error(
    served: tuple[Answers, WandbClient], body: bytes, reason: str
) -> None:
    answers, client = served
    answers.body = body
    with pytest.raises(WandbProtocolError, match=reason):
        await client.viewer()
    assert answers.requests == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"[" * 5_000, "invalid JSON"),  # cut short, and deeper than Python's json recurses
        (b'{"data": {"viewer": "\xff"}}', "not UTF-8"),
        (b"<html>gateway</html>", "invalid JSON"),
    ],
)
async def test_an_unreadable_200_is_retried_then_unavailable(
    served: tuple[Answers, WandbClient], body: bytes, reason: str
) -> None:
    answers, client = served
    answers.body = body
    with pytest.raises(WandbUnavailable, match=f"unreadable body: .*{reason}"):
        await client.viewer()
    assert answers.requests == 2
    assert client.stats["retries"] == 1


async def test_an_unreadable_pop_wrapper_loses_no_other_item(
    served: tuple[Answers, WandbClient],
) -> None:
    answers, client = served
    keys = docs.pop_batch("ent", ["q", "r"], None).keys
    first = '{"runQueueItemId": "i1", "runQueueItemId": "i2", "runSpec": {}}'
    second = '{"runQueueItemId": "i3", "runSpec": {"entity": "e"}}'
    answers.body = f'{{"data": {{"{keys[0]}": {first}, "{keys[1]}": {second}}}}}'.encode()
    popped = await client.pop_many("ent", ["q", "r"], None)
    assert popped[0] == ("q", None)
    item = popped[1][1]
    assert item is not None and (item.id, item.run_spec, item.problem) == (
        "i3",
        {"entity": "e"},
        None,
    )
    assert client.stats["pop_unreadable"] == 1
