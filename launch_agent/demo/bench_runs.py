"""The dispatch benchmark's three experiments, each in a fresh sandbox.

- `measure_dispatch`: N queued single-pod Jobs → throughput, pop → create latency, requests
  per run, CPU, peak RSS, time to notice completion, idle requests (either agent);
- `measure_tracking`: ours with `runs` Jobs running (a Running pod each, written by the
  harness as a kubelet would): watch connections, requests per minute, RSS over a window;
  then the agent is stopped (SIGTERM), the runs are made two hours old (their
  `creationTimestamp`) and it is started again: time until it has adopted every run, and W&B
  requests per minute when every run is in the older stop-check tier.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from launch_agent.demo.dispatch import (
    AgentLauncher,
    AgentProcess,
    BenchError,
    Creates,
    delta,
    latencies,
    mark_all_succeeded,
    requests,
    spawn,
    summary_ms,
    wait_for,
)
from launch_agent.demo.launchers import ENTITY, PROJECT, QUEUE
from launch_agent.demo.world import SandboxWorld, WorldSettings
from launch_agent.sandbox.wandb import ItemState
from launch_agent.tracking.stop_schedule import StopCheckPolicy

Say = Callable[[str], None]
AGED_SECONDS = 2 * 3600.0
# The stop checks before tiers (every run every 10 s, 100 a request), for the side-by-side.
OLD_POLICY = StopCheckPolicy(
    interval=10.0, young_seconds=float("inf"), batch=100, max_requests_per_minute=10**9
)
ADOPTED = r"adopted (\d+) run\(s\)"


def _settings() -> WorldSettings:
    # No controllers (Jobs stay as created until the harness completes them), no CRDs, and a
    # lease long enough that a slow agent never sees an item offered twice.
    return WorldSettings(
        entity=ENTITY, queues=(QUEUE,), lease_seconds=3600, crds="none", cluster=False
    )


def _counts(world: SandboxWorld) -> tuple[dict[str, int], dict[str, int]]:
    return dict(world.wandb.log.counts), dict(world.kube.log.counts)


@contextlib.asynccontextmanager
async def _scratch_world() -> AsyncIterator[tuple[SandboxWorld, str]]:
    """A fresh sandbox and a scratch directory for one measurement, both removed after it."""
    scratch = await asyncio.to_thread(tempfile.TemporaryDirectory, prefix="launch-bench-")
    try:
        async with SandboxWorld(_settings(), Path(scratch.name)) as world:
            yield world, scratch.name
    finally:
        await asyncio.to_thread(scratch.cleanup)


async def measure_dispatch(
    launcher: AgentLauncher,
    spec: dict[str, Any],
    runs: int,
    *,
    idle_seconds: float,
    say: Say,
) -> dict[str, Any]:
    async with _scratch_world() as (world, scratch):
        return await _dispatch(
            world,
            launcher,
            spec=spec,
            runs=runs,
            idle_seconds=idle_seconds,
            say=say,
            scratch=scratch,
        )


async def _dispatch(
    world: SandboxWorld,
    launcher: AgentLauncher,
    *,
    spec: dict[str, Any],
    runs: int,
    idle_seconds: float,
    say: Say,
    scratch: str,
) -> dict[str, Any]:
    items = [world.state.push_by_name(ENTITY, "model-registry", QUEUE, spec) for _ in range(runs)]
    creates = Creates()
    world.kube.store.listeners.append(creates.listener)
    say(f"{launcher.name}: {runs} items queued; starting the agent")
    spawned_wall = time.time()
    sandbox_cpu = time.process_time()
    agent = await spawn(launcher, world, Path(scratch))
    try:
        # Reference: 21 runs/s; a generous cap that still ends a broken run.
        cap = 120 + runs / 2
        await wait_for(f"{runs} Jobs", lambda: len(creates.times) >= runs, cap, agent)
        t_last = max(creates.times.values()) - spawned_wall
        sandbox_cpu = time.process_time() - sandbox_cpu
        dispatch_usage = await agent.sample()
        # Watches are logged with the whole time they stayed open: not handler work.
        handler = sum(
            e.seconds for e in [*world.wandb.log, *world.kube.log] if e.key[:5] != "WATCH"
        )
        await wait_for(
            "every item acknowledged",
            lambda: all(i.state is ItemState.CLAIMED for i in items),
            60,
            agent,
        )
        wandb_counts, kube_counts = _counts(world)
        pops = [t for i in items for t, s in i.history if s is ItemState.LEASED]
        t_first_pop = min(pops) - spawned_wall
        t_first = min(creates.times.values()) - spawned_wall
        lat = latencies(items, creates)
        say(f"{launcher.name}: {runs} Jobs in {t_last:.2f} s; marking them succeeded")

        await asyncio.sleep(1.0)
        marked = mark_all_succeeded(world, ENTITY, PROJECT)
        completion = await _until_finished(world, launcher, agent, marked)
        await asyncio.sleep(2.0)
        say(
            f"{launcher.name}: all finished after {completion:.1f} s; idle for {idle_seconds:.0f} s"
        )
        before = _counts(world)
        await asyncio.sleep(idle_seconds)
        after = _counts(world)
        usage = await agent.sample()
    finally:
        await agent.stop(launcher.graceful_stop(world, agent.process))
        world.kube.store.listeners.remove(creates.listener)
    idle_wandb = delta(after[0], before[0])
    idle_kube = delta(after[1], before[1])
    per_hour = 3600 / idle_seconds
    return {
        "agent": launcher.name,
        "runs": runs,
        "seconds_to_first_pop": round(t_first_pop, 3),
        "seconds_to_first_create": round(t_first, 3),
        "seconds_to_last_create": round(t_last, 3),
        "runs_per_second": round(runs / t_last, 1),
        "runs_per_second_first_to_last": round((runs - 1) / max(t_last - t_first, 1e-9), 1),
        "pop_to_create_ms": summary_ms(lat),
        "wandb_requests": requests(wandb_counts),
        "wandb_requests_per_run": round(requests(wandb_counts) / runs, 2),
        "kube_requests": requests(kube_counts),
        "kube_requests_per_run": round(requests(kube_counts) / runs, 2),
        "wandb_operations": delta(wandb_counts, {}),
        "kube_routes": delta(kube_counts, {}),
        "completion_seconds": round(completion, 2),
        "idle_window_seconds": idle_seconds,
        "idle_wandb_requests_per_hour": round(sum(idle_wandb.values()) * per_hour),
        "idle_wandb_operations": idle_wandb,
        "idle_kube_requests_per_hour": round(sum(idle_kube.values()) * per_hour),
        "cpu_seconds_dispatch": dispatch_usage["cpu_seconds"],
        # Start-up included: the agent's CPU from its spawn to the last workload, per run.
        "cpu_ms_per_run": round(dispatch_usage["cpu_seconds"] * 1000 / runs, 3),
        # The sandbox's share (this process): its CPU over the dispatch and its handlers' time.
        "sandbox_cpu_seconds_dispatch": round(sandbox_cpu, 2),
        "sandbox_handler_seconds_dispatch": round(handler, 2),
        "cpu_seconds_total": usage["cpu_seconds"],
        "peak_rss_mb": usage["peak_rss_mb"],
        "peak_tree_rss_mb": usage["peak_tree_rss_mb"],
        "processes": usage["processes"],
    }


async def _until_finished(
    world: SandboxWorld, launcher: AgentLauncher, agent: AgentProcess, runs: int
) -> float:
    started = time.monotonic()
    while launcher.finished(world, await agent.text()) < runs:
        if agent.process.returncode is not None:
            raise BenchError("the agent exited before it finished every run", agent)
        if time.monotonic() - started > 120:
            raise BenchError("timed out after 120 s waiting for the agent to finish", agent)
        await asyncio.sleep(0.25)
    return time.monotonic() - started


def running_pod(job: dict[str, Any]) -> dict[str, Any]:
    """The Running pod the Job controller and kubelet would make of `job`."""
    meta = job["metadata"]
    template = job["spec"]["template"]
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    labels |= {"batch.kubernetes.io/job-name": meta["name"], "job-name": meta["name"]}
    containers = template["spec"]["containers"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{meta['name']}-pod",
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": dict((template.get("metadata") or {}).get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template["spec"] | {"nodeName": "sandbox-node"},
        "status": {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                }
                for c in containers
            ],
        },
    }


async def _start_pods(world: SandboxWorld) -> int:
    """A Running pod for every Job, in slices so the servers keep answering meanwhile."""
    jobs = world.kube.objects.list("jobs")
    for n, job in enumerate(jobs):
        pod = running_pod(job)
        status = pod.pop("status")
        world.kube.objects.create("pods", pod, namespace=job["metadata"]["namespace"])
        world.kube.objects.patch_status(
            "pods", pod["metadata"]["name"], status, namespace=job["metadata"]["namespace"]
        )
        if n % 100 == 99:
            await asyncio.sleep(0)
    return len(jobs)


async def measure_tracking(
    launcher: AgentLauncher,
    spec: dict[str, Any],
    runs: int,
    *,
    window_seconds: float,
    say: Say,
) -> dict[str, Any]:
    async with _scratch_world() as (world, scratch):
        return await _tracking(
            world,
            launcher,
            spec=spec,
            runs=runs,
            window_seconds=window_seconds,
            say=say,
            scratch=scratch,
        )


async def _tracking(
    world: SandboxWorld,
    launcher: AgentLauncher,
    *,
    spec: dict[str, Any],
    runs: int,
    window_seconds: float,
    say: Say,
    scratch: str,
) -> dict[str, Any]:
    items = [world.state.push_by_name(ENTITY, "model-registry", QUEUE, spec) for _ in range(runs)]
    creates = Creates()
    world.kube.store.listeners.append(creates.listener)
    say(f"tracking: {runs} items queued; starting {launcher.name}")
    agent = await spawn(launcher, world, Path(scratch))
    result: dict[str, Any] = {"runs": runs}
    try:
        took = await wait_for(
            f"{runs} Jobs created and acknowledged",
            lambda: len(creates.times) >= runs and all(i.state is ItemState.CLAIMED for i in items),
            120 + runs / 5,
            agent,
            tick=0.25,
        )
        result["dispatch_seconds"] = round(took, 2)
        result["dispatch_runs_per_second"] = round(runs / took, 1)
        say(f"tracking: {runs} runs dispatched in {took:.1f} s; starting their pods")
        await _start_pods(world)
        await asyncio.sleep(5.0)
        before = _counts(world)
        say(f"tracking: {runs} runs running; measuring for {window_seconds:.0f} s")
        await asyncio.sleep(window_seconds)
        after = _counts(world)
        usage = await agent.sample()
        watches = world.kube.store.watchers()
        per_minute = 60 / window_seconds
        wandb_ops, kube_routes = delta(after[0], before[0]), delta(after[1], before[1])
        stop_checks = wandb_ops.get("RunStoppedStatus", 0) * per_minute
        others = sum(wandb_ops.values()) * per_minute - stop_checks
        result |= {
            "window_seconds": window_seconds,
            "watch_connections": len(watches),
            "wandb_requests_per_minute": round(sum(wandb_ops.values()) * per_minute, 1),
            # Every run is younger than an hour here: the stop checks run at their budget.
            "stop_checks_per_minute": round(stop_checks, 1),
            # The policy before tiers: every run every 10 s, 100 runs a request.
            "old_policy_wandb_requests_per_minute": round(
                others + OLD_POLICY.requests_per_minute(young=runs, old=0), 1
            ),
            "wandb_operations": wandb_ops,
            "kube_requests_per_minute": round(sum(kube_routes.values()) * per_minute, 1),
            "kube_routes": kube_routes,
            "peak_rss_mb": usage["peak_rss_mb"],
            "cpu_seconds": usage["cpu_seconds"],
        }
    finally:
        await agent.stop(launcher.graceful_stop(world, agent.process))
        world.kube.store.listeners.remove(creates.listener)
    # The restarted agent adopts runs that started two hours ago: the older tier's load.
    world.kube.objects.backdate("jobs", AGED_SECONDS)
    result["restart"] = await _restart(
        world, launcher, say=say, scratch=scratch, window_seconds=window_seconds
    )
    return result


async def _restart(
    world: SandboxWorld,
    launcher: AgentLauncher,
    *,
    say: Say,
    scratch: str,
    window_seconds: float,
) -> dict[str, Any]:
    jobs_before = len(world.kube.objects.list("jobs"))
    pops_before = sum(i.pops for i in world.state.items.values())
    say(f"restart: the agent stopped with {jobs_before} Jobs running; starting it again")
    agent: AgentProcess = await spawn(launcher, world, Path(scratch))
    try:
        found = await agent.log_match(ADOPTED, within=120)
        if found is None:
            raise BenchError("the restarted agent never logged how many runs it adopted", agent)
        seconds, match = found
        await asyncio.sleep(2.0)
        hours = AGED_SECONDS / 3600
        say(f"restart: runs started {hours:.0f} h ago; measuring for {window_seconds:.0f} s")
        before = _counts(world)[0]
        await asyncio.sleep(window_seconds)
        wandb_ops = delta(_counts(world)[0], before)
        usage = await agent.sample()
    finally:
        await agent.stop(launcher.graceful_stop(world, agent.process))
    return {
        "seconds_to_adopt": round(seconds, 2),
        "adopted": int(match.group(1)),
        "jobs_created_again": len(world.kube.objects.list("jobs")) - jobs_before,
        "items_popped_again": sum(i.pops for i in world.state.items.values()) - pops_before,
        "aged_wandb_requests_per_minute": round(sum(wandb_ops.values()) * 60 / window_seconds, 1),
        "aged_wandb_operations": wandb_ops,
        "peak_rss_mb": usage["peak_rss_mb"],
    }
