"""The stop-check schedule: requests a minute bounded, young runs asked about on every tick.

Time is a simulated clock advanced by one tick per `select`; nothing sleeps.
"""

from __future__ import annotations

import math
from collections import Counter

import pytest

from launch_agent.tracking.stop_schedule import StopCheckPolicy, StopSchedule

POLICY = StopCheckPolicy()  # the defaults the agent ships with
HOUR = 3600.0


def simulate(
    policy: StopCheckPolicy, started: dict[str, float], minutes: float, now: float = 0.0
) -> tuple[list[list[str]], list[float]]:
    """`started`: run -> start time on the simulated clock. Returns each tick's selection and
    the clock reading of each tick."""
    schedule = StopSchedule(policy)
    ticks, times = [], []
    for _ in range(round(minutes * 60 / policy.interval)):
        now += policy.interval
        ticks.append(schedule.select([(run, now - at) for run, at in started.items()]))
        times.append(now)
    return ticks, times


def requests(policy: StopCheckPolicy, tick: list[str]) -> int:
    return math.ceil(len(tick) / policy.batch)


def per_minute(policy: StopCheckPolicy, ticks: list[list[str]]) -> list[int]:
    n = round(60 / policy.interval)
    return [sum(requests(policy, t) for t in ticks[i : i + n]) for i in range(0, len(ticks), n)]


def population(young: int, old: int, now: float = 0.0) -> dict[str, float]:
    runs = {f"young-{i}": now - (i % 3000) for i in range(young)}  # started < 1 h ago
    runs |= {f"old-{i}": now - HOUR - 60 - i for i in range(old)}
    return runs


def test_ten_thousand_runs_cost_at_most_120_requests_a_minute() -> None:
    # The old policy asked about every run on every tick: 10,000 / 100 per request, 6 times a
    # minute = 600 requests a minute.
    assert math.ceil(10_000 / POLICY.batch) * 60 / POLICY.interval == 600
    ticks, _ = simulate(POLICY, population(young=1_000, old=9_000), minutes=10)
    assert max(per_minute(POLICY, ticks)) <= 120
    assert POLICY.requests_per_minute(young=1_000, old=9_000) <= 120


def test_young_runs_are_asked_about_on_every_tick() -> None:
    started = population(young=1_000, old=9_000)
    ticks, times = simulate(POLICY, started, minutes=5)
    for tick, now in zip(ticks, times, strict=True):
        young_now = {r for r, at in started.items() if now - at < POLICY.young_seconds}
        assert young_now <= set(tick)  # so a stop is seen within one interval: 10 s


def test_each_older_run_is_asked_about_within_its_interval() -> None:
    ticks, _ = simulate(POLICY, population(young=1_000, old=9_000), minutes=15)
    per_window = round(POLICY.old_interval / POLICY.interval)
    for start in range(0, len(ticks) - per_window + 1, per_window):
        seen = Counter(r for t in ticks[start : start + per_window] for r in t)
        assert all(seen[f"old-{i}"] >= 1 for i in range(9_000))


def test_runs_age_into_the_older_tier() -> None:
    # A run started 59 minutes ago is young now and old two minutes later.
    started = {"r": -59 * 60.0, **{f"old-{i}": -2 * HOUR for i in range(5_000)}}
    ticks, times = simulate(POLICY, started, minutes=3)
    assert all("r" in t for t, now in zip(ticks, times, strict=True) if now - started["r"] < HOUR)
    late = [t for t, now in zip(ticks, times, strict=True) if now - started["r"] >= HOUR]
    assert late and sum("r" in t for t in late) < len(late)


def test_the_budget_holds_even_when_every_run_is_young() -> None:
    # 10,000 runs started in the last hour need 600 requests a minute to be asked about every
    # 10 s; the cap wins and they are asked about in turn, each within ceil(10,000 / 1,600)
    # ticks.
    started = population(young=10_000, old=0)
    ticks, _ = simulate(POLICY, started, minutes=3)
    assert max(per_minute(POLICY, ticks)) <= POLICY.max_requests_per_minute
    rounds = math.ceil(10_000 / POLICY.capacity)
    for start in range(0, len(ticks) - rounds + 1):
        assert set().union(*ticks[start : start + rounds]) == set(started)


def test_the_last_request_of_a_tick_is_filled_with_older_runs() -> None:
    policy = StopCheckPolicy(batch=100)
    ticks, _ = simulate(policy, population(young=30, old=9_000), minutes=1)
    assert all(len(t) % policy.batch == 0 for t in ticks)


def test_nothing_to_check_selects_nothing() -> None:
    assert StopSchedule(POLICY).select([]) == []


@pytest.mark.parametrize(
    "kwargs",
    [{"interval": 0}, {"old_interval": 5.0}, {"batch": 0}, {"max_requests_per_minute": 0}],
)
def test_invalid_policies_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"need|at least 1"):
        StopCheckPolicy(**kwargs)  # type: ignore[arg-type]
