"""`launch-agent bench tracking`: informers and `assess` at 10,000 running runs.

What tracking costs when an agent watches many runs, measured in one process against the
loopback API server (seeded from Python with N Jobs and N running pods, labelled as the agent
labels them):

1. **sync**: seconds for a fresh `InformerSet` (Jobs + pods, one namespace) to list everything,
   which is what a restarted agent does before it adopts its runs, and the requests it took;
2. **memory**: RSS growth from the informer caches and client (the server's own objects are
   already in memory before the informers start, so they do not count);
3. **idle traffic**: requests completed during a quiet interval, and watches open (no per-run
   polling: neither depends on N; each watch is reopened every 300 s);
4. **burst**: every Job completes at once; seconds until the informers delivered all N
   MODIFIED events and `assess` judged each run `succeeded`;
5. **assess**: calls per second of the pure function on one Job with one pod.

Numbers only; nothing passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from launch_agent.adapters.kube import (
    InformerEvent,
    InformerSet,
    InformerSettings,
    KubeClient,
    Resource,
)
from launch_agent.adapters.kube.cache import tracking_view
from launch_agent.model.run_state import RunState
from launch_agent.sandbox.kube import KubeApiServer, write_kubeconfig
from launch_agent.tracking import assess

NS = "default"
JOBS = Resource("batch", "v1", "Job", "jobs")
PODS = Resource("", "v1", "Pod", "pods")
SELECTOR = "launch-agent.io/agent=bench"


def _rss_bytes() -> int:
    # Current (not peak) resident set: the growth from one phase to the next is what matters.
    with open("/proc/self/statm", encoding="ascii") as handle:
        pages = int(handle.read().split()[1])
    return pages * 4096


def _job(i: int) -> dict[str, Any]:
    labels = {"launch-agent.io/agent": "bench", "launch-agent.io/run-id": f"r{i:05d}"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"run-{i:05d}", "labels": labels},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "ghcr.io/acme/train:1.2"}],
                },
            },
        },
    }


def _pod(i: int, job: dict[str, Any]) -> dict[str, Any]:
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"run-{i:05d}-abcde",
            "labels": {**meta["labels"], "job-name": meta["name"]},
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "main", "image": "ghcr.io/acme/train:1.2"}]},
    }


def _seed(kube: KubeApiServer, runs: int) -> None:
    running = {
        "phase": "Running",
        "containerStatuses": [
            {
                "name": "main",
                "image": "ghcr.io/acme/train:1.2",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-11-30T00:00:00Z"}},
            }
        ],
    }
    for i in range(runs):
        job = kube.objects.create("jobs", _job(i), NS)
        kube.objects.patch_status("jobs", job["metadata"]["name"], {"active": 1, "ready": 1}, NS)
        pod = kube.objects.create("pods", _pod(i, job), NS)
        kube.objects.patch_status("pods", pod["metadata"]["name"], running, NS)


def measure_assess(seconds: float = 1.0) -> float:
    job = _job(0)
    job["status"] = {"active": 1, "ready": 1}
    pod = {
        "metadata": {"name": "p"},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "main", "image": "x", "state": {"running": {}}}],
        },
    }
    now = datetime.now(UTC)
    count = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(1000):
            assess(job, [pod], now)
        count += 1000
    return count / (time.perf_counter() - start)


async def measure(runs: int, idle_seconds: float, tmp: Path, view: str) -> dict[str, Any]:
    async with KubeApiServer(host="127.0.0.1", port=0) as kube:
        seed_start = time.perf_counter()
        _seed(kube, runs)
        seed_seconds = time.perf_counter() - seed_start
        path = await asyncio.to_thread(write_kubeconfig, tmp / "kubeconfig", kube.url, NS)
        done: set[str] = set()
        all_done = asyncio.Event()

        async def handler(event: InformerEvent) -> None:
            if event.resource.kind != "Job" or event.type != "MODIFIED":
                return
            if assess(event.obj, [], datetime.now(UTC)).state is RunState.SUCCEEDED:
                done.add(event.obj["metadata"]["name"])
                if len(done) == runs:
                    all_done.set()

        rss_before = await asyncio.to_thread(_rss_bytes)
        kube.log.reset()
        async with await KubeClient.from_kubeconfig(str(path)) as client:
            settings = InformerSettings(label_selector=SELECTOR)
            if view == "tracking":
                settings.transform = tracking_view
            async with InformerSet(client, handler, settings) as informers:
                sync_start = time.perf_counter()
                informers.add(JOBS, NS)
                informers.add(PODS, NS)
                await informers.wait_synced()
                sync_seconds = time.perf_counter() - sync_start
                sync_requests = kube.log.count()
                rss_synced = await asyncio.to_thread(_rss_bytes)

                kube.log.reset()
                await asyncio.sleep(idle_seconds)
                idle_requests = kube.log.count()
                watches = len(kube.store.watchers())

                complete = {
                    "conditions": [{"type": "Complete", "status": "True"}],
                    "active": 0,
                    "succeeded": 1,
                }
                burst_start = time.perf_counter()
                for i in range(runs):
                    kube.objects.patch_status("jobs", f"run-{i:05d}", complete, NS)
                    if i % 500 == 499:
                        await asyncio.sleep(0)  # let the server stream while we write
                await asyncio.wait_for(all_done.wait(), timeout=600)
                burst_seconds = time.perf_counter() - burst_start
                cached = sum(len(i.cache) for i in informers.informers.values())
    return {
        "benchmark": "tracking",
        "runs": runs,
        "cached_view": view,
        "seed_seconds": round(seed_seconds, 2),
        "sync_seconds": round(sync_seconds, 3),
        "sync_requests": sync_requests,
        "objects_cached": cached,
        "informer_rss_mib": round((rss_synced - rss_before) / 2**20, 1),
        "idle_seconds": idle_seconds,
        "idle_requests": idle_requests,
        "open_watches": watches,
        "burst_seconds": round(burst_seconds, 3),
        "burst_events_per_second": round(runs / burst_seconds, 1),
        "python": platform.python_version(),
    }


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "tracking",
        help="informer sync, memory, idle traffic and completion burst at N running runs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--runs", type=int, default=10_000, help="running runs (default 10000)")
    parser.add_argument(
        "--idle-seconds", type=float, default=10.0, help="quiet interval measured (default 10)"
    )
    parser.add_argument(
        "--view",
        choices=("full", "tracking"),
        default="tracking",
        help="what the informers cache: whole objects (minus managedFields) or only what"
        " tracking reads (`tracking_view`, the default)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the numbers as JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        r = asyncio.run(measure(args.runs, args.idle_seconds, Path(tmp), args.view))
    r["assess_per_second"] = round(measure_assess(), 1)
    print(
        f"tracking: {r['runs']:,} running runs (Jobs + pods): informer sync"
        f" {r['sync_seconds']} s in {r['sync_requests']} requests; caches"
        f" {r['objects_cached']:,} objects ({r['cached_view']} view), +{r['informer_rss_mib']}"
        " MiB RSS;"
        f" idle {r['idle_requests']} requests in {r['idle_seconds']:.0f} s over"
        f" {r['open_watches']} watches; all complete at once: {r['burst_seconds']} s"
        f" ({r['burst_events_per_second']:,.0f} events/s); assess"
        f" {r['assess_per_second']:,.0f}/s"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=2) + "\n")
    return 0
