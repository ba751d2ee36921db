"""Probes and metrics over HTTP."""

from __future__ import annotations

import aiohttp

from launch_agent.runtime.health import HealthServer, Readiness
from launch_agent.runtime.metrics import Metrics

READINESS_CASES = [
    # (last poll age in intervals, watches, shutting down, expected problems)
    (None, {}, False, ["W&B not polled successfully yet"]),
    (1, {}, False, []),
    (7, {}, False, ["W&B not polled successfully for 70s"]),
    (1, {"jobs/default": True, "pods/default": False}, False, ["watch pods/default disconnected"]),
    (1, {}, True, ["shutting down"]),
]


def test_readiness_table() -> None:
    for age, watches, shutting_down, expected in READINESS_CASES:
        r = Readiness(poll_interval_seconds=10, intervals_allowed=6, started=0.0)
        r.last_poll_ok = None if age is None else 1000.0 - age * 10
        r.watches.update(watches)
        r.shutting_down = shutting_down
        assert r.problems(now=1000.0) == expected


async def test_endpoints() -> None:
    readiness = Readiness(poll_interval_seconds=10)
    metrics = Metrics()
    metrics.pops.labels(queue="q1").inc(3)
    async with (
        HealthServer(readiness, metrics, "127.0.0.1", 0) as server,
        aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as http,
    ):
        async with http.get("/healthz") as resp:
            assert resp.status == 200
        async with http.get("/readyz") as resp:
            assert resp.status == 503
            assert "W&B not polled successfully yet" in await resp.text()
        readiness.polled()
        async with http.get("/readyz") as resp:
            assert resp.status == 200
        async with http.get("/metrics") as resp:
            assert resp.status == 200
            assert 'launch_agent_pops_total{queue="q1"} 3.0' in await resp.text()


def test_a_standby_is_ready_without_polling_and_says_so() -> None:
    r = Readiness(poll_interval_seconds=10, started=0.0, role="standby")
    assert r.problems(now=1000.0) == []
    r.watches["pods/default"] = False
    assert r.problems(now=1000.0) == ["watch pods/default disconnected"]
    r.role = "leader"  # took over: now it must poll like any agent
    assert r.problems(now=1000.0) == [
        "W&B not polled successfully yet",
        "watch pods/default disconnected",
    ]


async def test_readyz_names_the_role() -> None:
    readiness = Readiness(poll_interval_seconds=10, role="standby")
    async with (
        HealthServer(readiness, Metrics(), "127.0.0.1", 0) as server,
        aiohttp.ClientSession(f"http://127.0.0.1:{server.port}") as http,
    ):
        async with http.get("/readyz") as resp:
            assert resp.status == 200
            assert (await resp.text()).splitlines()[-1] == "role: standby"
        readiness.role = "leader"
        async with http.get("/readyz") as resp:
            assert resp.status == 503
            assert (await resp.text()).splitlines() == [
                "W&B not polled successfully yet",
                "role: leader",
            ]
