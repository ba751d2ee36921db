"""The world a cluster-tier test runs the agent in: either tier, one interface.

- `sandbox`: the project's own loopback Kubernetes (API server, simulated controllers and
  kubelet, its Kueue model), on the wall clock, new for each test.
- `real`: the upstream kube-apiserver, etcd, kube-controller-manager, kube-scheduler and workload
  controllers (`launch-agent cluster up`, one per test session, in a process of its own), with
  the sandbox's kubelet driving pods through it (`launch_agent/realcluster/nodes.py`).

A test sees only what a user of either cluster sees: HTTP to an API server (`World.http`), a
kubeconfig for the agent, a namespace of its own, and a way to script what pods do
(`World.script`, the same outcome grammar on both). The W&B Launch server is the sandbox's on
both tiers (there is no W&B to build here).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from launch_agent.adapters.kube import InformerSettings
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.config import AgentConfig
from launch_agent.realcluster.kubehttp import ApiError, KubeHTTP, path_of
from launch_agent.runtime.agent import Agent
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem, WandbServer

Obj = dict[str, Any]
Script = Callable[[str, str], Awaitable[None]]
Compact = Callable[[], Awaitable[None]]


async def _no_compaction() -> None:
    raise NotImplementedError("this world cannot compact its API server's history")


@dataclass
class World:
    tier: str  # "sandbox" | "real"
    http: KubeHTTP
    kubeconfig: Path
    namespace: str
    wandb: WandbServer
    specs_dir: Path
    script: Script
    # Forget the API server's history up to now: a watch resuming from an older
    # resourceVersion answers 410 Gone (sandbox: its event logs; real: etcd's compaction).
    compact: Compact = _no_compaction
    agents: list[Agent] = field(default_factory=list)

    @property
    def state(self) -> LaunchState:
        return self.wandb.state

    def config(self, **overrides: Any) -> AgentConfig:
        return AgentConfig.model_validate(self.config_data(**overrides))

    def config_data(self, **overrides: Any) -> dict[str, Any]:
        """The agent's configuration as a config file holds it (`config()` validates it)."""
        data: dict[str, Any] = {
            "queues": ["q1"],
            "entity": "ent",
            "api_key": self.wandb.api_key,
            "base_url": self.wandb.url,
            "queue_specs_dir": str(self.specs_dir),
            "namespaces": [self.namespace],
            "max_jobs": -1,
            "agent_name": "tier-agent",
            "poll": {"active_interval_seconds": 0.05, "idle_interval_seconds": 0.2},
            "health": {"host": "127.0.0.1", "port": 0},
            "tracking": {"stop_check_seconds": 0.2, "unschedulable_timeout_seconds": 20},
            "stopped_run_timeout": 0,
            "shutdown_grace_seconds": 3,
            "specs_reload_seconds": 0.2,
        }
        data.update(overrides)
        return data

    def agent(
        self, config: AgentConfig | None = None, *, kubeconfig: Path | None = None, **options: Any
    ) -> Agent:
        """An in-process agent on this world (`kubeconfig`: another identity's; default the
        admin's on the real tier)."""
        options.setdefault("wandb_retry", RetryPolicy(attempts=3, base_delay=0.05, timeout=10))
        options.setdefault("kube_retry", RetryPolicy(attempts=4, base_delay=0.1, timeout=15))
        options.setdefault(
            "informer_settings", InformerSettings(backoff_base=0.05, backoff_cap=0.5)
        )
        options.setdefault("agent_check_seconds", 0.5)
        return Agent(
            config or self.config(), kubeconfig=str(kubeconfig or self.kubeconfig), **options
        )

    @contextlib.asynccontextmanager
    async def running(self, agent: Agent | None = None) -> AsyncIterator[Agent]:
        """Run an agent until the block ends; fails the test if it died."""
        agent = agent or self.agent()
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop), name="tier-agent")
        try:
            ready = asyncio.create_task(agent.ready.wait(), name="tier-agent-ready")
            done, _ = await asyncio.wait({task, ready}, timeout=60, return_when="FIRST_COMPLETED")
            if ready not in done:
                ready.cancel()
                await asyncio.gather(ready, return_exceptions=True)
                if task.done():
                    task.result()
                raise AssertionError("the agent did not become ready within 60 s")
            yield agent
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=60)

    def push(self, spec: Obj, queue: str = "q1") -> RunQueueItem:
        return self.state.push(self.state.queue("ent", "model-registry", queue), spec)

    def write_spec(self, name: str, text: str) -> None:
        """A queue spec file; `NAMESPACE` in the text becomes the test's namespace."""
        (self.specs_dir / name).write_text(text.replace("NAMESPACE", self.namespace))

    async def objects(self, api_version: str, plural: str, **params: str) -> list[Obj]:
        got = await self.http.get(path_of(api_version, plural, self.namespace), **params)
        return list(got.get("items") or [])

    async def events(self) -> list[Obj]:
        return await self.objects("v1", "events")

    async def create(self, api_version: str, plural: str, body: Obj) -> Obj:
        return await self.http.create(path_of(api_version, plural, self.namespace), body)


def run_spec(run_id: str, **extra: Any) -> Obj:
    spec: Obj = {
        "entity": "ent",
        "project": "proj",
        "run_id": run_id,
        "resource": "kubernetes",
        "docker": {"docker_image": "registry.example/train:1"},
    }
    spec.update(extra)
    return spec


def final(item: RunQueueItem) -> bool:
    return item.state in (ItemState.CLAIMED, ItemState.FAILED)


async def until(
    condition: Callable[[], Any], *, within: float = 60.0, message: str = "", every: float = 0.1
) -> Any:
    """Poll `condition` (sync or async) until it is truthy; the tiers run on the wall clock."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {within:.0f} s waiting for {message or condition}"
            )
        await asyncio.sleep(every)


async def wait_for_service_account(http: KubeHTTP, namespace: str) -> None:
    """A new namespace's `default` ServiceAccount (the service-account controller makes it):
    the ServiceAccount admission plugin refuses pods until it exists."""
    path = path_of("v1", "serviceaccounts", namespace, "default")
    await until(lambda: http.find(path), within=60, message=f"serviceaccount {namespace}/default")


async def delete_namespace(http: KubeHTTP, namespace: str) -> None:
    with contextlib.suppress(ApiError):
        await http.delete(path_of("v1", "namespaces", name=namespace))


def times(item: RunQueueItem, state: ItemState) -> int:
    """How often W&B's record of the item entered `state` (its own history, not the agent's)."""
    return sum(1 for _, entered in item.history if entered is state)


def reported_once(item: RunQueueItem, outcome: ItemState) -> bool:
    """Claimed once and, for a failure, failed once: what `double_reported` counts."""
    failed = times(item, ItemState.FAILED)
    return (
        item.state is outcome
        and times(item, ItemState.CLAIMED) == 1
        and failed == (1 if outcome is ItemState.FAILED else 0)
    )
