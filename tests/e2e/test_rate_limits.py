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


async def test_w_and_bs_429s_slow_the_agent_without_losing_or_repeating_an_item(
    env: Env,
) -> None:
    # Fewer requests per second than a batch of concurrent acks makes: some meet a 429.
    limit = env.wandb.limit_rate(4, window=1.0)
    items = [env.push(run_spec(f"wb{i}")) for i in range(RUNS // 2)]
    agent = env.agent(wandb_retry=RetryPolicy(attempts=8, base_delay=0.05, timeout=5))
    async with env.running(agent):
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items), within=60, message="acks"
        )
        assert agent.wandb is not None
        held = agent.wandb.stats["rate_limited"]
    assert created(env) == len(items)
    assert all(claims(i) == 1 for i in items)
    assert all(i.associated_run_id == f"wb{n}" for n, i in enumerate(items))
    assert limit.rejected > 0  # W&B did answer 429s
    assert held > 0  # and the agent held its calls for the window, not only retried them
    # Never more than the limit served in any one window, 429s or not.
    served = sorted(e.at for e in env.wandb.log if e.status == 200)
    assert all(b - a >= 0.5 for a, b in zip(served, served[8:], strict=False))


async def test_the_dispatch_pace_holds_per_project(env: Env) -> None:
    rate, per_project = 5.0, 15
    config = env.config(dispatch={"max_runs_per_second_per_project": rate})
    items = [env.push(run_spec(f"a{i}")) for i in range(per_project)]
    items += [env.push(run_spec(f"b{i}", project="other")) for i in range(per_project)]
    async with env.running(env.agent(config)) as agent:
        await until(
            lambda: all(i.state is ItemState.CLAIMED for i in items), within=60, message="acks"
        )
        text = await scrape(agent.health_port)
    assert created(env) == 2 * per_project
    creates = [e for e in env.kube.log if e.key == "POST jobs" and e.status == 201]
    # Both projects start together, each at its own pace: 5 at once, then 5 a second. So 30
    # runs take at least (15 - 5) / 5 = 2 s, and at 5 a second for one project alone they
    # would take 5 s: the projects did not wait for each other.
    first, last = creates[0].at, creates[-1].at
    assert 2.0 * 0.9 <= last - first <= 2.0 + 2.5
    # No one-second window holds more starts than both buckets allow (burst 5 + 5/s each).
    times = sorted(e.at for e in creates)
    assert all(b - a >= 0.9 for a, b in zip(times, times[20:], strict=False))
    paced = re.search(r"launch_agent_dispatch_paced_total (\d+)", text)
    assert paced is not None and int(paced.group(1)) >= 2 * (per_project - 5)
