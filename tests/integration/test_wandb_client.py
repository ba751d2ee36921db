"""The W&B client against the sandbox's W&B Launch server over loopback HTTP.

Every operation goes through the real aiohttp client and the sandbox's real GraphQL server
(graphql-core execution over the sandbox state); faults are scripted with the server's fault
rules, and traffic is asserted with its request log. The only other server here is a small
front in the Retry-After test, because the sandbox's fault rules carry no headers.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from pydantic import SecretStr

from launch_agent.adapters.retry import RetryPolicy
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.adapters.wandb_errors import (
    WandbAckUncertain,
    WandbAuthError,
    WandbGraphQLError,
    WandbNotFound,
    WandbUnavailable,
)
from launch_agent.adapters.wandb_results import RunRef
from launch_agent.model.config import AgentConfig
from launch_agent.sandbox.faults import FaultRule
from launch_agent.sandbox.wandb import ItemState, LaunchState, WandbServer

# Fast but real: sub-second waits so outages are exercised without slowing the suite.
FAST = RetryPolicy(attempts=4, base_delay=0.02, max_delay=0.1, timeout=2.0)

SPEC: dict[str, Any] = {
    "resource": "kubernetes",
    "resource_args": {"kubernetes": {"kind": "Job"}},
    "docker": {"docker_image": "busybox:latest"},
    "entity": "ent",
    "project": "proj",
    "overrides": {"args": [], "run_config": {}, "entry_point": []},
}


@pytest.fixture
def idle_server() -> WandbServer:
    # Built outside the event loop: building the server's schema is start-up work, not a
    # callback that holds the loop while requests wait.
    state = LaunchState(entity="ent")
    for name in ("q1", "q2", "q3"):
        state.add_queue(name)
    return WandbServer(state)


@pytest.fixture
async def wb(idle_server: WandbServer) -> AsyncIterator[WandbServer]:
    async with idle_server as server:
        yield server


@pytest.fixture
async def client(wb: WandbServer) -> AsyncIterator[WandbClient]:
    async with WandbClient(wb.url, wb.api_key, retry=FAST) as wandb:
        yield wandb


def push(wb: WandbServer, queue: str, **spec: Any) -> str:
    return wb.state.push(wb.state.queue("ent", "model-registry", queue), SPEC | spec).id


async def test_a_wrong_key_fails_at_once_naming_the_url(wb: WandbServer) -> None:
    async with WandbClient(wb.url, "f" * 40, retry=FAST) as wandb:
        with pytest.raises(WandbAuthError, match=f"W&B at {wb.url} refused the API key"):
            await wandb.viewer()
    assert len(wb.log) == 1  # no retries on 401


async def test_viewer(client: WandbClient) -> None:
    viewer = await client.viewer()
    assert viewer.entity == "ent"
    assert viewer.username == "sandbox-user"


async def test_start_up_sequence(wb: WandbServer, client: WandbClient) -> None:
    queues = await client.project_run_queues("ent")
    assert [q.name for q in queues] == ["q1", "q2", "q3"]
    agent_id = await client.create_launch_agent(
        "ent",
        [q.id for q in queues[:2]],
        "host-1",
        {"queues": ["q1", "q2"], "max_jobs": -1, "api_key": "must-not-travel"},
        "launch-agent@0.1.0",
    )
    recorded = wb.state.agents[agent_id]
    assert recorded.config == {"queues": ["q1", "q2"], "max_jobs": -1}
    assert (recorded.hostname, recorded.version) == ("host-1", "launch-agent@0.1.0")
    assert recorded.queue_ids == [queues[0].id, queues[1].id]

    info = await client.launch_agent(agent_id)
    assert (info.id, info.name, info.stop_polling) == (agent_id, recorded.name, False)
    wb.state.set_stop_polling(agent_id)
    assert (await client.launch_agent(agent_id)).stop_polling is True

    assert await client.update_launch_agent(agent_id, "RUNNING") is True
    assert wb.state.agents[agent_id].status == "RUNNING"


async def test_missing_project_is_not_found(client: WandbClient) -> None:
    with pytest.raises(WandbNotFound, match="entity 'nobody' has no project 'model-registry'"):
        await client.project_run_queues("nobody")


async def test_unknown_agent_is_a_graphql_error(client: WandbClient) -> None:
    with pytest.raises(WandbGraphQLError, match="not found"):
        await client.launch_agent("TGF1bmNoQWdlbnQ6OTk5")


async def test_pop_of_several_queues_is_one_request(wb: WandbServer, client: WandbClient) -> None:
    first = push(wb, "q1", run_id="r1")
    third = push(wb, "q3", run_id="r3")
    wb.log.reset()
    items = await client.pop("ent", ["q1", "q2", "q3"], None)
    assert len(wb.log) == 1
    assert wb.log.counts["field:popFromRunQueue"] == 3
    assert list(items) == ["q1", "q2", "q3"]
    assert items["q2"] is None
    assert items["q1"] is not None
    assert (items["q1"].id, items["q1"].run_spec["run_id"]) == (first, "r1")
    assert items["q3"] is not None
    assert items["q3"].id == third
    assert wb.state.items[first].state is ItemState.LEASED


async def test_pop_of_one_queue_sends_the_real_document(
    wb: WandbServer, client: WandbClient
) -> None:
    item = push(wb, "q1")
    assert (await client.pop("ent", ["q1"], None))["q1"] is not None
    assert wb.state.items[item].state is ItemState.LEASED
    assert wb.log.count("popFromRunQueue") == 1


async def test_a_failing_queue_does_not_lose_the_others(
    wb: WandbServer, client: WandbClient
) -> None:
    kept = push(wb, "q2")
    items = await client.pop("ent", ["deleted", "q2"], None)
    assert items["deleted"] is None
    assert items["q2"] is not None
    assert items["q2"].id == kept
    assert client.stats["pop_queue_errors"] == 1


async def test_pop_of_only_missing_queues_raises(client: WandbClient) -> None:
    with pytest.raises(WandbGraphQLError, match="not found"):
        await client.pop("ent", ["nope"], None)


async def test_ack_race_second_ack_loses(wb: WandbServer, client: WandbClient) -> None:
    push(wb, "q1")
    item = (await client.pop("ent", ["q1"], None))["q1"]
    assert item is not None
    assert await client.ack(item.id, "run-a") is True
    assert await client.ack(item.id, "run-b") is False
    stored = wb.state.items[item.id]
    assert (stored.state, stored.associated_run_id) == (ItemState.CLAIMED, "run-a")


async def test_ack_retried_after_a_lost_attempt_is_uncertain(
    wb: WandbServer, client: WandbClient
) -> None:
    push(wb, "q1")
    item = (await client.pop("ent", ["q1"], None))["q1"]
    assert item is not None
    wb.state.ack(item.id, "someone-else")
    # The first attempt's connection is cut: it may have reached W&B, so `false` is ambiguous.
    wb.faults.add(FaultRule("ackRunQueueItem", drop=True, times=1))
    with pytest.raises(WandbAckUncertain, match=item.id):
        await client.ack(item.id, "run-a")
    assert wb.log.counts["field:ackRunQueueItem"] == 2


async def test_ack_after_a_timed_out_attempt_that_was_applied(wb: WandbServer) -> None:
    push(wb, "q1")
    # The server applies the first ack after the client has given up on it; the retry, which
    # starts only after that, is refused: the client must not report a lost race.
    policy = RetryPolicy(attempts=3, base_delay=1.0, max_delay=1.0, timeout=0.1)
    async with WandbClient(wb.url, wb.api_key, retry=policy) as wandb:
        item = (await wandb.pop("ent", ["q1"], None))["q1"]
        assert item is not None
        wb.faults.add(FaultRule("ackRunQueueItem", delay=0.3, times=1))
        with pytest.raises(WandbAckUncertain):
            await wandb.ack(item.id, "run-a")
    assert wb.state.items[item.id].associated_run_id == "run-a"


async def test_fail_and_warn_reach_the_item(wb: WandbServer, client: WandbClient) -> None:
    push(wb, "q1")
    push(wb, "q1")
    items = [(await client.pop("ent", ["q1"], None))["q1"] for _ in range(2)]
    a, b = (i.id for i in items if i is not None)
    assert await client.warn(a, "0/3 nodes are available", "run") is True
    assert await client.fail(a, "OOMKilled in container main", "run", ["a/error.log"]) is True
    assert await client.fail(b, "builds are not configured", "agent") is True
    first, second = wb.state.items[a], wb.state.items[b]
    assert [(w.message, w.stage, w.file_paths) for w in first.warnings] == [
        ("0/3 nodes are available", "run", ())
    ]
    assert first.state is ItemState.FAILED
    assert first.failure is not None
    assert (first.failure.message, first.failure.stage, first.failure.file_paths) == (
        "OOMKilled in container main",
        "run",
        ("a/error.log",),
    )
    assert second.failure is not None
    assert second.failure.file_paths == ()


async def test_stop_checks_are_batched_and_chunked(wb: WandbServer) -> None:
    # Small chunks: the in-process sandbox validates each new document on the test's loop.
    runs = [RunRef("ent", f"proj{i % 3}", f"run{i}") for i in range(50)]
    for ref in runs:
        wb.state.upsert_run(*ref)
    stopped = {runs[0], runs[21], runs[49]}
    for ref in stopped:
        wb.state.stop_run(*ref)
    missing = [RunRef("ent", "proj0", "never-created"), RunRef("ghost", "p", "r")]
    wb.log.reset()
    async with WandbClient(wb.url, wb.api_key, retry=FAST, stop_check_batch=20) as wandb:
        answer = await wandb.run_stopped([*runs, *missing, runs[5]])
    assert wb.log.count("RunStoppedStatus") == 3  # 52 distinct runs in chunks of 20
    assert len(answer) == 52
    assert {ref for ref, flag in answer.items() if flag} == stopped
    assert answer[missing[0]] is False
    assert answer[missing[1]] is False


async def test_stop_check_of_nothing_sends_nothing(wb: WandbServer, client: WandbClient) -> None:
    wb.log.reset()
    assert await client.run_stopped([]) == {}
    assert await client.pop("ent", [], None) == {}
    assert len(wb.log) == 0


async def test_run_state(wb: WandbServer, client: WandbClient) -> None:
    wb.state.set_run_state("ent", "proj", "r1", "running")
    assert await client.run_state("ent", "proj", "r1") == "running"
    assert await client.run_state("ent", "proj", "missing") is None
    assert await client.run_state("ent", "no-such-project", "r1") is None


async def test_push_requeues_a_spec(wb: WandbServer, client: WandbClient) -> None:
    spec = SPEC | {"run_id": "run-p", "_resume_count": 1}
    pushed = await client.push_to_run_queue_by_name("ent", "q2", spec, priority=0)
    stored = wb.state.items[pushed.id]
    assert (stored.queue.name, stored.priority, stored.run_spec["run_id"]) == ("q2", 0, "run-p")
    popped = (await client.pop("ent", ["q2"], None))["q2"]
    assert popped is not None
    assert popped.id == pushed.id
    assert popped.run_spec["_resume_count"] == 1


async def test_an_items_state_through_its_life(wb: WandbServer) -> None:
    """`GetRunQueueItem` (wandb `QueuedRun._get_item`) reads what the server did: pushed,
    popped, acked, failed; and a lapsed lease puts the item back to PENDING."""
    now = [1000.0]
    wb.state.clock = lambda: now[0]
    wb.state.lease_seconds = 10
    async with WandbClient(wb.url, wb.api_key, retry=FAST) as client:
        item_id = push(wb, "q1", run_id="life")

        async def state() -> str | None:
            found = await client.run_queue_item("ent", "q1", item_id)
            return None if found is None else found.state

        assert await state() == "PENDING"
        assert (await client.pop("ent", ["q1"], None))["q1"] is not None
        assert await state() == "LEASED"
        now[0] += 11
        assert await state() == "PENDING", "the lease lapsed"
        assert (await client.pop("ent", ["q1"], None))["q1"] is not None
        assert await client.ack(item_id, "life")
        assert await state() == "CLAIMED"
        assert await client.fail(item_id, "exit code 3", "run")
        assert await state() == "FAILED"
        assert await client.run_queue_item("ent", "q1", "UnVuUXVldWVJdGVtOjk5OQ==") is None
        assert await client.run_queue_item("ent", "q2", item_id) is None, "another queue's"


async def test_a_queues_items_with_their_states_and_run_specs(wb: WandbServer) -> None:
    first = push(wb, "q2", run_id="a")
    async with WandbClient(wb.url, wb.api_key, retry=FAST) as client:
        await client.push_to_run_queue_by_name(
            "ent", "q2", SPEC | {"run_id": "a", "_resume_count": 1}
        )
        await client.pop("ent", ["q2"], None)
        items = await client.run_queue_items("ent", "q2")
    assert [(i.state, i.run_spec["run_id"], i.run_spec.get("_resume_count")) for i in items] == [
        ("LEASED", "a", None),
        ("PENDING", "a", 1),
    ]
    assert items[0].id == first


async def test_a_queue_listing_is_one_page_of_100(wb: WandbServer) -> None:
    """wandb's `RunQueue.items` asks for `first: 100`; the sandbox honours it, oldest first."""
    ids = [push(wb, "q3", run_id=f"r{i}") for i in range(101)]
    async with WandbClient(wb.url, wb.api_key, retry=FAST) as client:
        items = await client.run_queue_items("ent", "q3")
    assert [i.id for i in items] == ids[:100]


@pytest.mark.parametrize("status", [500, 502, 503, 429])
async def test_retries_then_succeeds(wb: WandbServer, client: WandbClient, status: int) -> None:
    wb.faults.add(FaultRule("LaunchAgent", status=status, times=2))
    agent_id = await client.create_launch_agent("ent", [], "h", {}, "v")
    assert (await client.launch_agent(agent_id)).id == agent_id
    assert wb.log.count("LaunchAgent") == 3
    assert client.stats["retries"] == 2


async def test_a_timed_out_attempt_is_retried(wb: WandbServer) -> None:
    wb.faults.add(FaultRule("Viewer", delay=0.5, times=1))
    policy = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02, timeout=0.1)
    async with WandbClient(wb.url, wb.api_key, retry=policy) as wandb:
        assert (await wandb.viewer()).entity == "ent"
    assert wandb.stats["retries"] == 1


async def test_graphql_errors_are_not_retried(wb: WandbServer, client: WandbClient) -> None:
    wb.faults.add(FaultRule("updateLaunchAgent", graphql_error=True, message="nope", times=1))
    with pytest.raises(WandbGraphQLError, match="W&B rejected updateLaunchAgent: nope"):
        await client.update_launch_agent("TGF1bmNoQWdlbnQ6MQ==", "POLLING")
    assert wb.log.count("updateLaunchAgent") == 1


async def test_an_outage_raises_unavailable_after_the_budget(
    wb: WandbServer, client: WandbClient
) -> None:
    wb.faults.outage(60)
    with pytest.raises(WandbUnavailable, match="failed 4 time") as caught:
        await client.pop("ent", ["q1", "q2"], None)
    assert caught.value.attempts == FAST.attempts
    assert caught.value.last_error == "HTTP 503"
    assert wb.log.count("popFromRunQueue") == FAST.attempts
    # The outage ends: the same client (and session) carries on.
    wb.faults.end_outage()
    assert (await client.viewer()).entity == "ent"


async def test_refused_connections_then_recovery(wb: WandbServer, client: WandbClient) -> None:
    assert (await client.viewer()).entity == "ent"
    await wb.refuse_connections()
    with pytest.raises(WandbUnavailable, match=r"W&B at .* is unavailable: Viewer failed 4 time"):
        await client.viewer()
    await wb.accept_connections()
    assert (await client.viewer()).entity == "ent"


class RetryAfterFront:
    """A loopback front for the sandbox: answers the first `limited` requests 429 with a
    Retry-After header, then forwards to the sandbox. Records when and what arrived."""

    def __init__(self, backend: str, limited: int, retry_after: str) -> None:
        self.backend = backend
        self.limited = limited
        self.retry_after = retry_after
        self.arrivals: list[tuple[float, dict[str, str]]] = []
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.Response:
        self.arrivals.append((time.monotonic(), dict(request.headers)))
        if len(self.arrivals) <= self.limited:
            return web.json_response(
                {"errors": [{"message": "slow down"}]},
                status=429,
                headers={"Retry-After": self.retry_after},
            )
        assert self._session is not None
        headers = {"Authorization": request.headers["Authorization"]}
        async with self._session.post(
            f"{self.backend}/graphql", data=await request.read(), headers=headers
        ) as answer:
            return web.Response(
                body=await answer.read(), status=answer.status, content_type="application/json"
            )

    async def __aenter__(self) -> RetryAfterFront:
        app = web.Application()
        app.router.add_post("/graphql", self.handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._session is not None and self._runner is not None
        await self._session.close()
        await self._runner.cleanup()


async def test_retry_after_is_honoured_and_headers_are_the_references(wb: WandbServer) -> None:
    async with (
        RetryAfterFront(wb.url, limited=1, retry_after="1") as front,
        WandbClient(front.url, wb.api_key, retry=FAST) as wandb,
    ):
        assert (await wandb.viewer()).entity == "ent"
    (first_at, headers), (second_at, _) = front.arrivals
    # FAST alone would retry after at most 0.1 s; Retry-After asked for a full second.
    assert second_at - first_at >= 1.0
    assert headers["User-Agent"] == "W&B Public Client 0.31.0"
    assert headers["Use-Admin-Privileges"] == "true"
    assert headers["Authorization"].startswith("Basic ")


async def test_a_retry_after_beyond_the_policy_gives_up_at_once(wb: WandbServer) -> None:
    async with (
        RetryAfterFront(wb.url, limited=10, retry_after="3600") as front,
        WandbClient(front.url, wb.api_key, retry=FAST) as wandb,
    ):
        with pytest.raises(WandbUnavailable, match="Retry-After 3600s"):
            await wandb.viewer()
    assert len(front.arrivals) == 1


async def test_the_client_needs_its_context_manager(wb: WandbServer) -> None:
    wandb = WandbClient(wb.url, wb.api_key)
    with pytest.raises(RuntimeError, match="outside `async with`"):
        await wandb.viewer()
    assert "0123" not in repr(wandb)


async def test_from_config(wb: WandbServer) -> None:
    config = AgentConfig(base_url=wb.url, api_key=SecretStr(wb.api_key))
    async with WandbClient.from_config(config, retry=FAST) as wandb:
        assert (await wandb.viewer()).entity == "ent"
    with pytest.raises(WandbAuthError, match=f"no API key for W&B at {wb.url}"):
        WandbClient.from_config(AgentConfig(base_url=wb.url))


# --- W&B's rate limits -------------------------------------------------------------------------


async def test_a_spent_window_holds_the_next_call_until_it_resets(wb: WandbServer) -> None:
    limit = wb.limit_rate(2, window=1.0)
    async with WandbClient(wb.url, wb.api_key, retry=FAST) as wandb:
        for _ in range(3):
            assert (await wandb.viewer()).entity == "ent"
        assert wandb.stats["rate_limited"] == 1
    # The second answer said `RateLimit-Remaining: 0`: the third request waited for the reset
    # instead of spending an attempt on a 429.
    assert limit.rejected == 0
    first, _, third = [e.at for e in wb.log]
    assert third - first >= 0.9


async def test_a_429_holds_every_call_until_its_retry_after(wb: WandbServer) -> None:
    limit = wb.limit_rate(2, window=1.0)
    token = base64.b64encode(f"api:{wb.api_key}".encode()).decode()
    query = {"query": "query Viewer { viewer { entity } }"}
    told = asyncio.Event()

    def heard(_: str, status: int | None, __: float) -> None:
        if status == 429:
            told.set()  # the answer is read: the client knows when it may send again

    async with WandbClient(wb.url, wb.api_key, retry=FAST, observer=heard) as wandb:
        # Another agent on the same key spends the window.
        async with aiohttp.ClientSession(headers={"Authorization": f"Basic {token}"}) as other:
            for _ in range(2):
                async with other.post(f"{wb.url}/graphql", json=query) as resp:
                    assert resp.status == 200
        first = asyncio.create_task(wandb.viewer())
        async with asyncio.timeout(5):
            await told.wait()
        # Told to wait by the first call's 429, a second call waits too instead of spending
        # an attempt on a 429 of its own.
        second = await wandb.viewer()
        assert (await first).entity == second.entity == "ent"
    assert limit.rejected == 1
    refused_at = next(e.at for e in wb.log if e.status == 429)
    assert all(e.at - refused_at >= 0.9 for e in wb.log if e.status == 200 and e.at > refused_at)


async def test_a_window_resetting_later_than_the_policy_waits_fails_at_once(
    wb: WandbServer,
) -> None:
    wb.limit_rate(1, window=600.0)
    async with WandbClient(wb.url, wb.api_key, retry=FAST) as wandb:
        await wandb.viewer()
        with pytest.raises(WandbUnavailable, match="rate limit resets in"):
            await wandb.viewer()
    assert len(wb.log) == 1  # nothing was sent into the spent window
