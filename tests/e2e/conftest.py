"""The whole agent against the sandbox: W&B server, Kubernetes API server, simulated cluster.

Each test gets fresh loopback servers (cheap) and runs the real `Agent` in-process, talking
HTTP to them through its real clients. The cluster runs on a manual clock: pods appear as soon
as the agent creates a workload, and a test moves time with `env.advance(seconds)`; the agent's
own `now` is that clock too, so deadlines (unschedulable) follow simulated time. Poll and check
intervals are short so the suite stays fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from launch_agent.adapters.kube import InformerSettings
from launch_agent.adapters.retry import RetryPolicy
from launch_agent.model.config import AgentConfig
from launch_agent.render.naming import label_value
from launch_agent.runtime.agent import Agent
from launch_agent.sandbox.cluster import ManualClock, Node, SimulatedCluster
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem, WandbServer

ROOT = Path(__file__).resolve().parents[2]
CRDS = ROOT / "tests" / "fixtures" / "crds"
EXAMPLE_SPECS = ROOT / "queue-specs"

BASIC_SPEC = """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: basic
spec:
  queues: [q1]
  namespace: default
  template:
    apiVersion: batch/v1
    kind: Job
    spec:
      template:
        spec:
          containers:
            - name: main
              image: ${image_uri}
              resources:
                requests: {cpu: "1", memory: 1Gi}
  overridable:
    - overrides.args
    - overrides.run_config
  defaults:
    activeDeadlineSeconds: 3600
"""


def pytorch_spec(*, worker: bool = False, overridable: Sequence[str] = ()) -> str:
    """The PyTorchJob queue spec `ddp` on queue `q-ddp`: a Master, and a Worker if asked."""
    replica = """\
          replicas: 1
          template:
            spec:
              containers:
                - name: pytorch
                  image: ${image_uri}
"""
    replicas = "        Master:\n" + replica + ("        Worker:\n" + replica if worker else "")
    allowed = "".join(f"    - {path}\n" for path in overridable)
    return (
        """\
apiVersion: launch-agent/v1
kind: QueueSpec
metadata:
  name: ddp
spec:
  queues: [q-ddp]
  namespace: default
  template:
    apiVersion: kubeflow.org/v1
    kind: PyTorchJob
    spec:
      pytorchReplicaSpecs:
"""
        + replicas
        + ("  overridable:\n" + allowed if allowed else "  overridable: []\n")
    )


BIG_NODE = Node(
    "sandbox-node",
    {
        "cpu": "1000",
        "memory": "4000Gi",
        "nvidia.com/gpu": "256",
        "google.com/tpu": "256",
        "pods": "10000",
    },
)


def run_spec(run_id: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "entity": "ent",
        "project": "proj",
        "run_id": run_id,
        "resource": "kubernetes",
        "docker": {"docker_image": "registry.example/train:1"},
        "overrides": {"args": ["--epochs", "1"]},
    }
    spec.update(extra)
    return spec


@dataclass
class Env:
    wandb: WandbServer
    kube: KubeApiServer
    cluster: SimulatedCluster
    clock: ManualClock
    specs_dir: Path
    kubeconfig: Path
    agents: list[Agent] = field(default_factory=list)

    @property
    def state(self) -> LaunchState:
        return self.wandb.state

    def config(self, **overrides: Any) -> AgentConfig:
        data: dict[str, Any] = {
            "queues": ["q1"],
            "entity": "ent",
            "api_key": self.wandb.api_key,
            "base_url": self.wandb.url,
            "queue_specs_dir": str(self.specs_dir),
            "namespaces": ["default"],
            "max_jobs": -1,
            "agent_name": "test-agent",
            "poll": {"active_interval_seconds": 0.02, "idle_interval_seconds": 0.1},
            "health": {"host": "127.0.0.1", "port": 0},
            "tracking": {"stop_check_seconds": 0.1, "unschedulable_timeout_seconds": 120},
            "stopped_run_timeout": 0,
            "shutdown_grace_seconds": 3,
            "specs_reload_seconds": 0.1,
        }
        data.update(overrides)
        return AgentConfig.model_validate(data)

    def agent(self, config: AgentConfig | None = None, **options: Any) -> Agent:
        options.setdefault("now", self.clock.now)
        options.setdefault("wandb_retry", RetryPolicy(attempts=2, base_delay=0.05, timeout=5))
        options.setdefault("kube_retry", RetryPolicy(attempts=3, base_delay=0.05, timeout=5))
        options.setdefault(
            "informer_settings", InformerSettings(backoff_base=0.05, backoff_cap=0.5)
        )
        options.setdefault("agent_check_seconds", 0.2)
        return Agent(config or self.config(), kubeconfig=str(self.kubeconfig), **options)

    @contextlib.asynccontextmanager
    async def running(self, agent: Agent | None = None) -> AsyncIterator[Agent]:
        """Run an agent until the block ends; fails the test if it died."""
        agent = agent or self.agent()
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run(stop), name="e2e-agent")
        try:
            ready = asyncio.create_task(agent.ready.wait(), name="e2e-agent-ready")
            done, _ = await asyncio.wait({task, ready}, timeout=20, return_when="FIRST_COMPLETED")
            if ready not in done:
                ready.cancel()
                await asyncio.gather(ready, return_exceptions=True)
                if task.done():
                    task.result()  # raises the start-up error
                raise AssertionError("the agent did not become ready within 20 s")
            yield agent
        finally:
            stop.set()
            await asyncio.wait_for(task, timeout=30)

    def push(self, spec: dict[str, Any], queue: str = "q1") -> RunQueueItem:
        return self.state.push(self.state.queue("ent", "model-registry", queue), spec)

    def advance(self, seconds: float) -> None:
        self.cluster.advance(seconds)

    def jobs(self, namespace: str = "default") -> list[dict[str, Any]]:
        return self.kube.objects.list("jobs", namespace=namespace)

    def pods_of(self, item: RunQueueItem, namespace: str = "default") -> list[dict[str, Any]]:
        selector = f"launch-agent.io/run-queue-item={label_value(item.id)}"
        return self.kube.objects.list("pods", namespace=namespace, label_selector=selector)


async def poll_rounds(agent: Agent, count: int = 2, within: float = 15.0) -> None:
    """Wait until the agent's poller has ended `count` more rounds. Each round decides what may
    be popped (and pops it); the first may have begun before this call, the second began after
    it, so what a test then asserts did not happen had its chance to happen."""
    assert agent.poller is not None
    async with asyncio.timeout(within):
        await agent.poller.wait_rounds(count)


async def until(
    condition: Callable[[], Any],
    *,
    within: float = 15.0,
    advance: Callable[[], None] | None = None,
    message: str = "",
) -> Any:
    """Poll `condition` (a test-side check of sandbox state) until it is truthy."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {message or condition}")
        if advance is not None:
            advance()
        await asyncio.sleep(0.02)


def final(item: RunQueueItem) -> bool:
    return item.state in (ItemState.CLAIMED, ItemState.FAILED)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "basic.yaml").write_text(BASIC_SPEC)
    state = LaunchState(entity="ent", lease_seconds=3)
    state.add_queue("q1")
    clock = ManualClock()
    async with (
        WandbServer(state) as wb,
        KubeApiServer(host="127.0.0.1", port=0) as kube,
        SimulatedCluster(kube, clock=clock, nodes=[BIG_NODE]) as cluster,
    ):
        kubeconfig = await asyncio.to_thread(write_kubeconfig, tmp_path / "kubeconfig", kube.url)
        yield Env(wb, kube, cluster, clock, specs, kubeconfig)
