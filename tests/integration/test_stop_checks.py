"""The stop checks against the sandbox W&B server: requests bounded by the policy, a stop of a
young run seen on the next tick, an older run's within its interval. Ticks are driven by hand
with an injected clock; nothing sleeps."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from launch_agent.adapters.kube import KubeClient
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.adapters.wandb_client import WandbClient
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.stopper import Stopper
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.wandb import LaunchState, WandbServer
from launch_agent.tracking.stop_schedule import StopCheckPolicy

FAST = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.05, timeout=10.0)
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
# Scaled down so the sandbox validates small documents: 10 runs a request, 5 requests a tick.
POLICY = StopCheckPolicy(
    interval=10, young_seconds=3600, old_interval=300, batch=10, max_requests_per_minute=30
)
YOUNG, OLD = 30, 270


@pytest.fixture
def idle_server() -> WandbServer:
    return WandbServer(LaunchState(entity="ent"))


@pytest.fixture
async def wb(idle_server: WandbServer) -> AsyncIterator[WandbServer]:
    async with idle_server as server:
        yield server


@pytest.fixture
async def kube(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with KubeApiServer(host="127.0.0.1", port=0) as server:
        path = await asyncio.to_thread(write_kubeconfig, tmp_path / "kc", server.url, "default")
        client = await KubeClient.from_kubeconfig(str(path), policy=FAST)
        async with client:
            yield client


def record(run: str, age: float) -> RunRecord:
    created = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    r = RunRecord(f"item-{run}", "q1", "ent", "proj", run, "default", f"w-{run}", "batch/v1", "Job")
    r.acked = True
    r.last = {"metadata": {"name": f"w-{run}", "creationTimestamp": created}}
    return r


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


async def test_requests_stay_within_the_budget_and_stops_are_seen(
    wb: WandbServer, kube: KubeClient
) -> None:
    runs = RunTable()
    for i in range(YOUNG):
        runs.add(record(f"young{i}", age=60.0 + i))
    for i in range(OLD):
        runs.add(record(f"old{i}", age=2 * 3600.0 + i))
    for r in runs:
        wb.state.upsert_run("ent", "proj", r.run_id)
    clock = Clock()
    async with WandbClient(wb.url, wb.api_key, retry=FAST, stop_check_batch=POLICY.batch) as w:
        stopper = Stopper(w, kube, runs, policy=POLICY, timeout=600.0, clock=clock, now=lambda: NOW)
        wb.log.reset()
        for _ in range(6):  # one minute of ticks
            clock.t += POLICY.interval
            await stopper.check()
        # The old policy: all 300 runs every tick, 30 requests a tick, 180 a minute.
        assert wb.log.count("RunStoppedStatus") == 6 * 4  # 30 young + 9 older = 4 requests
        assert wb.log.count("RunStoppedStatus") <= POLICY.max_requests_per_minute

        young, old = runs.get("item-young7"), runs.get("item-old123")
        assert young is not None and old is not None
        wb.state.stop_run("ent", "proj", "young7")
        wb.state.stop_run("ent", "proj", "old123")
        clock.t += POLICY.interval
        await stopper.check()
        assert young.stop_requested_at == clock.t  # within one tick: 10 s
        ticks = 0
        while old.stop_requested_at is None:
            clock.t += POLICY.interval
            await stopper.check()
            ticks += 1
        assert ticks <= POLICY.old_interval / POLICY.interval
