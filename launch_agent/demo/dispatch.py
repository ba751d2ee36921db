"""The dispatch benchmark's harness: one agent process against a fresh sandbox, measured.

The sandbox (W&B server and Kubernetes API server, no controllers unless asked) runs in the
benchmark's own process; the agent runs as a subprocess, so the CPU and memory sampled from
`/proc` (`procstat`) are the agent's alone (with its children: the reference agent's
`wandb-core`). The method is the one docs/benchmarks.md describes:

1. N items are queued before the agent starts; time zero is the spawn ("enqueue").
2. Every Job creation is timed by a listener on the API server's store; every pop by the W&B
   server's item history. Pop → create latency joins them by the run id the item was acked
   with (the `wandb.ai/run-id` label both agents put on the Job).
3. Requests are the servers' own counts (W&B by GraphQL operation, Kubernetes by verb and
   resource), from the spawn until every item is created and acknowledged.
4. Then the test plays the workloads: every W&B run is marked finished and every Job
   succeeded (as the Job controller would), and the harness waits until the agent has dealt
   with all of them, then counts the requests of an idle window.

`AgentLauncher` says how to start and stop each agent; `Bench` does the measuring.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import signal
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from launch_agent.demo.procstat import TreeSampler
from launch_agent.demo.world import SandboxWorld
from launch_agent.sandbox.wandb import ItemState, LaunchState, RunQueueItem, WandbServer

WANDB_RUN_ID = "wandb.ai/run-id"
ITEM_ANNOTATION = "launch-agent.io/run-queue-item-id"


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100), nearest-rank; 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def requests(counts: dict[str, int]) -> int:
    """Requests in a server's counter (the W&B server also counts GraphQL fields)."""
    return sum(v for k, v in counts.items() if not k.startswith("field:"))


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    out = {k: v - before.get(k, 0) for k, v in after.items() if not k.startswith("field:")}
    return {k: v for k, v in sorted(out.items()) if v}


class AgentStage(Protocol):
    """What an agent is started against: a W&B server and a kubeconfig (the sandbox's
    `SandboxWorld`, or the real API server's stage in `bench_real`)."""

    @property
    def wandb(self) -> WandbServer: ...

    @property
    def state(self) -> LaunchState: ...

    @property
    def kubeconfig(self) -> Path: ...


@dataclass
class AgentLauncher:
    """How to run one agent: argv and environment, given its stage and a scratch dir."""

    name: str
    command: Callable[[AgentStage, Path], tuple[list[str], dict[str, str]]]
    # How many finished Jobs the agent is done with, from the sandbox and the agent's log:
    # ours logs each run's terminal state; the reference deletes the run's API-key Secret.
    finished: Callable[[SandboxWorld, str], int]
    graceful_stop: Callable[[AgentStage, asyncio.subprocess.Process], Awaitable[None]]


@dataclass
class Creates:
    """Job creations seen by the API server's store, with their wall-clock time."""

    times: dict[str, float] = field(default_factory=dict)  # job name -> time.time()
    run_ids: dict[str, str] = field(default_factory=dict)  # job name -> wandb.ai/run-id
    items: dict[str, str] = field(default_factory=dict)  # job name -> rqi annotation

    def listener(self, storage: str, kind: str, obj: dict[str, Any]) -> None:
        if storage != "batch/jobs" or kind != "ADDED":
            return
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        self.times.setdefault(name, time.time())
        self.run_ids[name] = str((meta.get("labels") or {}).get(WANDB_RUN_ID, ""))
        item = (meta.get("annotations") or {}).get(ITEM_ANNOTATION)
        if item:
            self.items[name] = str(item)


class AgentProcess:
    """A running agent subprocess with its sampler and log file."""

    def __init__(self, process: asyncio.subprocess.Process, log: Path, spawned: float) -> None:
        self.process = process
        self.log = log
        self.spawned = spawned
        self.sampler = TreeSampler(process.pid).start()

    async def sample(self) -> dict[str, Any]:
        stats = await asyncio.to_thread(self.sampler.sample)
        return {
            "cpu_seconds": round(stats.cpu_seconds(), 2),
            "peak_rss_mb": stats.peak_rss_mb(self.process.pid),
            "peak_tree_rss_mb": round(stats.peak_tree_rss_kb / 1024, 1),
            "processes": stats.by_name(),
        }

    async def log_match(self, pattern: str, within: float) -> tuple[float, re.Match[str]] | None:
        """Wait for a log line matching `pattern`; (seconds since spawn, match)."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            text = await asyncio.to_thread(self.log.read_text, errors="replace")
            found = regex.search(text)
            if found:
                return time.monotonic() - self.spawned, found
            if self.process.returncode is not None:
                return None
            await asyncio.sleep(0.05)
        return None

    async def stop(self, graceful: Awaitable[None] | None = None, within: float = 40) -> None:
        try:
            if self.process.returncode is None:
                if graceful is not None:
                    await graceful
                else:
                    self.process.send_signal(signal.SIGTERM)
                try:
                    await asyncio.wait_for(self.process.wait(), within)
                except TimeoutError:
                    self.process.kill()
                    await self.process.wait()
        finally:
            await asyncio.to_thread(self.sampler.stop)

    async def text(self) -> str:
        return await asyncio.to_thread(self.log.read_text, errors="replace")

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""


async def spawn(launcher: AgentLauncher, world: AgentStage, scratch: Path) -> AgentProcess:
    argv, env = await asyncio.to_thread(launcher.command, world, scratch)
    log_path = scratch / f"{launcher.name}.log"

    def open_log() -> int:
        return os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    fd = await asyncio.to_thread(open_log)
    try:
        spawned = time.monotonic()
        process = await asyncio.create_subprocess_exec(
            *argv, env=env, stdout=fd, stderr=asyncio.subprocess.STDOUT, cwd=scratch
        )
    finally:
        os.close(fd)
    return AgentProcess(process, log_path, spawned)


async def wait_for(
    what: str, check: Callable[[], bool], within: float, agent: AgentProcess, tick: float = 0.05
) -> float:
    """Seconds until `check()`; raises `BenchError` with the agent's log on timeout or exit."""
    started = time.monotonic()
    while not check():
        if agent.process.returncode is not None:
            raise BenchError(f"the agent exited ({agent.process.returncode}) before {what}", agent)
        if time.monotonic() - started > within:
            raise BenchError(f"timed out after {within:.0f} s waiting for {what}", agent)
        await asyncio.sleep(tick)
    return time.monotonic() - started


class BenchError(Exception):
    def __init__(self, message: str, agent: AgentProcess | None = None) -> None:
        tail = f"\n--- agent log (tail) ---\n{agent.tail()}" if agent is not None else ""
        super().__init__(message + tail)


def latencies(items: list[RunQueueItem], creates: Creates) -> list[float]:
    """Pop → create seconds per Job: the last pop of its item before the Job appeared."""
    by_run = {i.associated_run_id: i for i in items if i.associated_run_id}
    by_id = {i.id: i for i in items}
    out = []
    for name, created in creates.times.items():
        item = by_id.get(creates.items.get(name, "")) or by_run.get(creates.run_ids.get(name, ""))
        if item is None:
            continue
        pops = [t for t, state in item.history if state is ItemState.LEASED and t <= created]
        if pops:
            out.append(created - pops[-1])
    return out


def summary_ms(values: list[float]) -> dict[str, float]:
    ms = [v * 1000 for v in values]
    return {
        "p50": round(percentile(ms, 50), 1),
        "p90": round(percentile(ms, 90), 1),
        "p99": round(percentile(ms, 99), 1),
        "max": round(max(ms, default=0.0), 1),
        "mean": round(statistics.fmean(ms), 1) if ms else 0.0,
    }


def mark_all_succeeded(world: SandboxWorld, entity: str, project: str) -> int:
    """What the workloads and the Job controller do: runs finished, Jobs Complete."""
    for item in world.state.items.values():
        if item.associated_run_id:
            world.state.set_run_state(entity, project, item.associated_run_id, "finished")
    jobs = world.kube.objects.list("jobs")
    for job in jobs:
        meta = job["metadata"]
        world.kube.objects.patch_status(
            "jobs",
            meta["name"],
            {
                "succeeded": 1,
                "active": 0,
                "conditions": [
                    {"type": "SuccessCriteriaMet", "status": "True"},
                    {"type": "Complete", "status": "True"},
                ],
            },
            namespace=meta["namespace"],
        )
    return len(jobs)
