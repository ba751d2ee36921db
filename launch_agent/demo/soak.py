"""The soak benchmark's harness: one agent process under a steady arrival of runs, sampled.

Runs arrive at `rate` a minute for `minutes` minutes on the sandbox (real-time simulated
cluster: every Job's pod runs a few seconds and succeeds), against one `launch-agent run`
subprocess. Every `interval` seconds the harness samples, each from the record that owns it:

- `rss_mb`: the agent's resident set (`/proc/PID/status` VmRSS, `procstat`);
- `open_fds`: the entries of `/proc/PID/fd`;
- `asyncio_tasks`: the agent's `launch_agent_asyncio_tasks` gauge on `/metrics`;
- `watch_connections`: the watches the Kubernetes API server holds open (its own count);
- `run_table`: the runs the agent tracks (`launch_agent_runs`, summed over states);
- `cluster_jobs`, `cluster_pods`: the Jobs and pods the API server holds (its own store).

Finished Jobs stay for their `ttlSecondsAfterFinished` (`ttl_seconds`, 300 by default here) and
the agent's watch caches them and their pods, so memory follows the cluster until the first Jobs
expire: with the production 3600 s a 30-minute soak never reaches a steady number of objects and
RSS grows with the cluster, not with a leak. `slopes` fits each metric with least squares
against time in minutes over every sample; `steady_slopes` only over the samples taken once the
first Jobs expired (from `ttl_seconds` + 60 s on), where a leak is a positive slope. The numbers
are printed, never judged here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from launch_agent.demo.dispatch import (
    AgentLauncher,
    AgentProcess,
    AgentStage,
    BenchError,
    spawn,
)
from launch_agent.demo.launchers import (
    AGENT_NAME,
    ENTITY,
    PROJECT,
    QUEUE,
    QUEUE_GRANTS,
    job_queue_spec,
    our_spec,
)
from launch_agent.demo.procstat import PROC, read_process
from launch_agent.demo.world import SandboxWorld, WorldSettings
from launch_agent.sandbox.wandb import ItemState

METRICS = (
    "rss_mb",
    "open_fds",
    "asyncio_tasks",
    "watch_connections",
    "run_table",
    "cluster_jobs",
    "cluster_pods",
)
DEFAULT_TTL_SECONDS = 300
Say = Callable[[str], None]


def slope(points: Sequence[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points; 0 for fewer than two distinct x."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return 0.0
    return sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx


def slopes(samples: Sequence[dict[str, float]], *, from_minute: float = 0.0) -> dict[str, float]:
    """Per metric: its change per minute, fitted over the samples from `from_minute` on."""
    kept = [s for s in samples if s["minute"] >= from_minute]
    return {name: round(slope([(s["minute"], s[name]) for s in kept]), 4) for name in METRICS}


def parse_metrics(text: str) -> dict[str, float]:
    """(gauge name → value) from Prometheus text; labelled series are summed by name."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_part, _, value = line.rpartition(" ")
        name = name_part.split("{", 1)[0]
        try:
            out[name] = out.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return out


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(PROC / str(pid) / "fd"))
    except OSError:
        return 0


def free_port() -> int:
    # Bound then released: the agent takes it a moment later (loopback, nothing else races).
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def soak_launcher(port: int, ttl_seconds: int) -> AgentLauncher:
    """`launch-agent run` as the dispatch benchmark starts it, with a known health port."""

    def command(world: AgentStage, scratch: Path) -> tuple[list[str], dict[str, str]]:
        specs = scratch / "queue-specs"
        specs.mkdir(exist_ok=True)
        spec = job_queue_spec("bench", QUEUE, QUEUE_GRANTS, ttl_seconds=ttl_seconds)
        (specs / "bench.yaml").write_text(spec, encoding="utf-8")
        config = scratch / "launch-config.yaml"
        config.write_text(
            f"queues: [{QUEUE}]\nentity: {ENTITY}\nmax_jobs: -1\nagent_name: {AGENT_NAME}\n"
            f"base_url: {world.wandb.url}\nqueue_specs_dir: {specs}\nnamespaces: [default]\n"
            f"health: {{host: 127.0.0.1, port: {port}}}\n",
            encoding="utf-8",
        )
        argv = [
            str(Path(sys.executable).parent / "launch-agent"),
            "run",
            "--config",
            str(config),
            "--kubeconfig",
            str(world.kubeconfig),
        ]
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
        if os.environ.get("PYTHONPATH"):
            env["PYTHONPATH"] = os.environ["PYTHONPATH"]
        env |= {"WANDB_API_KEY": world.wandb.api_key, "HOME": str(scratch)}
        return argv, env

    async def sigterm(world: AgentStage, process: asyncio.subprocess.Process) -> None:
        process.terminate()

    return AgentLauncher("launch-agent", command, lambda w, log: 0, sigterm)


@dataclass
class SoakResult:
    minutes: float
    rate_per_minute: float
    interval_seconds: float
    ttl_seconds: int = DEFAULT_TTL_SECONDS
    pushed: int = 0
    acked: int = 0
    samples: list[dict[str, float]] = field(default_factory=list)

    @property
    def steady_from(self) -> float:
        """The minute from which the cluster holds a steady number of objects."""
        return round((self.ttl_seconds + 60) / 60, 3)

    def as_json(self) -> dict[str, Any]:
        return {
            "minutes": self.minutes,
            "rate_per_minute": self.rate_per_minute,
            "interval_seconds": self.interval_seconds,
            "ttl_seconds": self.ttl_seconds,
            "runs_pushed": self.pushed,
            "runs_acked": self.acked,
            "samples": self.samples,
            "slopes_per_minute": slopes(self.samples),
            "steady_from_minute": self.steady_from,
            "steady_slopes_per_minute": slopes(self.samples, from_minute=self.steady_from),
        }


async def _sample(
    agent: AgentProcess, world: SandboxWorld, port: int, started: float
) -> dict[str, float]:
    proc = await asyncio.to_thread(read_process, agent.process.pid)
    fds = await asyncio.to_thread(open_fds, agent.process.pid)
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}/metrics") as response,
    ):
        gauges = parse_metrics(await response.text())
    return {
        "minute": round((time.monotonic() - started) / 60, 3),
        "rss_mb": round((proc.rss_kb if proc else 0) / 1024, 1),
        "open_fds": float(fds),
        "asyncio_tasks": gauges.get("launch_agent_asyncio_tasks", 0.0),
        "watch_connections": float(len(world.kube.store.watchers())),
        "run_table": gauges.get("launch_agent_runs", 0.0),
        "cluster_jobs": float(world.kube.store.count(world.kube.store.rt("jobs.batch"))),
        "cluster_pods": float(world.kube.store.count(world.kube.store.rt("pods"))),
    }


async def _ready(agent: AgentProcess, port: int, within: float = 60) -> None:
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as session:
        while time.monotonic() < deadline:
            if agent.process.returncode is not None:
                raise BenchError("the agent exited before it was ready", agent)
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise BenchError(f"the agent was not ready within {within:.0f} s", agent)


def _runs_call_init(world: SandboxWorld) -> int:
    """The runs' side: each acked run calls wandb.init (its W&B run leaves `pending`), so the
    agent's no-wandb.init check passes; the number of acked runs."""
    acked = 0
    for item in world.state.items.values():
        if item.state is ItemState.CLAIMED and item.associated_run_id:
            world.state.set_run_state(ENTITY, PROJECT, item.associated_run_id, "running")
            acked += 1
    return acked


@contextlib.asynccontextmanager
async def _world() -> AsyncIterator[tuple[SandboxWorld, Path]]:
    scratch = await asyncio.to_thread(tempfile.TemporaryDirectory, prefix="launch-soak-")
    try:
        settings = WorldSettings(default_outcome="succeed after=3s", crds="none")
        async with SandboxWorld(settings, Path(scratch.name)) as world:
            yield world, Path(scratch.name)
    finally:
        await asyncio.to_thread(scratch.cleanup)


async def soak(
    minutes: float,
    rate: float,
    interval: float,
    say: Say,
    *,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
) -> SoakResult:
    result = SoakResult(minutes, rate, interval, ttl_seconds)
    port = await asyncio.to_thread(free_port)
    async with _world() as (world, scratch):
        agent = await spawn(soak_launcher(port, ttl_seconds), world, scratch)
        try:
            await _ready(agent, port)
            started = time.monotonic()
            end = started + minutes * 60
            next_push, next_sample = started, started
            gap = 60.0 / rate if rate > 0 else float("inf")
            while True:
                now = time.monotonic()
                if agent.process.returncode is not None:
                    raise BenchError("the agent exited during the soak", agent)
                if now >= next_sample:
                    result.acked = _runs_call_init(world)
                    sample = await _sample(agent, world, port, started)
                    result.samples.append(sample)
                    say(" ".join(f"{k}={v:g}" for k, v in sample.items()))
                    next_sample += interval
                    if now >= end:
                        break
                if now < end and now >= next_push:
                    world.state.push_by_name(ENTITY, "model-registry", QUEUE, our_spec())
                    result.pushed += 1
                    next_push += gap
                wake = next_sample if now >= end else min(next_sample, next_push)
                await asyncio.sleep(max(0.0, wake - time.monotonic()))
        finally:
            await agent.stop()
    return result
