"""Rate limits, both servers': an agent throttled by them finishes every run exactly once.

The sandbox API server answers 429 as priority and fairness does once the agent sends faster
than it allows (`sandbox/kube/flowcontrol.py`), and the sandbox W&B server as W&B does
(`RateLimit-*` and `Retry-After`). Counts are the servers' own: the Jobs the API server
created (201s), the items W&B saw claimed. Rates are measured on the servers' request logs.
"""

from __future__ import annotations

import re

import aiohttp

from launch_agent.adapters.retry import RetryPolicy
from launch_agent.sandbox.wandb import ItemState, RunQueueItem
from tests.e2e.conftest import Env, run_spec, until

RUNS = 30


def created(env: Env) -> int:
    return sum(1 for r in env.kube.log if r.key == "POST jobs" and r.status == 201)


def claims(item: RunQueueItem) -> int:
    return sum(1 for _, state in item.history if state is ItemState.CLAIMED)


async def scrape(port: int | None) -> str:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/metrics") as resp,
    ):
        return await resp.text()


async def test_a_throttling_api_server_slows_dispatch_but_every_run_is_created_once(
    env: Env,
) -> None:
    flow = env.kube.throttle(qps=10.0, burst=5)
    items = [env.push(run_spec(f"apf{i}")) for i in range(RUNS)]
    # Enough attempts that a create outlasts a few 429s (each retried after Retry-After: 1).
    agent = env.agent(kube_retry=RetryPolicy(attempts=8, base_delay=0.05, timeout=5))
    async with env.running(agent):
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items), within=60, message="acks"
        )
        text = await scrape(agent.health_port)
    assert created(env) == RUNS
    assert len(env.jobs()) == RUNS
    assert all(claims(i) == 1 for i in items)
    assert sum(flow.rejected.values()) > 0
    counted = re.search(
        r'launch_agent_kubernetes_throttled_total\{priority_level="'
        + re.escape(flow.priority_level_uid)
        + r'"\} (\d+)',
        text,
    )
    assert counted is not None and int(counted.group(1)) > 0
