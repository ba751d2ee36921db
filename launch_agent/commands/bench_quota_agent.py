"""`launch-agent bench quota-rebuild`: how long `quota.mode: agent` takes to rebuild its engine
from the cluster after a restart, and the longest single event-loop callback while it does.

The agent's workloads are built in memory as the informers would hand them over (a stamped,
suspended or admitted Job per run), spread over `--leaves` leaves of one root and over
`--hours` of waiting history; then `QuotaAdmission.rebuild` runs on the event loop while a probe
task measures the longest gap between its own turns (the guardrails allow 100 ms). No network:
this isolates the rebuild from the informers' list, which `bench dispatch` measures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from launch_agent.model.config import AgentConfig
from launch_agent.model.labels import RUN_QUEUE_ITEM_ID
from launch_agent.quota import PodSet
from launch_agent.quota.requests import ADMITTED, STAMP, QuotaStamp
from launch_agent.runtime.admission.quota import QuotaAdmission
from launch_agent.runtime.metrics import Metrics
from launch_agent.runtime.runs import RunRecord, RunTable
from launch_agent.runtime.specs import SpecStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
CPU = 10**9


def register_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser(
        "quota-rebuild",
        help="quota.mode agent: rebuild of the engine from the cluster after a restart",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("--leaves", type=int, default=100, help="leaves under the root (100)")
    bench.add_argument("--running", type=int, default=2000, help="admitted runs (2000)")
    bench.add_argument("--waiting", type=int, default=10_000, help="suspended runs (10000)")
    bench.add_argument("--hours", type=float, default=24.0, help="waiting history (24)")
    bench.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    bench.set_defaults(handler=_run)


def build_runs(leaves: int, running: int, waiting: int, hours: float) -> RunTable:
    """Stamped Jobs as the tracker adopts them: 1 CPU each, round-robin over the leaves."""
    runs = RunTable()
    total = running + waiting
    start = Fraction(int(NOW.timestamp())) - Fraction(int(hours * 3600))
    for i in range(total):
        stamp = QuotaStamp(
            f"l{i % leaves}",
            0,
            start + Fraction(int(hours * 3600) * i, max(total, 1)),
            (PodSet(1, {"cpu": CPU}),),
        )
        annotations = {STAMP: stamp.dump(), RUN_QUEUE_ITEM_ID: f"r{i}"}
        admitted = i < running
        if admitted:
            annotations[ADMITTED] = str(stamp.enqueued)
        obj: dict[str, Any] = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": f"j{i}", "namespace": "bench", "annotations": annotations},
            "spec": {"suspend": not admitted},
        }
        runs.add(
            RunRecord(
                f"r{i}", "q", "e", "p", f"r{i}", "bench", f"j{i}", "batch/v1", "Job", last=obj
            )
        )
    return runs


def build_tree(leaves: int, running: int) -> dict[str, Any]:
    """Every leaf is guaranteed its share of the admitted runs and may borrow up to twice it."""
    share = max(1, -(-running // leaves))
    children = [
        {"name": f"l{i}", "min": {"cpu": share}, "max": {"cpu": 2 * share}} for i in range(leaves)
    ]
    capacity = share * leaves
    return {
        "root": {
            "name": "root",
            "min": {"cpu": capacity},
            "max": {"cpu": capacity},
            "children": children,
        }
    }


async def measure(leaves: int, running: int, waiting: int, hours: float) -> dict[str, Any]:
    config = AgentConfig.model_validate(
        {"max_jobs": -1, "quota": {"mode": "agent", "tree": build_tree(leaves, running)}}
    )
    runs = await asyncio.to_thread(build_runs, leaves, running, waiting, hours)
    admission = QuotaAdmission.from_config(
        config,
        SpecStore("no-queue-specs", Metrics()),  # never read: no spec is loaded
        runs,
        now=lambda: NOW,
    )
    longest = 0.0
    done = asyncio.Event()

    async def probe() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            longest = max(longest, now - last)
            last = now

    async with asyncio.TaskGroup() as group:
        group.create_task(probe(), name="bench-loop-probe")
        started = time.perf_counter()
        await admission.rebuild()
        seconds = time.perf_counter() - started
        done.set()
    engine = admission.engine
    return {
        "leaves": leaves,
        "running": running,
        "waiting": waiting,
        "hours": hours,
        "rebuild_seconds": round(seconds, 3),
        "longest_callback_ms": round(longest * 1000, 1),
        "engine_runs": len(engine.runs),
        "root_cpu": engine.usage("root").get("cpu", 0) // CPU,
    }


def _run(args: argparse.Namespace) -> int:
    result = asyncio.run(measure(args.leaves, args.running, args.waiting, args.hours))
    print(
        f"rebuilt {result['running']} admitted + {result['waiting']} waiting runs"
        f" ({result['leaves']} leaves, {result['hours']:g} h of history) in"
        f" {result['rebuild_seconds']:.2f} s; longest event-loop callback"
        f" {result['longest_callback_ms']:.0f} ms; root charged {result['root_cpu']} cpu"
    )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return 0
