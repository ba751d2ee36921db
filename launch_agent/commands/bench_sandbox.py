"""`launch-agent bench sandbox`: how fast the sandbox Kubernetes API server is.

The server runs in its own process (`python -m launch_agent.sandbox.kube`), the client in
this one: the agent's own Kubernetes client (`launch_agent.adapters.kube.KubeClient`, built on
kubernetes_asyncio), so the numbers are what the agent's benchmarks will meet. Measured:

- creates/s: N Jobs POSTed with `fieldValidation=Strict` (as the agent does), C in flight;
  and the server's CPU time per create (from /proc), which does not depend on what else the
  machine is running: 1 / that is the rate one free core sustains;
- a full LIST of the N objects;
- watches over the N objects: W concurrent watch streams from resourceVersion 0 (each replays
  all N objects as ADDED), events/s over all streams;
- the server's resident memory (RSS) after the creates, after the LIST, at its peak while the
  watches stream (sampled every 50 ms) and after them: bounded memory means the peak stays at
  the post-LIST figure however many streams replay the N objects (try `--watchers 16`).

Prints numbers and writes them as JSON with `--json FILE`; never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from launch_agent.adapters.kube.client import KubeClient
from launch_agent.sandbox.kube import write_kubeconfig

TARGET_CREATES_PER_SECOND = 1000


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text(encoding="utf-8").splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def _job(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"bench-{i:06d}",
            "labels": {"launch-agent.io/agent": "bench", "launch-agent.io/run-id": f"run-{i}"},
        },
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": {"launch-agent.io/run-id": f"run-{i}"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox:1.36",
                            "args": ["python", "train.py"],
                            "env": [{"name": "WANDB_RUN_ID", "value": f"run-{i}"}],
                            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
                        }
                    ],
                },
            },
        },
    }


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time the process has used (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8").rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _start_server(event_log: int) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "launch_agent.sandbox.kube",
        "--event-log-size",
        str(event_log),
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    async with asyncio.timeout(60):
        line = (await proc.stdout.readline()).decode().strip()
    if not line.startswith("KUBE_URL="):
        proc.kill()
        raise RuntimeError(f"the sandbox API server did not start: {line!r}")
    return proc, line.split("=", 1)[1]


async def _sample_peak(pid: int, peak: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        rss = await loop.run_in_executor(None, _rss_mb, pid)
        if rss is not None:
            peak[0] = max(peak[0], rss)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(0.05):
                await stop.wait()


async def run(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    proc, url = await _start_server(args.event_log)
    results: dict[str, Any] = {
        "benchmark": "sandbox",
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "objects": args.objects,
        "concurrency": args.concurrency,
        "watchers": args.watchers,
        "target_creates_per_s": TARGET_CREATES_PER_SECOND,
    }
    try:
        directory = await loop.run_in_executor(None, tempfile.mkdtemp)
        config = Path(directory) / "kubeconfig"
        await loop.run_in_executor(None, write_kubeconfig, config, url, "default")
        results["server_rss_mb_idle"] = await loop.run_in_executor(None, _rss_mb, proc.pid)
        async with await KubeClient.from_kubeconfig(str(config)) as kube:
            jobs = await kube.resolve("batch/v1", "Job")
            for i in range(50):  # warm up connections, discovery and the strict schema
                await kube.create(_job(args.objects + i), "default")
            queue = iter(range(args.objects))

            async def worker() -> None:
                for i in queue:
                    await kube.create(_job(i), "default")

            cpu_before = await loop.run_in_executor(None, _cpu_seconds, proc.pid)
            client_before = time.process_time()
            start = time.perf_counter()
            async with asyncio.TaskGroup() as tg:
                for n in range(args.concurrency):
                    tg.create_task(worker(), name=f"bench-create-{n}")
            elapsed = time.perf_counter() - start
            client_cpu = time.process_time() - client_before
            cpu_after = await loop.run_in_executor(None, _cpu_seconds, proc.pid)
            results["creates_per_s"] = round(args.objects / elapsed, 1)
            results["client_cpu_ms_per_create"] = round(client_cpu / args.objects * 1000, 3)
            if cpu_before is not None and cpu_after is not None:
                # Independent of what else the machine runs: the server's CPU per create, and
                # the create rate one fully available core would sustain.
                per_create = (cpu_after - cpu_before) / args.objects
                results["server_cpu_ms_per_create"] = round(per_create * 1000, 3)
                if per_create > 0:
                    results["server_creates_per_cpu_second"] = round(1 / per_create, 1)
            results["create_ms_mean"] = round(elapsed / args.objects * args.concurrency * 1000, 2)
            results["server_rss_mb_after_creates"] = await loop.run_in_executor(
                None, _rss_mb, proc.pid
            )

            start = time.perf_counter()
            listed = await kube.list(jobs, "default", page_size=args.objects + 100)
            results["list_seconds"] = round(time.perf_counter() - start, 3)
            results["listed"] = len(listed.items)
            del listed
            # One LIST of N objects is one JSON document of N objects: the allocator keeps
            # that high-water mark, so the watch peak is compared with this figure.
            results["server_rss_mb_after_list"] = await loop.run_in_executor(
                None, _rss_mb, proc.pid
            )

            total = args.objects + 50

            async def watch_all() -> int:
                seen = 0
                stream = kube.watch_stream(
                    jobs, "default", resource_version="0", timeout_seconds=120
                )
                try:
                    async for event in stream:
                        if event.get("type") == "ADDED":
                            seen += 1
                            if seen >= total:
                                break
                finally:
                    await stream.aclose()
                return seen

            peak = [0.0]
            stop = asyncio.Event()
            start = time.perf_counter()
            async with asyncio.TaskGroup() as tg:
                sampler = tg.create_task(_sample_peak(proc.pid, peak, stop), name="bench-rss")
                watchers = [
                    tg.create_task(watch_all(), name=f"bench-watch-{n}")
                    for n in range(args.watchers)
                ]
                await asyncio.gather(*watchers)
                stop.set()
                await sampler
            elapsed = time.perf_counter() - start
            events = sum(w.result() for w in watchers)
            results["watch_events"] = events
            results["watch_events_per_s"] = round(events / elapsed, 1)
            results["watch_seconds"] = round(elapsed, 3)
            results["server_rss_mb_peak_during_watches"] = round(peak[0], 1)
            results["server_rss_mb_after_watches"] = await loop.run_in_executor(
                None, _rss_mb, proc.pid
            )
    finally:
        proc.terminate()
        await proc.wait()
    return results


def _main(args: argparse.Namespace) -> int:
    results = asyncio.run(run(args))
    width = max(len(k) for k in results)
    for key, value in results.items():
        print(f"{key:<{width}}  {value}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "sandbox",
        help="creates/s, list and watch throughput and memory of the sandbox Kubernetes API server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--objects", type=int, default=10_000, help="Jobs to create (default 10000)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=16, help="creates in flight (default 16)"
    )
    parser.add_argument(
        "--watchers", type=int, default=4, help="concurrent watch streams (default 4)"
    )
    parser.add_argument(
        "--event-log", type=int, default=10_000, help="server event log per resource"
    )
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    parser.set_defaults(handler=_main)
