"""The token bucket (client-go's QPS/Burst) and its async limiter, on given clocks."""

from __future__ import annotations

import asyncio

import pytest

from launch_agent.adapters.rate_limit import RateLimiter
from launch_agent.model.token_bucket import TokenBucket


def test_a_full_bucket_gives_its_burst_at_once_then_paces() -> None:
    bucket = TokenBucket(rate=10.0, burst=3)
    assert [bucket.reserve(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    # Empty: callers queue behind each other, a tenth of a second apart.
    assert [round(bucket.reserve(0.0), 6) for _ in range(3)] == [0.1, 0.2, 0.3]


def test_it_refills_at_its_rate_up_to_its_burst() -> None:
    bucket = TokenBucket(rate=2.0, burst=2)
    bucket.reserve(0.0)
    bucket.reserve(0.0)
    assert bucket.reserve(0.5) == 0.0  # one token back after half a second
    assert bucket.reserve(0.5) == pytest.approx(0.5)
    assert not bucket.full(1.0)
    assert bucket.full(100.0)
    assert bucket.tokens == 2.0  # never more than the burst, however long it was idle


def test_a_clock_going_back_refills_nothing() -> None:
    bucket = TokenBucket(rate=1.0, burst=1)
    bucket.reserve(10.0)
    assert bucket.reserve(5.0) == pytest.approx(1.0)


def test_a_cancelled_reservation_gives_its_token_back() -> None:
    bucket = TokenBucket(rate=1.0, burst=1)
    bucket.reserve(0.0)
    assert bucket.reserve(0.0) == pytest.approx(1.0)
    bucket.cancel(0.0)
    assert bucket.reserve(0.0) == pytest.approx(1.0)


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_nonsense_is_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        TokenBucket(rate=rate, burst=burst)


async def test_the_limiter_paces_acquisitions_on_the_loop() -> None:
    limiter = RateLimiter(20.0, 1)
    loop = asyncio.get_running_loop()
    start = loop.time()
    ticker = asyncio.create_task(asyncio.sleep(0.01))  # the loop keeps serving others
    for _ in range(6):
        assert await limiter.acquire()
    assert ticker.done()
    # 1 at once, then 5 at 20/s: a quarter of a second, not less.
    assert loop.time() - start >= 0.25 - 0.01
    assert limiter.delayed == 5


async def test_a_stop_ends_the_wait_at_once_and_gives_the_token_back() -> None:
    stop = asyncio.Event()
    limiter = RateLimiter(0.01, 1, stop=stop)  # one token per 100 s
    assert await limiter.acquire()
    waiting = asyncio.create_task(limiter.acquire())
    await asyncio.sleep(0)
    assert not waiting.done()
    stop.set()
    async with asyncio.timeout(5):
        assert await waiting is False
    assert limiter.bucket.tokens == pytest.approx(0.0, abs=0.01)
