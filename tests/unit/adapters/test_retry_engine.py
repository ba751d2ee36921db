"""The retry engine against a real loopback HTTP server: 429 with Retry-After, 5xx, connection
resets, attempts, a deadline and a stop event.

The engine's clock and sleep are injected: `FakeTime.sleep` records each wait and moves the
clock by it, so the tests check the exact waits the engine chose without sleeping them.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from launch_agent.adapters.retry import (
    NETWORK_ERRORS,
    GaveUp,
    Retryable,
    RetryPolicy,
    call_with_retries,
    kube_retryable,
    parse_retry_after,
)

# (status, Retry-After header) per request, or "reset" to drop the connection unanswered.
Step = tuple[int, str | None] | str


@dataclass
class Script:
    steps: list[Step]
    requests: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        step = self.steps.pop(0) if self.steps else (200, None)
        if step == "reset":
            assert request.transport is not None
            request.transport.close()  # the client sees the connection end with no answer
            return web.Response()
        assert isinstance(step, tuple)
        status, retry_after = step
        headers = {} if retry_after is None else {"Retry-After": retry_after}
        return web.Response(status=status, text=f"answer {status}", headers=headers)


@dataclass
class FakeTime:
    now: float = 1000.0
    waits: list[float] = field(default_factory=list)

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


@dataclass
class Server:
    script: Script
    url: str
    session: aiohttp.ClientSession

    async def attempt(self) -> str:
        """One POST, classified as the Kubernetes client classifies its answers. A POST, since
        aiohttp itself sends an idempotent request again once when the connection drops, which
        would hide the reset from the engine."""
        try:
            async with self.session.post(self.url) as resp:
                body = await resp.text()
                if 200 <= resp.status < 300:
                    return body
                if kube_retryable(resp.status):
                    raise Retryable(
                        f"HTTP {resp.status}", parse_retry_after(resp.headers.get("Retry-After"))
                    )
                raise LookupError(f"HTTP {resp.status}")
        except NETWORK_ERRORS as exc:
            raise Retryable(exc) from exc


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    script = Script([])
    app = web.Application()
    app.router.add_post("/", script.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            yield Server(script, f"http://127.0.0.1:{port}/", session)
    finally:
        await runner.cleanup()


POLICY = RetryPolicy(attempts=6, base_delay=0.2, max_delay=10.0, max_retry_after=60.0)


def expected_waits(policy: RetryPolicy, seed: int, count: int) -> list[float]:
    rand = random.Random(seed)
    return [policy.backoff(i, rand.random()) for i in range(count)]


async def test_429_waits_at_least_retry_after(server: Server) -> None:
    server.script.steps = [(429, "3"), (200, None)]
    time = FakeTime()
    answer = await call_with_retries(
        server.attempt, POLICY, rng=random.Random(1), sleep=time.sleep, clock=time.clock
    )
    assert answer == "answer 200"
    assert server.script.requests == 2
    # The backoff alone is 0.1-0.2 s; the server asked for 3.
    assert time.waits == [3.0]


async def test_5xx_and_resets_follow_the_jittered_backoff(server: Server) -> None:
    server.script.steps = [(503, None), "reset", (500, None), (502, None), (200, None)]
    time = FakeTime()
    retried: list[tuple[int, str]] = []
    answer = await call_with_retries(
        server.attempt,
        POLICY,
        rng=random.Random(7),
        sleep=time.sleep,
        clock=time.clock,
        on_retry=lambda n, failure, wait: retried.append((n, str(failure)[:8])),
    )
    assert answer == "answer 200"
    assert server.script.requests == 5
    assert time.waits == expected_waits(POLICY, 7, 4)
    # Equal jitter: each wait is between half its step and the step.
    for i, wait in enumerate(time.waits):
        step = POLICY.base_delay * 2**i
        assert step / 2 <= wait <= step
    assert [n for n, _ in retried] == [0, 1, 2, 3]
    assert retried[0][1] == "HTTP 503"
    assert retried[1][1] != "HTTP 503"  # the reset: a network error, not an answer


async def test_attempts_run_out(server: Server) -> None:
    server.script.steps = [(503, None)] * 10
    time = FakeTime()
    policy = RetryPolicy(attempts=3, base_delay=0.5, max_delay=1.0)
    with pytest.raises(GaveUp) as caught:
        await call_with_retries(
            server.attempt, policy, rng=random.Random(2), sleep=time.sleep, clock=time.clock
        )
    assert caught.value.reason == "attempts"
    assert caught.value.attempts == 3
    assert str(caught.value.last) == "HTTP 503"
    assert server.script.requests == 3
    assert len(time.waits) == 2


async def test_deadline_ends_the_retries_before_a_wait_that_would_pass_it(
    server: Server,
) -> None:
    server.script.steps = [(503, None)] * 50
    time = FakeTime()
    policy = RetryPolicy(attempts=None, base_delay=1.0, max_delay=4.0, deadline=10.0, jitter=0)
    with pytest.raises(GaveUp) as caught:
        await call_with_retries(
            server.attempt, policy, rng=random.Random(3), sleep=time.sleep, clock=time.clock
        )
    assert caught.value.reason == "deadline"
    # Waits 1 + 2 + 4 = 7 s; the next (4 s) would end at 11 s, past the 10 s deadline.
    assert time.waits == [1.0, 2.0, 4.0]
    assert server.script.requests == 4 == caught.value.attempts


async def test_a_retry_after_longer_than_the_bound_gives_up_at_once(server: Server) -> None:
    server.script.steps = [(429, "120"), (200, None)]
    time = FakeTime()
    with pytest.raises(GaveUp) as caught:
        await call_with_retries(server.attempt, POLICY, sleep=time.sleep, clock=time.clock)
    assert caught.value.reason == "retry-after"
    assert caught.value.last.retry_after == 120.0
    assert server.script.requests == 1
    assert time.waits == []


async def test_an_answer_that_is_not_retryable_is_raised_at_once(server: Server) -> None:
    server.script.steps = [(404, None), (200, None)]
    time = FakeTime()
    with pytest.raises(LookupError, match="HTTP 404"):
        await call_with_retries(server.attempt, POLICY, sleep=time.sleep, clock=time.clock)
    assert server.script.requests == 1
    assert time.waits == []


async def test_stop_wakes_the_wait_and_ends_the_retries_after_one_last_attempt(
    server: Server,
) -> None:
    server.script.steps = [(503, None)] * 10
    stop = asyncio.Event()
    # An hour's wait that only the stop event can end (the test would time out otherwise).
    policy = RetryPolicy(attempts=None, base_delay=3600.0, max_delay=3600.0, jitter=0)
    async with asyncio.timeout(10):
        with pytest.raises(GaveUp) as caught:
            await call_with_retries(
                server.attempt, policy, stop=stop, on_retry=lambda n, f, w: stop.set()
            )
    assert caught.value.reason == "stopped"
    assert server.script.requests == 2 == caught.value.attempts


async def test_unbounded_attempts_go_on_until_the_server_answers(server: Server) -> None:
    server.script.steps = [(503, None)] * 40
    time = FakeTime()
    policy = RetryPolicy(attempts=None, base_delay=0.5, max_delay=30.0, jitter=0)
    answer = await call_with_retries(server.attempt, policy, sleep=time.sleep, clock=time.clock)
    assert answer == "answer 200"
    assert server.script.requests == 41
    # Plain doubling from 0.5 s, capped at 30 s (the reporter's timing).
    assert time.waits[:7] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0]
    assert set(time.waits[6:]) == {30.0}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"deadline": 0}, "deadline"), ({"jitter": 1.5}, "jitter"), ({"attempts": 0}, "attempts")],
)
def test_policy_refuses_nonsense(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RetryPolicy(**kwargs)  # type: ignore[arg-type]
